"""``python -m devtools.realstack matrix``: tests/realcluster on a stack of each Trainer/Kueue
pair of versions.MATRIX, one after another, and the results as a table in docs/real-cluster.md
(between the ``<!-- matrix -->`` markers) and in ``matrix.json`` beside the stacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from devtools.realstack import gobuild, stack
from devtools.realstack.context import NodeShape
from devtools.realstack.procs import StackError
from devtools.realstack.versions import MATRIX, Versions, normalise

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "real-cluster.md"
BEGIN, END = "<!-- matrix -->", "<!-- /matrix -->"
SUITES = ("tests/realcluster",)


def _pairs(spec: str) -> list[tuple[str, str | None, str]]:
    if not spec:
        return list(MATRIX)
    out: list[tuple[str, str | None, str]] = []
    for item in spec.split(","):
        trainer, _, kueue = item.partition(":")
        out.append((normalise(trainer), normalise(kueue) if kueue else None, "given"))
    return out


def _counts(text: str) -> dict[str, int]:
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    found = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1] if last else ""):
        found["error" if word.startswith("error") else word] = int(n)
    return found


def run_pair(parent: Path, trainer: str, kueue: str | None, pytest_args: list[str]) -> dict:
    versions = Versions(trainer=trainer, kueue=kueue).resolved()
    row: dict = {"trainer": trainer, "kueue": kueue, "jobset": versions.jobset}
    run = parent / f"matrix-{trainer}-{kueue or 'none'}"
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
        env = {**os.environ, **stack.test_env(ctx), "TRAINJOB_MAGICS_E2E_TIMEOUT": "300"}
        t1 = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "-rs",
                *SUITES,
                *pytest_args,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        row["test_s"] = round(time.monotonic() - t1, 1)
        row.update(_counts(proc.stdout))
        row["result"] = "pass" if proc.returncode == 0 else "fail"
        (run.parent / f"matrix-{trainer}-{kueue or 'none'}.log").write_text(
            proc.stdout + proc.stderr
        )
    finally:
        stack.down(run)
    return row


def _table(rows: list[dict]) -> str:
    head = (
        "| Trainer | JobSet | Kueue | result | passed | failed | skipped "
        "| build s | up s | tests s |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for r in rows:
        if r["result"] in ("pass", "fail"):
            cells = [r[k] for k in ("passed", "failed", "skipped", "build_s", "up_s", "test_s")]
        else:
            cells = [r.get("why", ""), "", "", "", "", ""]
        lines.append(
            "| "
            + " | ".join(
                str(c)
                for c in [r["trainer"], r["jobset"], r["kueue"] or "none", r["result"], *cells]
            )
            + " |"
        )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"Run {stamp}, Kubernetes {Versions().kubernetes}, {os.cpu_count()} cores.\n\n"
        + head
        + "\n".join(lines)
        + "\n"
    )


def write_doc(rows: list[dict]) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{_table(rows)}{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text += f"\n## The version matrix\n\n{block}\n"
    DOC.write_text(text)


def run(parent: Path, pairs: str, pytest_args: list[str]) -> int:
    rows = []
    for trainer, kueue, note in _pairs(pairs):
        if kueue and not re.match(r"v\d+\.\d+\.\d+", kueue):
            why = f"Kueue {kueue}: no version of it is served by the Go module proxy here ({note})"
            try:
                gobuild.module_dir("sigs.k8s.io/kueue", kueue, parent / "matrix-build.log")
            except StackError as exc:
                why = f"{why}: {str(exc).splitlines()[0]}"
            versions = Versions(trainer=trainer, kueue=kueue).resolved()
            rows.append(
                {
                    "trainer": trainer,
                    "kueue": kueue,
                    "jobset": versions.jobset,
                    "result": "not buildable",
                    "why": why,
                }
            )
            continue
        print(f"matrix: Trainer {trainer} + Kueue {kueue} ...", file=sys.stderr, flush=True)
        rows.append(run_pair(parent, trainer, kueue, pytest_args))
        print(f"matrix: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "matrix.json").write_text(json.dumps(rows, indent=2))
    write_doc(rows)
    print(_table(rows))
    return 0 if all(r["result"] in ("pass", "not buildable") for r in rows) else 1
