"""results.md's "Across Kubernetes versions" section (benchmarks/versions_table): rows of a
version run again replace its old rows and note, the others stay, the section stays last, and a
``python -m benchmarks`` run keeps it."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import versions_table as vt
from benchmarks.common import Row, fmt_table
from benchmarks.run import SECTION as STACK_SECTION
from benchmarks.run import merge


def _rows(version: str, ours: str = "p50 1 ms", date: str = "d1") -> list[vt.VersionRow]:
    label = f"{version} (Trainer v2.2.1, Kueue v0.19.2)"
    return [
        vt.VersionRow(label, "forward: 256 MB", ours, "kubectl x", "1.1x", "3.0", date, "cmd"),
        vt.VersionRow(
            label, "exec round trip of `true`", ours, "kubectl x", "2x", "3.0", date, "c"
        ),
    ]


def test_render_then_parse_gives_the_rows_and_notes_back() -> None:
    rows = _rows("v1.31.0") + _rows("v1.37.2")
    text = vt.render(rows, {"v1.31.0": "alike"})
    got, notes = vt.parse(text)
    assert {(r.version, r.what) for r in got} == {(r.version, r.what) for r in rows}
    assert notes == {"v1.31.0": "alike"}
    assert text.startswith(vt.SECTION + "\n") and vt.HEAD in text


def test_rows_sort_by_version_number_then_exec_before_forward() -> None:
    text = vt.render(_rows("v1.100.0") + _rows("v1.37.2") + _rows("v1.9.1"), {})
    got, _ = vt.parse(text)
    assert [r.version for r in got] == ["v1.9.1"] * 2 + ["v1.37.2"] * 2 + ["v1.100.0"] * 2
    assert got[0].what.startswith("exec") and got[1].what.startswith("forward")


def test_a_version_run_again_replaces_its_rows_and_note_only() -> None:
    old = vt.render(_rows("v1.31.0", "old") + _rows("v1.33.13", "keep"), {"v1.31.0": "n1"})
    new = vt.merge(old, _rows("v1.31.0", "new", "d2"), {})
    got, notes = vt.parse(new)
    by = {(r.version, r.ours) for r in got}
    assert by == {("v1.31.0", "new"), ("v1.33.13", "keep")}
    assert notes == {}  # the re-run version's old note goes with its old rows


def test_a_cell_has_no_pipe_or_line_break() -> None:
    row = vt.VersionRow("v1.31.0", "w", "a | b\nc", "k", "r", "l", "d", "x | y")
    line = vt.fmt(row)
    assert line.count(" | ") == len(vt.COLUMNS) - 1 and "\n" not in line
    assert vt.parse(vt.render([row], {}))[0][0].ours == "a / b c"


def test_split_takes_the_section_out_wherever_it_is() -> None:
    section = vt.render(_rows("v1.31.0"), {})
    doc = "# Benchmark results\n\nmain\n\n" + section + "\n## Later\n\nlater\n"
    rest, got = vt.split(doc)
    assert got == section and vt.SECTION not in rest
    assert rest == "# Benchmark results\n\nmain\n\n## Later\n\nlater\n"
    assert vt.split("# only\n") == ("# only\n", "")


def test_write_puts_the_section_last_and_merges(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Benchmark results\n\nmain\n\n" + STACK_SECTION + "\n\nstack\n")
    vt.write(out, _rows("v1.31.0"), {"v1.31.0": "first"})
    vt.write(out, _rows("v1.37.2"), {})
    text = out.read_text()
    assert text.index(STACK_SECTION) < text.index(vt.SECTION)
    assert text.count(vt.SECTION) == 1
    assert {r.version for r in vt.parse(vt.split(text)[1])[0]} == {"v1.31.0", "v1.37.2"}
    assert "- v1.31.0: first" in text


def test_a_benchmarks_run_keeps_the_section() -> None:
    section = vt.render(_rows("v1.31.0"), {"v1.31.0": "n"})
    old = "# Benchmark results\n\nold main\n\n" + STACK_SECTION + "\n\nold stack\n\n" + section
    row = Row("Real stack: x", "9", "b", "r", "g", "yes", bench="realstack")
    new_stack = STACK_SECTION + "\n\n" + fmt_table([row])
    doc = merge(old, "# Benchmark results\n\nnew main\n", new_stack)
    assert "new main" in doc and "| Real stack: x | 9 |" in doc and "old stack" not in doc
    assert doc.rstrip().endswith(section.rstrip())
    doc = merge(old, None, None)
    assert doc.count(vt.SECTION) == 1 and "old stack" in doc


def test_the_runner_names_its_kubectl_in_the_command() -> None:
    from benchmarks.run import _command

    args = argparse.Namespace(smoke=False, only="forward", realstack_dir="", kubectl="/k/kubectl")
    assert _command(args).endswith("--only forward --kubectl /k/kubectl")
