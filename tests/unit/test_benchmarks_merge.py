"""benchmarks/run.py: a partial run (``--only``) merges its rows into results.md, keeping the
others (the full runner is exercised by tests/integration/test_benchmarks_smoke.py)."""

from __future__ import annotations

import argparse

from benchmarks.common import Row, fmt_table
from benchmarks.run import SECTION, merge, merge_rows, rerun_stamp, split

ARGS = argparse.Namespace(smoke=False, only="forward", realstack_dir="")


def row(what: str, ours: str, bench: str = "forward") -> Row:
    return Row(what, ours, "b", "r", "g", "yes", bench=bench)


def part(rows: list[Row], notes: list[str]) -> str:
    text = "# Benchmark results\n\nRun: then\n\n" + fmt_table(rows)
    return text + ("\nNotes:\n\n" + "".join(f"- {n}\n" for n in notes) if notes else "")


def test_rows_replace_theirs_in_place_and_new_ones_go_last() -> None:
    old = part([row("A (n=5)", "1", "roundtrip"), row("Fwd (n=5)", "old")], ["keep me"])
    got = merge_rows(old, [row("Fwd (n=7)", "new"), row("Fwd 2 (n=7)", "two")], "Rows x: now")
    lines = got.splitlines()
    table = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [t.split(" | ")[0] for t in table] == ["| A (n=5)", "| Fwd (n=7)", "| Fwd 2 (n=7)"]
    assert "| Fwd (n=5) |" not in got and "| new |" in got
    assert lines[-2:] == ["- keep me", "- Rows x: now"]


def test_a_second_partial_run_replaces_its_stamp() -> None:
    old = part([row("A", "1", "roundtrip")], [])
    once = merge_rows(old, [row("Fwd", "1")], "Rows of `forward` from a later run: then · x")
    assert once.count("\nNotes:\n\n") == 1 and "|\n\nNotes:" in once
    twice = merge_rows(once, [row("Fwd", "2")], "Rows of `forward` from a later run: now · y")
    assert "then · x" not in twice and twice.endswith(
        "- Rows of `forward` from a later run: now · y\n"
    )
    assert twice.count("| Fwd |") == 1


def test_stamp_names_the_benchmarks_and_the_command() -> None:
    stamp = rerun_stamp([row("Fwd", "1")], ARGS, "2026-12-02 04:00 UTC", "1.0 at start")
    assert stamp.startswith("Rows of `forward` from a later run: 2026-12-02 04:00 UTC")
    assert "`python -m benchmarks --only forward`" in stamp


def test_the_section_is_kept_apart() -> None:
    main = part([row("A", "1", "roundtrip")], ["n"])
    section = SECTION + "\n\n" + fmt_table([row("Real stack: x", "9", "realstack")])
    doc = merge(main + "\n" + section, merge_rows(main, [row("Fwd", "1")], "Rows: s"), None)
    got_main, got_section = split(doc)
    assert "| Fwd |" in got_main and "| Real stack: x |" not in got_main
    assert got_section.startswith(SECTION) and "| Real stack: x | 9 |" in got_section
