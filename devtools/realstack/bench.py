"""``python -m devtools.realstack bench``: for each Kubernetes version, one stack of that version
at a time (a run folder of its own), the exec round trip and the 256 MB forward, ours vs the
kubectl built from the same version (``benchmarks.bench_versions``), then ``down``; each
version's rows go into benchmarks/results.md ("Across Kubernetes versions") as soon as it is
done. A version that does not build or start is a row that says so."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.versions_table import VersionRow
from devtools.realstack import gobuild, stack
from devtools.realstack.context import NodeShape
from devtools.realstack.fixtures import NAMESPACE
from devtools.realstack.matrix import one_line
from devtools.realstack.procs import StackError
from devtools.realstack.versions import (
    DEFAULT,
    MATRIX_KUBERNETES,
    NOT_SERVED,
    Versions,
    kubernetes_version,
    minor,
    normalise,
    pairs_on,
)

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "benchmarks" / "results.md"
KUEUE_014_PORT = 8082  # Kueue < v0.17's fixed visibility port (controllers.visibility_port)


@dataclass(frozen=True)
class Plan:
    """One stack to measure."""

    kubernetes: str
    trainer: str
    kueue: str | None

    def versions(self) -> Versions:
        return Versions(kubernetes=self.kubernetes, trainer=self.trainer, kueue=self.kueue)

    def label(self) -> str:
        """``v1.31.0 (Trainer v2.1.0, Kueue v0.14.8)``: the table's first cell."""
        kueue = f", Kueue {self.kueue}" if self.kueue else ", no Kueue"
        return f"{self.kubernetes} (Trainer {self.trainer}{kueue})"


def pair_for(kubernetes: str) -> tuple[str, str | None]:
    """CI's Trainer/Kueue pair where upstream supports it on that version (versions.pairs_on),
    else the newest buildable pair it supports (1.31 cannot install JobSet 0.11's CRD)."""
    pairs = [(t, k) for t, k, _ in pairs_on(kubernetes) if k not in NOT_SERVED]
    if (DEFAULT.trainer, DEFAULT.kueue) in pairs or not pairs:
        return DEFAULT.trainer, DEFAULT.kueue
    return pairs[-1]


def plan(kubernetes: str, pair: str = "") -> list[Plan]:
    """The stacks of ``--kubernetes`` (a comma list; ``1.35`` is its newest patch that builds;
    empty: versions.MATRIX_KUBERNETES) with ``--pair TRAINER:KUEUE`` (``none``: no Kueue) or
    each version's ``pair_for``."""
    spec = [v.strip() for v in kubernetes.split(",") if v.strip()]
    versions = [kubernetes_version(v) for v in spec] if spec else list(MATRIX_KUBERNETES)
    if pair:
        trainer, _, kueue = pair.partition(":")
        if not trainer:
            raise ValueError(f"--pair {pair!r}: expected TRAINER:KUEUE, e.g. v2.2.1:v0.19.2")
        chosen = (normalise(trainer), normalise(kueue) if kueue and kueue != "none" else None)
    out = []
    for v in dict.fromkeys(versions):
        trainer, kueue = chosen if pair else pair_for(v)
        out.append(Plan(v, trainer, kueue))
    return out


def port_taken(port: int) -> bool:
    """Whether something listens on ``port`` (any address) already."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def without_clashing_kueue(p: Plan, taken: Callable[[int], bool] = port_taken) -> tuple[Plan, str]:
    """``p``, or ``p`` without Kueue when its Kueue (< v0.17) needs port 8082 and another
    stack's Kueue holds it (two cannot run at once); the reason, or "". The benchmark does not
    use Kueue (the unqueued namespace)."""
    if not p.kueue or minor(p.kueue) >= 17 or not taken(KUEUE_014_PORT):
        return p, ""
    why = (
        f"Kueue {p.kueue} left out: it serves on the fixed port {KUEUE_014_PORT}, held by "
        "another stack's Kueue at the time (the benchmark does not use Kueue)"
    )
    return replace(p, kueue=None), why


def _failed_row(p: Plan, what: str, why: str, command: str) -> VersionRow:
    """The one row of a version that did not get measured, saying why."""
    return VersionRow(p.label(), what, f"{what}: {why}", "-", "-", "-", _now(), command)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def run_name(p: Plan) -> str:
    """The stack's run folder name, short (the node's unix sockets live under it)."""
    return "b-" + p.kubernetes.lstrip("v")


def run_one(
    p: Plan, parent: Path, command: str, sizes: dict[str, int]
) -> tuple[list[VersionRow], str]:
    """Build, bring up, measure and take down one stack: its rows and its note."""
    from benchmarks import baselines, bench_versions  # the engine: only when measuring

    p, no_kueue = without_clashing_kueue(p)
    log = parent / f"bench-build-{p.kubernetes}.log"
    t = time.monotonic()
    try:
        gobuild.build("kubernetes", p.kubernetes, log)
        kubectl = gobuild.build("kubectl", p.kubernetes, log) / gobuild.KUBECTL
        stack.build_all(p.versions().resolved(), log)
    except StackError as exc:
        return [_failed_row(p, "does not build here", one_line(str(exc)), command)], ""
    built = round(time.monotonic() - t)
    run = parent / run_name(p)
    try:
        _say(f"{p.label()}: up in {run} ...")
        t = time.monotonic()
        try:
            ctx = stack.up(run, p.versions(), NodeShape())
        except StackError as exc:
            return [_failed_row(p, "did not start", one_line(str(exc)), command)], ""
        up_s = round(time.monotonic() - t)
        version = baselines.kubectl_version(str(kubectl))
        _say(f"{p.label()}: measuring with {baselines.kubectl_label(str(kubectl))} ...")
        with baselines.using_kubectl(str(kubectl)):
            m = bench_versions.measure(
                str(ctx.restricted_kubeconfig), NAMESPACE, run / "bench", **sizes
            )
    finally:
        _say(f"{p.label()}: down ...")
        stack.down(run)
    rows = bench_versions.rows(m, p.label(), f"kubectl {version}", _now(), command)
    same = "; ".join(m.behaviour) or (
        "ours and kubectl behaved alike: the probe exec's stdout, stderr and exit code (3) "
        f"matched, both forwards' {m.size >> 20} MB matched the pod's sha256, no failed "
        "request, kubectl "
        "port-forward printed nothing but its start and connection lines"
    )
    spoke = (
        f"kubectl exec: {m.kubectl_protocols['exec']}, kubectl port-forward: "
        f"{m.kubectl_protocols['port-forward']}; ours: exec {m.ours_exec}, forward {m.mode}"
    )
    cached = "binaries cached" if built < 5 else f"built in {built} s"
    note = f"{same}. {spoke}. Stack up in {up_s} s ({cached})." + (
        f" {no_kueue}." if no_kueue else ""
    )
    return rows, note


def run(
    parent: Path,
    plans: list[Plan],
    command: str,
    output: Path = OUTPUT,
    sizes: dict[str, int] | None = None,
) -> int:
    """Every plan, one after another; results.md rewritten after each. 1 if any failed."""
    from benchmarks import versions_table

    parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    for p in plans:
        _say(f"{p.label()} ...")
        try:
            rows, note = run_one(p, parent, command, sizes or {})
        except Exception as exc:  # a measurement that broke: its row says how
            rows = [_failed_row(p, "failed", one_line(f"{type(exc).__name__}: {exc}"), command)]
            note = ""
        failed += any(r.kubectl == "-" for r in rows)
        notes = {p.kubernetes: note} if note else {}
        section = versions_table.write(output, rows, notes)
        _say(f"{p.kubernetes}: wrote {output}")
    print(section if plans else "")
    return 1 if failed else 0
