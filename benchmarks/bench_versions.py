"""On one ready real stack, with one kubectl: the exec round trip of ``true`` (ours vs
``kubectl exec``, ``bench_roundtrip.measure``) and 256 MB through one forwarded connection (ours
vs ``kubectl port-forward``, ``bench_forward``'s server, files and readers), the exec blocks
between the forward rounds; and a check that both clients behave alike (an exec's streams and
exit code; the forwarded bytes' sha256). ``python -m devtools.realstack bench`` runs it on a
stack of each Kubernetes version, with the kubectl of that version, into results.md's "Across
Kubernetes versions" (``versions_table``)."""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import baselines, bench_forward, bench_roundtrip, fixtures, k8s
from benchmarks.common import Context, Stats, med_range, ms, ratio, secs
from benchmarks.versions_table import VersionRow
from trainjob_magics.engine.errors import TrainJobError
from trainjob_magics.engine.exec.client import PROTOCOLS

EXEC_N = 40  # exec round trips per client (kubectl included)
ROUNDS = 7  # forward rounds; the exec rounds are spread over them
SIZE = 256 << 20
# what both clients run once, outside the timing: the same streams and exit code expected
PROBE = ["sh", "-c", "echo out; echo err >&2; exit 3"]
WANT = (3, "out\n", "err\n")
# kubectl adds this line to stderr when the command fails (every version that has it)
KUBECTL_EXIT_LINE = "command terminated with exit code 3\n"
# what kubectl -v=4 logs about its streaming protocol (client-go: "The subprotocol is X" up to
# 1.3x, "Subprotocol negotiated" protocol="X" later; port-forward "negotiated protocol: X" /
# "Negotiation complete" protocol="X"; a fallback to SPDY names itself)
_PROTOCOL = re.compile(
    r"(?:subprotocol is |Subprotocol negotiated.*?protocol=|negotiated protocol: "
    r"|Negotiation complete.*?protocol=)\"?([^\"\s]+)"
)
_FALLBACK = re.compile(r"(RemoteCommand fallback|fallback to secondary dialer).*")


@dataclass
class Measured:
    """One stack's figures, and what each client did besides."""

    exec: dict[str, Stats]
    download: dict[str, Stats]
    size: int
    rounds: int
    mode: str  # the tunnel or the v4 fallback (``Forward.mode``)
    kubectl_protocols: dict[str, str]  # exec, port-forward: what kubectl -v=4 said
    ours_exec: str  # the exec subprotocol the API server picks from ours' offer
    load: tuple[float, float]  # 1-minute load average at start and end
    behaviour: list[str] = field(default_factory=list)  # differences between the clients
    failures: dict[str, int] = field(default_factory=dict)


def probe_exec(sess: Any, kubeconfig: str, namespace: str, cache_dir: str) -> list[str]:
    """``PROBE`` through ours (on the session's pod) and kubectl (the same pod): what differs
    in stdout, stderr or exit code (an empty list: nothing)."""
    ours = sess.execute(PROBE)
    theirs = baselines.kubectl_exec(kubeconfig, cache_dir, sess.pod, namespace, PROBE)
    err = theirs.stderr.decode()
    got = {
        "ours": (ours.returncode, ours.stdout, ours.stderr),
        "kubectl": (theirs.returncode, theirs.stdout.decode(), err.replace(KUBECTL_EXIT_LINE, "")),
    }
    extra = {"ours": "", "kubectl": " before kubectl's exit line"}
    return [
        f"exec of `{' '.join(PROBE)}`: {who} gave exit {rc}, stdout {out!r}, stderr {err!r} "
        f"(expected exit 3, 'out', 'err'{extra[who]})"
        for who, (rc, out, err) in got.items()
        if (rc, out, err) != WANT
    ]


def protocols(text: str) -> str:
    """What kubectl's -v=4 log says it streamed over: the negotiated protocol, or the fallback."""
    fallback = _FALLBACK.search(text)
    if fallback:
        return f"fell back ({fallback.group(0)[:160]})"
    found = _PROTOCOL.findall(text)
    return f"WebSocket, {found[-1]}" if found else "no protocol logged"


def probe_kubectl(
    kubeconfig: str, namespace: str, cache_dir: str, pod: str, port: int
) -> dict[str, str]:
    """One exec and one forwarded request through kubectl -v=4: the protocol of each."""
    ex = baselines.kubectl_exec(kubeconfig, cache_dir, pod, namespace, ["true"], ("-v=4",))
    local = bench_forward.free_port()
    with baselines.kubectl_port_forward(
        kubeconfig, cache_dir, namespace, pod, port, local, ("-v=4",)
    ):
        fetch = bench_forward.socket_fetch(bench_forward.tcp(local))
        fetch(bench_forward.SMALL, bench_forward.SMALL_SIZE, None)
    log = Path(cache_dir) / f"port-forward-{local}" / "stderr"
    return {
        "exec": protocols(ex.stderr.decode(errors="replace")),
        "port-forward": protocols(log.read_text(errors="replace")),
    }


def server_pick(kubeconfig: str, namespace: str, pod: str) -> str:
    """The exec subprotocol the API server picks from the offer ours makes (the raw reader's
    upgrade offers the same list)."""
    offer = [p.strip() for p in baselines.EXEC_PROTOCOLS.split(",")]
    picked = baselines.exec_subprotocol(k8s.read_kubeconfig(kubeconfig), namespace, pod)
    same = "" if offer == list(PROTOCOLS) else f" (raw offer {offer}, ours {PROTOCOLS})"
    return (picked or "none named") + same


def _port_forward_log(cache_dir: str, local: int) -> list[str]:
    """What ``kubectl port-forward`` wrote to stderr, and any stdout line that is neither its
    start nor a connection's "Handling" line."""
    logs = Path(cache_dir) / f"port-forward-{local}"
    lines = []
    for name in ("stdout", "stderr"):
        with contextlib.suppress(OSError):
            for line in (logs / name).read_text(errors="replace").splitlines():
                if line.strip() and not line.startswith(("Forwarding from", "Handling connection")):
                    lines.append(f"kubectl port-forward {name}: {line.strip()[:200]}")
    return sorted(set(lines))[:5]


def measure(
    kubeconfig: str,
    namespace: str,
    workdir: Path,
    *,
    exec_n: int = EXEC_N,
    rounds: int = ROUNDS,
    size: int = SIZE,
) -> Measured:
    """Both measurements on the stack ``kubeconfig`` names, with ``baselines.kubectl()``."""
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        cluster=None,
        kubeconfig=kubeconfig,
        namespace=namespace,
        smoke=False,
        workdir=workdir,
        reps=rounds,
    )
    cache = str(workdir / "kubectl-cache")
    l0 = os.getloadavg()[0]
    try:
        pod = fixtures.base_pod(ctx)
        sess = fixtures.session(ctx)
        behaviour = probe_exec(sess, kubeconfig, namespace, cache)
        port = bench_forward.free_port()
        pid = bench_forward.start_server(sess, port)
        try:
            want = bench_forward.make_files(sess, size)
            local = bench_forward.free_port()
            failures: dict[str, int] = {}
            first: dict[str, str] = {}
            with (
                sess.forward(port) as fwd,
                baselines.kubectl_port_forward(kubeconfig, cache, namespace, sess.pod, port, local),
            ):
                fetches = {
                    who: bench_forward.counted(
                        bench_forward.socket_fetch(bench_forward.tcp(p)), who, failures, first
                    )
                    for who, p in (("ours", fwd.local_port), ("kubectl", local))
                }
                bench_forward.warm_up(fetches, size, want)  # sha256 of both vs the pod's
                block = math.ceil(exec_n / rounds)
                pooled: dict[str, list[float]] = {}
                dl: dict[str, list[float]] = {who: [] for who in fetches}
                rng = random.Random(13)
                for _ in range(rounds):
                    order = list(fetches)
                    rng.shuffle(order)
                    for who in order:
                        t0 = time.perf_counter()
                        with contextlib.suppress(bench_forward.Failed):
                            fetches[who](bench_forward.BIG, size, None)
                            dl[who].append(time.perf_counter() - t0)
                    st = bench_roundtrip.measure(
                        kubeconfig, namespace, pod, sess, cache, n=block, n_kubectl=block
                    )
                    for who, s in st.items():
                        pooled.setdefault(who, []).extend(s.samples)
                mode = fwd.mode or "?"
                if fwd.errors:
                    behaviour.append(f"forward errors (ours): {fwd.errors[:3]}")
            behaviour += _port_forward_log(cache, local)
            spoke = probe_kubectl(kubeconfig, namespace, cache, sess.pod, port)
            ours_exec = server_pick(kubeconfig, namespace, sess.pod)
            behaviour += [
                f"{n} failed download(s) through {who} ({first.get(who, '')})"
                for who, n in sorted(failures.items())
            ]
        finally:
            with contextlib.suppress(TrainJobError):
                sess.execute(
                    f"kill {pid}; rm -f {bench_forward.BIG} {bench_forward.SMALL} "
                    f"{bench_forward.MID} http.log"
                )
    finally:
        fixtures.cleanup(ctx)
    return Measured(
        exec={k: Stats(v) for k, v in pooled.items()},
        download={k: Stats(v) for k, v in dl.items() if v},
        size=size,
        rounds=rounds,
        mode=mode,
        kubectl_protocols=spoke,
        ours_exec=ours_exec,
        load=(l0, os.getloadavg()[0]),
        behaviour=behaviour,
        failures=failures,
    )


def _p(st: Stats) -> str:
    return f"p50 {ms(st.median)}, p95 {ms(st.p95)}"


def _dl(st: Stats, size: int) -> str:
    return f"{med_range(st, secs)}, {size / st.median / 1e6:.0f} MB/s"


def rows(
    m: Measured, kubernetes: str, kubectl_version: str, date: str, command: str
) -> list[VersionRow]:
    """The version's two rows: exec round trip, forward (ours vs kubectl)."""
    load = f"{m.load[0]:.1f} -> {m.load[1]:.1f}"
    out = []
    o, k = m.exec.get("ours"), m.exec.get("kubectl")
    if o and k:
        out.append(
            VersionRow(
                kubernetes,
                f"exec round trip of `true` (n={len(o.samples)} each)",
                _p(o),
                f"{kubectl_version}: {_p(k)}",
                f"p50 {ratio(k.median / o.median)}, p95 {ratio(k.p95 / o.p95)}",
                load,
                date,
                command,
            )
        )
    o, k = m.download.get("ours"), m.download.get("kubectl")
    if o and k:
        out.append(
            VersionRow(
                kubernetes,
                f"forward: {m.size >> 20} MB through one connection, median (min-max) "
                f"(n={len(o.samples)}; {m.mode})",
                _dl(o, m.size),
                f"{kubectl_version}: {_dl(k, m.size)}",
                f"{ratio(k.median / o.median)} kubectl's speed",
                load,
                date,
                command,
            )
        )
    return out
