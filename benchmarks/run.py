"""Run the benchmark suite against a fresh local cluster and write a markdown table.

python -m benchmarks [--smoke] [--only NAME[,NAME]] [--output benchmarks/results.md]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import baselines, fixtures, versions_table
from benchmarks.bench_realstack import SECTION
from benchmarks.common import TABLE_HEAD, Context, Row, fmt_row, fmt_table, machine_info

# name -> module, in table order
BENCHMARKS: dict[str, str] = {
    "roundtrip": "benchmarks.bench_roundtrip",
    "cell": "benchmarks.bench_cell_overhead",
    "large": "benchmarks.bench_large_output",
    "memory": "benchmarks.bench_memory",
    "readiness": "benchmarks.bench_readiness",
    "fanout": "benchmarks.bench_fanout",
    "widgets": "benchmarks.bench_widgets",
    "celloutput": "benchmarks.bench_cell_output",
    "python": "benchmarks.bench_python",
    "transfer": "benchmarks.bench_transfer",
    "fanout-stub": "benchmarks.bench_fanout_stub",
    "connect": "benchmarks.bench_connect",
    "realstack": "benchmarks.bench_realstack",  # a line saying so unless a stack is given
    "forward": "benchmarks.bench_forward",  # + rows on the real stack, if one is given
    "ranks": "benchmarks.bench_ranks",
    "resume": "benchmarks.bench_transfer_resume",  # + rows on the real stack, if one is given
}
# benchmarks that bring their own cluster: the local one is only started for the others
OWN_CLUSTER = {"realstack"}
# benchmarks that also write rows of the real-stack section (Row.stack) when a stack is given
STACK_TOO = {"forward", "resume"}
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results.md"


@contextlib.contextmanager
def cluster_for(
    kubeconfig: str | None, workdir: Path, mode: str
) -> Iterator[tuple[object, str, str]]:
    """Yield (in-process cluster or None, kubeconfig path, namespace).

    mode "process" (default) runs the local cluster in its own process, as a real API server
    would be: the client under test then does not share a GIL with the server.
    """
    if kubeconfig:
        yield None, kubeconfig, os.environ.get("BENCH_NAMESPACE", "default")
        return
    if mode == "none":
        yield None, "", "default"
        return
    path = workdir / "kubeconfig"
    if mode == "process":
        with cluster_process(path, workdir / "pods"):
            yield None, str(path), "default"
        return
    from trainjob_magics.localcluster import LocalCluster

    with LocalCluster(kubeconfig_path=str(path), root_dir=str(workdir / "pods")) as cluster:
        yield cluster, str(cluster.kubeconfig_path), cluster.namespace


@contextlib.contextmanager
def cluster_process(kubeconfig: Path, root: Path, **options: float) -> Iterator[None]:
    """Run LocalCluster in a child process until the block ends (``options``: numeric
    LocalCluster arguments, e.g. ``start_delay=0``)."""
    code = (
        "import signal, sys, threading\n"
        "from trainjob_magics.localcluster import LocalCluster\n"
        "stop = threading.Event()\n"
        "signal.signal(signal.SIGTERM, lambda *a: stop.set())\n"
        f"with LocalCluster(kubeconfig_path=sys.argv[1], root_dir=sys.argv[2], **{options!r}):\n"
        "    print('ready', flush=True)\n"
        "    stop.wait()\n"
    )
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(kubeconfig), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"local cluster process did not start (exit {proc.poll()})")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _command(args: argparse.Namespace) -> str:
    return (
        "python -m benchmarks"
        + (" --smoke" if args.smoke else "")
        + (f" --only {args.only}" if args.only else "")
        + (f" --realstack-dir {args.realstack_dir}" if args.realstack_dir else "")
        + (f" --kubectl {args.kubectl}" if getattr(args, "kubectl", "") else "")
    )


def _kubectl_line() -> str:
    """The kubectl every kubectl baseline ran (``--kubectl``, else PATH's), with its version."""
    return f"Baseline kubectl: {baselines.kubectl_label()}."


def _machine(info: dict[str, str]) -> str:
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM, "
        f"Python {info['python']}, Linux {info['kernel']}"
    )


def render_realstack(
    rows: list[Row], info: dict[str, str], stack: dict | None, args: argparse.Namespace
) -> str:
    """The "On the real stack" section: its own run line, stack versions, load, table, notes."""
    mode = "smoke (tiny sizes, not meaningful)" if args.smoke else "full"
    lines = [SECTION, "", f"Run: {info['date']} · mode: {mode} · command: `{_command(args)}`", ""]
    if stack:
        lines += [
            f"Stack: {stack['stack']} (devtools/realstack: one real node on this machine's 2 "
            "cores, pods in their own network namespaces; an exec goes apiserver -> kubelet "
            "-> containerd's CRI stream server -> runc exec in the container).",
            "",
            f"{_machine(info)}. Load average {stack['load']}. {_kubectl_line()}",
            "",
            "Same conventions as the table above: every baseline in the same run, interleaved "
            "with ours where possible, through the same kube-apiserver.",
            "",
        ]
    lines.append(fmt_table(rows))
    notes = (stack or {}).get("notes", [])
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def split(doc: str) -> tuple[str, str]:
    """(main part, real-stack section) of a results document."""
    cut = doc.find("\n" + SECTION + "\n")
    return (doc, "") if cut < 0 else (doc[: cut + 1], doc[cut + 1 :])


def merge(old: str, main: str | None, section: str | None) -> str:
    """The new document: ``main`` (None: keep the old file's main part) followed by
    ``section``, the real-stack section (None: keep the old file's, if it has one), and the
    old file's "Across Kubernetes versions" section (``python -m devtools.realstack bench``)."""
    old, across = versions_table.split(old)
    old_main, old_section = split(old)
    if main is None:
        main = old_main or "# Benchmark results\n\n(only the real-stack rows were run)\n"
    if section is None:
        section = old_section
    doc = main.rstrip("\n") + "\n" + (f"\n{section.rstrip()}\n" if section else "")
    return doc + (f"\n{across.rstrip()}\n" if across else "")


_N = re.compile(r"\s*\(n=[^)]*\)")


def _title(what: str) -> str:
    """A row's title without its ``(n=...)``: what stays the same from run to run."""
    return _N.sub("", what).strip()


def merge_rows(old: str, rows: list[Row], stamp: str) -> str:
    """``old`` (one part of results.md: its table, then its notes) with ``rows`` in the table:
    a row whose title (less ``(n=...)``) is there already replaces it in place, the others go
    at the end. ``stamp`` becomes a note, replacing an older one with the same first words."""
    lines = old.rstrip("\n").split("\n")
    head = lines.index(TABLE_HEAD)
    end = head + 2
    while end < len(lines) and lines[end].startswith("| "):
        end += 1
    new = {_title(r.what): fmt_row(r) for r in rows}
    body = [new.pop(_title(line[2:].split(" | ", 1)[0]), line) for line in lines[head + 2 : end]]
    body += new.values()
    rest = lines[end:]
    key = "- " + stamp.split(":", 1)[0] + ":"
    rest = [line for line in rest if not line.startswith(key)]
    if "Notes:" not in rest:
        rest += ["", "Notes:", ""] if not rest or rest[-1] else ["Notes:", ""]
    last = max(i for i, line in enumerate(rest) if line.startswith("- ") or line == "")
    rest.insert(last + 1, "- " + stamp)
    return "\n".join(lines[: head + 2] + body + rest).rstrip("\n") + "\n"


def rerun_stamp(rows: list[Row], args: argparse.Namespace, when: str, load: str) -> str:
    """The note a partial run leaves in a part it merged its rows into."""
    names = [n for n in BENCHMARKS if any(r.bench == n for r in rows)]
    which = ", ".join(f"`{n}`" for n in names)
    return (
        f"Rows of {which} from a later run: {when} · command: `{_command(args)}` · "
        f"load average {load} · {_kubectl_line()}"
    )


def render(
    rows: list[Row], info: dict[str, str], notes: list[str], args: argparse.Namespace
) -> str:
    """The markdown document: title, machine, table, notes."""
    mode = "smoke (tiny sizes, not meaningful)" if args.smoke else "full"
    lines = [
        "# Benchmark results",
        "",
        f"Run: {info['date']} · mode: {mode} · command: `{_command(args)}`",
        "",
        f"{_machine(info)}. {_kubectl_line()}",
        "",
        "Times are median (min-max) over the repetitions unless a row says otherwise; "
        "ratios are baseline / ours (higher is better for us) unless the goal says otherwise. "
        "Every baseline runs in the same run, interleaved with ours where possible, against the "
        "same local cluster (run in its own process, as a real API server would be). "
        f"Load average at start {info['load']}, at end {os.getloadavg()[0]:.2f} "
        "(other work on the machine adds noise, mostly to the p95 and max figures).",
        "",
        fmt_table(rows),
    ]
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the selected benchmarks, print and write the table."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, few repetitions (CI)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {list(BENCHMARKS)}")
    ap.add_argument("--output", default=None, help=f"markdown file (default {DEFAULT_OUTPUT})")
    ap.add_argument("--kubeconfig", default=None, help="use this cluster instead of a new one")
    ap.add_argument(
        "--cluster",
        choices=("process", "inprocess"),
        default="process",
        help="run the local cluster in a child process (default) or in this process",
    )
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument(
        "--realstack-dir",
        default=os.environ.get("TRAINJOB_MAGICS_REALSTACK_DIR", ""),
        help="a devtools.realstack state folder for the `realstack` rows "
        "(default: $TRAINJOB_MAGICS_REALSTACK_DIR; without one they are one skipped line)",
    )
    ap.add_argument(
        "--kubectl",
        default="",
        help="the kubectl the kubectl baselines run (default: "
        f"${baselines.KUBECTL_ENV}, else kubectl on PATH); the results name its version",
    )
    args = ap.parse_args(argv)
    if args.kubectl:
        os.environ[baselines.KUBECTL_ENV] = args.kubectl

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    output = Path(args.output) if args.output else DEFAULT_OUTPUT
    info = machine_info()
    rows: list[Row] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tjm-bench-") as tmp:
        workdir = Path(tmp)
        local = any(n not in OWN_CLUSTER for n in names)
        with cluster_for(args.kubeconfig, workdir, args.cluster if local else "none") as (
            cluster,
            kubeconfig,
            namespace,
        ):
            if kubeconfig:
                os.environ["KUBECONFIG"] = kubeconfig
            ctx = Context(
                cluster=cluster,
                kubeconfig=kubeconfig,
                namespace=namespace,
                smoke=args.smoke,
                workdir=workdir,
                reps=3 if args.smoke else 5,
                realstack_dir=args.realstack_dir,
            )
            try:
                for name in names:
                    t0 = time.monotonic()
                    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
                    try:
                        mod = importlib.import_module(BENCHMARKS[name])
                        got = mod.run(ctx)
                    except fixtures.Unavailable as e:
                        got = [Row(name, f"not available: {e}", "-", "-", "-", "n/a", bench=name)]
                    except Exception as e:
                        traceback.print_exc()
                        msg = f"error: {type(e).__name__}: {e}".replace("|", "/")[:200]
                        got = [Row(name, msg, "-", "-", "-", "n/a", bench=name)]
                    rows += got
                    print(
                        f"[bench] {name} done in {time.monotonic() - t0:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                fixtures.cleanup(ctx)
    ctx.note(f"Whole run took {time.monotonic() - t_start:.0f} s.")
    main_rows = [r for r in rows if r.bench not in OWN_CLUSTER and not r.stack]
    stack_rows = [r for r in rows if r.bench in OWN_CLUSTER or r.stack]
    stack_rows.sort(key=lambda r: r.bench not in OWN_CLUSTER)  # the stack's own rows first
    stack = ctx.shared.get("realstack")
    old = output.read_text() if output.exists() else ""
    old_main, old_section = split(old)
    load = f"{info['load']} at start, {os.getloadavg()[0]:.2f} at end"
    main_doc = None
    if main_rows:
        # a part every one of whose benchmarks ran is written anew; else its rows are merged
        if set(BENCHMARKS) - OWN_CLUSTER - set(names) and TABLE_HEAD in old_main:
            stamp = rerun_stamp(main_rows, args, info["date"], load)
            main_doc = merge_rows(old_main, main_rows, " ".join([stamp, *ctx.notes]))
        else:
            main_doc = render(main_rows, info, ctx.notes, args)
    section_doc = None
    # a skipped (no stack) line does not replace measured rows already in the file
    if stack_rows and (stack or not old_section):
        if (OWN_CLUSTER | STACK_TOO) - set(names) and TABLE_HEAD in old_section:
            stamp = rerun_stamp(stack_rows, args, info["date"], (stack or {}).get("load", load))
            notes = (stack or {}).get("notes", [])
            section_doc = merge_rows(old_section, stack_rows, " ".join([stamp, *notes]))
        else:
            section_doc = render_realstack(stack_rows, info, stack, args)
    doc = merge(old, main_doc, section_doc)
    print(doc)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(doc)
    print(f"[bench] wrote {output}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": info, "rows": [dataclasses.asdict(r) for r in rows]}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
