"""``python -m devtools.realstack matrix``: tests/realcluster on a stack of each row of
versions.ROWS (a Kubernetes version, control plane and kubelet alike, with a Trainer/Kueue pair
upstream supports on it), one after another, and the results as a table in docs/real-cluster.md
(between the ``<!-- matrix -->`` markers) and in docs/real-cluster-matrix.json, which keeps the
rows not run this time (it is committed, so a partial run on any machine merges). A Kubernetes
version that does not build here is one row saying why, in one line."""

from __future__ import annotations

import hashlib
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
from devtools.realstack.versions import (
    KUBERNETES,
    MATRIX,
    NOT_SERVED,
    ROWS,
    Versions,
    kubernetes_version,
    normalise,
    pairs_on,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "real-cluster.md"
SAVED = REPO / "docs" / "real-cluster-matrix.json"
BEGIN, END = "<!-- matrix -->", "<!-- /matrix -->"
# tests/realcluster decides the result; tests/differential (when the checkout has it) reads the
# stack the same way and gets a column of its own
SUITES = {"realcluster": "tests/realcluster", "differential": "tests/differential"}
SUITE_TIMEOUT = 2400  # seconds per suite and pair
# the rows saved before the Kubernetes axis ran on the then default, which they do not name
FIRST_KUBERNETES = "v1.36.3"
ANY = "*"  # trainer and kueue of a Kubernetes version's "does not build here" row
# results that are not failures: what passed, rows that say why nothing ran, and a version only
# brought up by hand with a few tests (the row says which) until the matrix runs it
NOT_FAILED = ("pass", "not buildable", "does not build here", "smoke only")


def _pairs(spec: str) -> list[tuple[str, str | None, str]]:
    if not spec:
        return list(MATRIX)
    notes = {(t, k): note for t, k, note in MATRIX}
    out: list[tuple[str, str | None, str]] = []
    for item in spec.split(","):
        trainer, _, kueue = item.partition(":")
        pair = (normalise(trainer), normalise(kueue) if kueue and kueue != "none" else None)
        out.append((*pair, notes.get(pair, "given")))
    return out


def rows(kubernetes: str, pairs: str) -> list[tuple[str, str, str | None, str]]:
    """The (kubernetes, trainer, kueue, note) rows to run: ``kubernetes`` is a comma list of
    versions (``1.35`` means the newest served patch), ``pairs`` of ``trainer:kueue``. Neither:
    versions.ROWS; only pairs: those on CI's Kubernetes (as before the Kubernetes axis); only
    versions: the pairs upstream supports on each (versions.pairs_on)."""
    if not kubernetes and not pairs:
        return list(ROWS)
    versions = [kubernetes_version(v) for v in kubernetes.split(",") if v.strip()] or [KUBERNETES]
    out = []
    for k8s in versions:
        for trainer, kueue, note in _pairs(pairs) if pairs else pairs_on(k8s):
            out.append((k8s, trainer, kueue, note))
    return out


_GO_ERROR = re.compile(r"\.go:\d+(:\d+)?: ")
_REFUSED = re.compile(r"([\w./-]+@v[\w.+-]+): reading \S+: (\d{3}) ")
_TELLING = re.compile(r"(?i)\b(error|cannot|failed|invalid|unknown|not supported|forbidden)\b")


def one_line(text: str, limit: int = 300) -> str:
    """A failure's message in one line: its first line, and what below it says the most (the
    modules the proxy refused, a Go compile error, a ``go:`` line that is not an import chain,
    the last line naming an error)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head, rest = lines[0], lines[1:]
    refused = sorted({f"{m} ({code})" for m, code in _REFUSED.findall(text)})
    telling = (
        (f"the Go module proxy does not serve {', '.join(refused)}" if refused else None)
        or next((line for line in rest if _GO_ERROR.search(line)), None)
        or next(
            (line for line in rest if line.startswith("go: ") and not line.endswith("imports")),
            None,
        )
        or next((line for line in reversed(rest) if _TELLING.search(line)), None)
    )
    out = f"{head.rstrip(':')}: {telling}" if telling else head
    out = out.replace(str(Path.home()), "~").replace("|", "/")  # a table cell
    return out if len(out) <= limit else out[: limit - 3] + "..."


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


def build_kubernetes(parent: Path, kubernetes: str) -> dict:
    """Build one Kubernetes version (once for all its rows): ``{"build_s": ...}``, or the row
    that says it does not build here."""
    t = time.monotonic()
    try:
        gobuild.build("kubernetes", kubernetes, parent / f"matrix-build-{kubernetes}.log")
    except StackError as exc:
        return {
            "kubernetes": kubernetes,
            "trainer": ANY,
            "kueue": ANY,
            "jobset": "",
            "node": "real",
            "result": "does not build here",
            "why": one_line(str(exc)),
            "build_s": round(time.monotonic() - t, 1),
        }
    return {"build_s": round(time.monotonic() - t, 1)}


def run_name(kubernetes: str, trainer: str, kueue: str | None) -> str:
    """A row's name (its logs): ``m-1.33.13-2.1.0-0.14.8``."""
    return "m-" + "-".join(v.lstrip("v") for v in (kubernetes, trainer, kueue or "none"))


def run_folder(parent: Path, kubernetes: str, trainer: str, kueue: str | None) -> Path:
    """A row's run folder: ``m-`` and 8 hex digits of its name. The kubelet's unix sockets live
    under it and must fit in 108 bytes (stack.check_run_path): a name of the versions did not."""
    digest = hashlib.sha256(run_name(kubernetes, trainer, kueue).encode()).hexdigest()[:8]
    return parent / f"m-{digest}"


def run_pair(
    parent: Path,
    trainer: str,
    kueue: str | None,
    pytest_args: list[str],
    suites: tuple[str, ...] = tuple(SUITES),
    kubernetes: str = KUBERNETES,
) -> dict:
    versions = Versions(kubernetes=kubernetes, trainer=trainer, kueue=kueue).resolved()
    row: dict = {
        "kubernetes": kubernetes,
        "trainer": trainer,
        "kueue": kueue,
        "jobset": versions.jobset,
        "node": "real",
    }
    name = run_name(kubernetes, trainer, kueue)
    run = run_folder(parent, kubernetes, trainer, kueue)
    t0 = time.monotonic()
    try:
        row["build_s"] = round(sum(stack.build_all(versions, run / "build.log").values()), 1)
    except StackError as exc:
        row.update(result="does not build here", why=one_line(str(exc)))
        return row
    try:
        ctx = stack.up(run, versions, NodeShape())
        row["up_s"] = round(time.monotonic() - t0 - row["build_s"], 1)
    except StackError as exc:
        row.update(result="did not start", why=one_line(str(exc)))
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


def kubernetes_of(r: dict) -> str:
    return r.get("kubernetes") or FIRST_KUBERNETES


def _table(rows: list[dict]) -> str:
    head = (
        "| Kubernetes | Trainer | JobSet | Kueue | node | result | passed | failed | skipped "
        "| per runtime (passed/run) | tests/differential | build s | up s | tests s | run (UTC) |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- |\n"
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
            result = f"{r['result']}: {r['why']}" if r.get("why") else r["result"]
            cells = ["", "", "", "", "", r.get("build_s", ""), r.get("up_s", ""), ""]
        cells.append(r.get("date") or "?")
        lines.append(
            "| "
            + " | ".join(
                str(c)
                for c in [
                    kubernetes_of(r),
                    r["trainer"],
                    r["jobset"] or ANY,
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
        f"{os.cpu_count()} cores; control plane and kubelet of the row's Kubernetes, CI runs "
        f"{KUBERNETES}; build s is 0 when the binaries were cached; each row from its own run.\n\n"
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


def _not_served(
    trainer: str, kueue: str, note: str, parent: Path, kubernetes: str = KUBERNETES
) -> dict | None:
    """The row of a pair whose Kueue the module proxy does not serve (None if it does now)."""
    try:
        gobuild.module_dir("sigs.k8s.io/kueue", kueue, parent / "matrix-build.log")
    except StackError as exc:
        return {
            "kubernetes": kubernetes,
            "trainer": trainer,
            "kueue": kueue,
            "jobset": Versions(trainer=trainer, kueue=kueue).resolved().jobset,
            "node": "real",
            "result": "not buildable",
            "why": f"{note}: {str(exc).splitlines()[0]}",
        }
    return None


def _key(r: dict) -> tuple[str, str, str | None]:
    return kubernetes_of(r), r["trainer"], r["kueue"]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def merge(new: list[dict], saved: Path) -> list[dict]:
    """``new`` rows, plus the saved rows not in it, by Kubernetes version, then in
    versions.MATRIX order. A version's new "does not build here" row replaces all its saved rows,
    and any new row of a version replaces its saved "does not build here" row."""
    done = {_key(r) for r in new}
    unbuilt = {kubernetes_of(r) for r in new if r["trainer"] == ANY}
    built = {kubernetes_of(r) for r in new if r["trainer"] != ANY}
    rows = list(new)
    if saved.exists():
        rows += [
            r
            for r in json.loads(saved.read_text())
            if _key(r) not in done
            and kubernetes_of(r) not in unbuilt
            and not (r["trainer"] == ANY and kubernetes_of(r) in built)
        ]
    order = {(t, k): i for i, (t, k, _) in enumerate(MATRIX)}
    rows.sort(
        key=lambda r: (
            _version_key(kubernetes_of(r)),
            -1 if r["trainer"] == ANY else order.get((r["trainer"], r["kueue"]), len(order)),
        )
    )
    return rows


def _stamp(row: dict) -> dict:
    row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"matrix: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def run(
    parent: Path,
    pairs: str,
    pytest_args: list[str],
    suites: tuple[str, ...] = tuple(SUITES),
    kubernetes: str = "",
) -> int:
    """Every row (or those of ``kubernetes`` and ``pairs``, see ``rows``), with ``suites``
    (realcluster always decides); rows not run this time are kept from SAVED, so the table can
    be filled a few rows at a time. Each Kubernetes version is built once, before its rows."""
    parent.mkdir(parents=True, exist_ok=True)
    out: list[dict] = []
    built: dict[str, dict] = {}
    for k8s, trainer, kueue, note in rows(kubernetes, pairs):
        if k8s not in built:
            print(f"matrix: building Kubernetes {k8s} ...", file=sys.stderr, flush=True)
            built[k8s] = build_kubernetes(parent, k8s)
            if "result" in built[k8s]:
                out.append(_stamp(built[k8s]))
                save(out)
        if "result" in built[k8s]:
            continue  # its one row says why
        row = _not_served(trainer, kueue, note, parent, k8s) if kueue in NOT_SERVED else None
        if row is None:
            print(
                f"matrix: Kubernetes {k8s}, Trainer {trainer} + Kueue {kueue} ...",
                file=sys.stderr,
                flush=True,
            )
            row = run_pair(parent, trainer, kueue, pytest_args, suites, k8s)
            # the Kubernetes build is counted with the version's first row
            row["build_s"] = round(row.get("build_s", 0) + built[k8s].pop("build_s", 0), 1)
        out.append(_stamp(row))
        save(out)  # after each row: a run of hours stopped halfway keeps its rows
    merged = save(out)
    print(_table(merged))
    return 0 if all(r["result"] in NOT_FAILED for r in merged) else 1


def save(new: list[dict], saved: Path | None = None) -> list[dict]:
    """Merge ``new`` into ``saved`` (SAVED, and then the doc's table too) and rewrite it; the
    merged rows."""
    merged = merge(new, saved or SAVED)
    (saved or SAVED).write_text(json.dumps(merged, indent=2) + "\n")
    if saved is None:
        write_doc(merged)
    return merged
