"""``python -m devtools.realstack matrix``: tests/realcluster on a stack of each Trainer/Kueue
pair of versions.MATRIX, one after another, and the results as a table in docs/real-cluster.md
(between the ``<!-- matrix -->`` markers) and in docs/real-cluster-matrix.json, which keeps the
rows of pairs not run this time (it is committed, so a partial run on any machine merges)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from devtools.realstack import gobuild, stack
from devtools.realstack.context import NodeShape
from devtools.realstack.procs import StackError
from devtools.realstack.versions import MATRIX, NOT_SERVED, Versions, normalise

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "real-cluster.md"
SAVED = REPO / "docs" / "real-cluster-matrix.json"
BEGIN, END = "<!-- matrix -->", "<!-- /matrix -->"
# tests/realcluster decides the result; tests/differential (when the checkout has it) reads the
# stack the same way and gets a column of its own
SUITES = {"realcluster": "tests/realcluster", "differential": "tests/differential"}
SUITE_TIMEOUT = 2400  # seconds per suite and pair


def _pairs(spec: str) -> list[tuple[str, str | None, str]]:
    if not spec:
        return list(MATRIX)
    notes = {(t, k): note for t, k, note in MATRIX}
    out: list[tuple[str, str | None, str]] = []
    for item in spec.split(","):
        trainer, _, kueue = item.partition(":")
        pair = (normalise(trainer), normalise(kueue) if kueue else None)
        out.append((*pair, notes.get(pair, "given")))
    return out


def _counts(text: str) -> dict[str, int]:
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    found = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1] if last else ""):
        found["error" if word.startswith("error") else word] = int(n)
    return found


def _junit_counts(
    xml: Path, runtimes: list[str], failures: list[str] | None = None
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Totals, and per runtime [passed, run] (a test's runtime is its ``[param]``); the names of
    failed tests are appended to ``failures``."""
    found = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
    per: dict[str, list[int]] = {r: [0, 0] for r in runtimes}
    if not xml.exists():
        return found, per
    for case in ET.parse(xml).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = (
            "failed"
            if tags & {"failure", "error"}
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        found[outcome] += 1
        if outcome == "failed" and failures is not None:
            failures.append(case.get("name", "?"))
        param = re.search(r"\[([^\]]+)\]$", case.get("name", ""))
        runtime = param.group(1) if param else ""
        if runtime in per and outcome != "skipped":
            per[runtime][1] += 1
            per[runtime][0] += outcome == "passed"
    return found, per


def run_suite(suite: str, env: dict[str, str], out: Path, args: list[str]) -> dict:
    """``pytest SUITE`` with ``env``: its counts, per-runtime counts, seconds and exit code; the
    output in ``OUT.log``."""
    runtimes = [r for r in env.get("TRAINJOB_MAGICS_E2E_RUNTIMES", "").split(",") if r]
    xml = out.parent / f"{out.name}.xml"  # not with_suffix: versions have dots
    t = time.monotonic()
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"]
    try:
        proc = subprocess.run(
            [*argv, f"--junitxml={xml}", suite, *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=SUITE_TIMEOUT,
        )
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:  # a hung suite must not hold the whole matrix
        rc = -1
        out_b = (exc.stdout or b"") + (exc.stderr or b"")  # bytes, even with text=True
        text = f"{out_b.decode(errors='replace')}\n{suite}: timed out after {SUITE_TIMEOUT} s"
    row: dict = {"seconds": round(time.monotonic() - t, 1), "rc": rc}
    (out.parent / f"{out.name}.log").write_text(text)
    failures: list[str] = []
    counts, per = _junit_counts(xml, runtimes, failures)
    if not any(counts.values()):  # no report (collection error): the summary line
        counts = _counts(text)
    row.update(counts, runtimes=per, failures=sorted(set(failures)))
    return row


def run_pair(
    parent: Path,
    trainer: str,
    kueue: str | None,
    pytest_args: list[str],
    suites: tuple[str, ...] = tuple(SUITES),
) -> dict:
    versions = Versions(trainer=trainer, kueue=kueue).resolved()
    row: dict = {"trainer": trainer, "kueue": kueue, "jobset": versions.jobset, "node": "real"}
    name = f"matrix-{trainer}-{kueue or 'none'}"
    run = parent / name
    t0 = time.monotonic()
    try:
        row["build_s"] = round(sum(stack.build_all(versions, run / "build.log").values()), 1)
        ctx = stack.up(run, versions, NodeShape())
        row["up_s"] = round(time.monotonic() - t0 - row["build_s"], 1)
    except StackError as exc:
        row.update(result="not buildable" if "proxy" in str(exc) else "did not start")
        row["why"] = str(exc).splitlines()[0]
        stack.down(run)
        return row
    try:
        env = {
            **os.environ,
            **stack.test_env(ctx),
            "TRAINJOB_MAGICS_E2E_TIMEOUT": "300",
            "TRAINJOB_MAGICS_DIFF_CASES": "all",  # every scenario on every runtime (CI: in turn)
        }
        for key, suite in SUITES.items():
            if key not in suites or (key != "realcluster" and not (REPO / suite).is_dir()):
                continue
            args = pytest_args if key == "realcluster" else []
            got = run_suite(suite, env, parent / f"{name}-{key}", args)
            row[key] = got
            if key == "realcluster":
                row["test_s"] = got["seconds"]
                row.update({k: got[k] for k in ("passed", "failed", "skipped", "error")})
                row["result"] = "pass" if got["rc"] == 0 else "fail"
    finally:
        stack.down(run)
    return row


def _per_runtime(r: dict) -> str:
    per = (r.get("realcluster") or {}).get("runtimes") or {}
    return ", ".join(f"{rt} {p}/{n}" for rt, (p, n) in per.items()) or "—"


def _differential(r: dict) -> str:
    d = r.get("differential")
    if not d:
        return "not run with this row (--suites realcluster)"
    return (
        f"{d['passed']} passed, {d['failed'] + d['error']} failed, {d['skipped']} skipped "
        f"({d['seconds']} s)"
    )


def _table(rows: list[dict]) -> str:
    head = (
        "| Trainer | JobSet | Kueue | node | result | passed | failed | skipped "
        "| per runtime (passed/run) | tests/differential | build s | up s | tests s | run (UTC) |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for r in rows:
        if r["result"] in ("pass", "fail"):
            failed = (r.get("realcluster") or {}).get("failures") or []
            result = r["result"] + (f" ({', '.join(failed)})" if failed else "")
            cells = [
                r["passed"],
                r["failed"] + r.get("error", 0),
                r["skipped"],
                _per_runtime(r),
                _differential(r),
                r["build_s"],
                r["up_s"],
                r["test_s"],
            ]
        else:
            result = r["result"]
            cells = [r.get("why", ""), "", "", "", "", "", "", ""]
        cells.append(r.get("date") or "?")
        lines.append(
            "| "
            + " | ".join(
                str(c)
                for c in [
                    r["trainer"],
                    r["jobset"],
                    r["kueue"] or "none",
                    # rows before the real node ran on kwok nodes with the stack's pod runner
                    r.get("node", "kwok (pod runner)"),
                    result,
                    *cells,
                ]
            )
            + " |"
        )
    return (
        f"Kubernetes {Versions().kubernetes}, {os.cpu_count()} cores; build s is 0 when the "
        "binaries were cached; each row from its own run.\n\n" + head + "\n".join(lines) + "\n"
    )


def write_doc(rows: list[dict]) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{_table(rows)}{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text += f"\n## The version matrix\n\n{block}\n"
    DOC.write_text(text)


def _not_served(trainer: str, kueue: str, note: str, parent: Path) -> dict | None:
    """The row of a pair whose Kueue the module proxy does not serve (None if it does now)."""
    try:
        gobuild.module_dir("sigs.k8s.io/kueue", kueue, parent / "matrix-build.log")
    except StackError as exc:
        return {
            "trainer": trainer,
            "kueue": kueue,
            "jobset": Versions(trainer=trainer, kueue=kueue).resolved().jobset,
            "node": "real",
            "result": "not buildable",
            "why": f"{note}: {str(exc).splitlines()[0]}",
        }
    return None


def merge(new: list[dict], saved: Path) -> list[dict]:
    """``new`` rows, plus the saved rows of pairs not in it, in versions.MATRIX order."""
    done = {(r["trainer"], r["kueue"]) for r in new}
    rows = list(new)
    if saved.exists():
        rows += [r for r in json.loads(saved.read_text()) if (r["trainer"], r["kueue"]) not in done]
    order = {(t, k): i for i, (t, k, _) in enumerate(MATRIX)}
    rows.sort(key=lambda r: order.get((r["trainer"], r["kueue"]), len(order)))
    return rows


def run(
    parent: Path, pairs: str, pytest_args: list[str], suites: tuple[str, ...] = tuple(SUITES)
) -> int:
    """Every pair (or those of ``pairs``), with ``suites`` (realcluster always decides); rows of
    pairs not run this time are kept from SAVED, so the table can be filled a few pairs at a
    time."""
    parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for trainer, kueue, note in _pairs(pairs):
        row = _not_served(trainer, kueue, note, parent) if kueue in NOT_SERVED else None
        if row is None:
            print(f"matrix: Trainer {trainer} + Kueue {kueue} ...", file=sys.stderr, flush=True)
            row = run_pair(parent, trainer, kueue, pytest_args, suites)
        row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        rows.append(row)
        print(f"matrix: {json.dumps(row)}", file=sys.stderr, flush=True)
    rows = merge(rows, SAVED)
    SAVED.write_text(json.dumps(rows, indent=2) + "\n")
    write_doc(rows)
    print(_table(rows))
    return 0 if all(r["result"] in ("pass", "not buildable") for r in rows) else 1
