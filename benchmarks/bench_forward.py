"""Port forwarding: a 256 MB download, and 200 small HTTP requests over 8 concurrent connections,
through ``session.forward()``, vs ``kubectl port-forward``, the stock client's
``kubernetes.stream.portforward`` and the raw pods/portforward stream (the floor), interleaved in
the same run.

The trainer pod serves its working directory with ``python3 -m http.server`` (HTTP/1.0: every
request is its own TCP connection, so its own forwarded stream; listen backlog 128, not 5). Every
HTTP client reads with a plain socket that counts the bytes and checks the length; the warm-up
round checks each client's download against the pod's ``sha256sum`` too, outside the timing.
``kubectl port-forward`` speaks SPDY (or SPDY over WebSocket), which the local cluster does not
serve: there the stock client is the baseline, and kubectl's rows are on the real stack
(``--realstack-dir``, as ``bench_realstack``; those rows go to its section of results.md).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import random
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks import baselines, bench_realstack, fixtures, k8s
from benchmarks.common import Context, Row, Stats, med_range, ms, ratio, secs, yes_no

NAME = "forward"
BIG = "fwd-bench-big.bin"
SMALL = "fwd-bench-small.bin"
SMALL_SIZE = 1024
CONNECTIONS = 8
REQUESTS = 200
RAW_LIMIT = 1.5  # ours within this many times the raw stream's download time
BUFSIZE = 1 << 20
BACKLOG = 128  # the pod's http.server's listen backlog (start_server)
ROUNDS = 7  # as bench_transfer's 256 MB rows: the downloads vary a lot on a busy machine

# fetch(path, size, sink): one HTTP GET of ``path`` (``size`` body bytes), optionally hashed
Fetch = Callable[[str, int, Any], None]

LABELS = {
    "ours": "`session.forward()`",
    "kubectl": "`kubectl port-forward`",
    "stock": "`kubernetes.stream.portforward`",
    "raw": "raw pods/portforward stream",
    "direct": "direct to the pod's port",
}


@dataclass
class Measured:
    """Per client: the download times (s) and the request latencies (s), pooled over rounds."""

    size: int
    rounds: int
    download: dict[str, Stats] = field(default_factory=dict)
    requests: dict[str, Stats] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port nothing listens on now (pods share this host's network)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_request(path: str) -> bytes:
    """An HTTP/1.0 GET of ``path`` (the server closes after answering)."""
    return f"GET /{path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode()


def read_response(sock: socket.socket, size: int, sink: Any = None) -> None:
    """Read a 200 answer until EOF, discarding the body (fed to ``sink.update`` if given);
    raise unless it has ``size`` bytes."""
    buf = bytearray(BUFSIZE)
    mv = memoryview(buf)
    head = bytearray()
    while b"\r\n\r\n" not in head:
        n = sock.recv_into(buf)
        if not n:
            raise ConnectionError(f"connection closed in the response head ({bytes(head[:80])!r})")
        head += mv[:n]
    end = head.index(b"\r\n\r\n") + 4
    if not head.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")):
        raise ConnectionError(f"not a 200: {bytes(head[:80])!r}")
    got = len(head) - end
    if sink is not None:
        sink.update(head[end:])
    while True:
        n = sock.recv_into(buf)
        if not n:
            break
        got += n
        if sink is not None:
            sink.update(mv[:n])
    if got != size:
        raise ConnectionError(f"read {got} body bytes, expected {size}")


def socket_fetch(connect: Callable[[], socket.socket]) -> Fetch:
    """A fetch over a fresh connection from ``connect()`` per request."""

    def fetch(path: str, size: int, sink: Any = None) -> None:
        sock = connect()
        try:
            sock.sendall(http_request(path))
            read_response(sock, size, sink)
        finally:
            sock.close()

    return fetch


def tcp(port: int) -> Callable[[], socket.socket]:
    """Connect to 127.0.0.1:``port``."""

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    return connect


def raw_fetch(target: k8s.KubeTarget, namespace: str, pod: str, port: int) -> Fetch:
    """A fetch through ``baselines.raw_portforward`` (counts only: no sink)."""

    def fetch(path: str, size: int, sink: Any = None) -> None:
        r = baselines.raw_portforward(target, namespace, pod, port, http_request(path))
        if r.stdout or r.stdout_len < size:  # the count includes the response head
            raise ConnectionError(f"raw stream read {r.stdout_len} bytes: {r.stdout!r}")

    return fetch


def burst(fetch: Fetch, n: int, connections: int) -> list[float]:
    """``n`` requests of the small file, ``connections`` at a time: each one's latency (s)."""

    def worker(count: int) -> list[float]:
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            fetch(SMALL, SMALL_SIZE, None)
            out.append(time.perf_counter() - t0)
        return out

    shares = [n // connections + (1 if i < n % connections else 0) for i in range(connections)]
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        return [t for part in pool.map(worker, shares) for t in part]


def start_server(sess: Any, port: int) -> int:
    """Start ``python3 -m http.server`` in the pod's working directory; its pid once it listens.

    Its listen backlog is raised from socketserver's 5 to ``BACKLOG``: with 5, the 8 concurrent
    connections of the fastest clients overflow it on a busy machine, and a dropped SYN is sent
    again after 1 s (p95 of 1 s for a direct connection), which says nothing about a forward.
    """
    serve = (
        "import runpy, socketserver; "
        f"socketserver.TCPServer.request_queue_size = {BACKLOG}; "
        "runpy.run_module('http.server', run_name='__main__')"
    )
    res = sess.execute(
        f'nohup python3 -c "{serve}" {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null & echo $!'
    )
    assert res.ok, res.stderr
    pid = int(res.stdout.split()[-1])
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
    deadline = time.monotonic() + 30
    while not sess.execute(["python3", "-c", probe]).ok:
        if time.monotonic() > deadline:
            log = sess.execute(["cat", "http.log"]).stdout
            raise RuntimeError(f"http.server did not listen on {port}: {log[-300:]}")
        time.sleep(0.2)
    return pid


def make_files(sess: Any, size: int) -> str:
    """The big and the small file in the pod; the big one's sha256 (computed in the pod)."""
    res = sess.execute(
        f"head -c {size} /dev/urandom > {BIG} && head -c {SMALL_SIZE} /dev/urandom > {SMALL} "
        f"&& sha256sum {BIG}"
    )
    assert res.ok, res.stderr
    return res.stdout.split()[0]


def warm_up(fetches: dict[str, Fetch], size: int, want: str) -> None:
    """One download of the big file through each client, its sha256 compared with the pod's
    (the raw stream only counts), and one request per connection."""
    for who, fetch in fetches.items():
        h = None if who == "raw" else hashlib.sha256()
        fetch(BIG, size, h)
        if h is not None and h.hexdigest() != want:
            raise AssertionError(f"{who}: sha256 {h.hexdigest()} != the pod's {want}")
        burst(fetch, CONNECTIONS, CONNECTIONS)


def rounds(fetches: dict[str, Fetch], out: Measured, size: int, n: int, conns: int) -> None:
    """``out.rounds`` rounds; in each, every client (shuffled order) downloads the big file and
    then runs its burst of requests."""
    dl: dict[str, list[float]] = {k: [] for k in fetches}
    lat: dict[str, list[float]] = {k: [] for k in fetches}
    rng = random.Random(11)
    for _ in range(out.rounds):
        order = list(fetches)
        rng.shuffle(order)
        for who in order:
            t0 = time.perf_counter()
            fetches[who](BIG, size, None)
            dl[who].append(time.perf_counter() - t0)
        rng.shuffle(order)
        for who in order:
            lat[who] += burst(fetches[who], n, conns)
    out.download = {k: Stats(v) for k, v in dl.items()}
    out.requests = {k: Stats(v) for k, v in lat.items()}


def measure(
    kubeconfig: str,
    namespace: str,
    sess: Any,
    *,
    size: int,
    reps: int,
    n: int,
    cache_dir: str,
    kubectl: bool,
    stock: bool,
) -> Measured:
    """Serve the files from ``sess``'s pod and measure every client on them, interleaved."""
    port = free_port()
    pid = start_server(sess, port)
    try:
        want = make_files(sess, size)
        target = k8s.read_kubeconfig(kubeconfig)
        pod = sess.pod
        out = Measured(size, reps)
        with sess.forward(port) as fwd, contextlib.ExitStack() as running:
            fetches: dict[str, Fetch] = {
                "ours": socket_fetch(tcp(fwd.local_port)),
                "raw": raw_fetch(target, namespace, pod, port),
                "direct": socket_fetch(tcp(port)),
            }
            if stock:
                core = k8s.core_api(kubeconfig)
                fetches["stock"] = socket_fetch(
                    lambda: baselines.stock_portforward(core, pod, namespace, port)
                )
            if kubectl:
                local = free_port()
                running.enter_context(
                    baselines.kubectl_port_forward(
                        kubeconfig, cache_dir, namespace, pod, port, local
                    )
                )
                fetches["kubectl"] = socket_fetch(tcp(local))
            warm_up(fetches, size, want)
            rounds(fetches, out, size, n, CONNECTIONS)
        return out
    finally:
        sess.execute(f"kill {pid}; rm -f {BIG} {SMALL} http.log")


def _mbps(size: int, st: Stats) -> str:
    return f"{size / st.median / 1e6:.0f} MB/s"


def _dl(m: Measured, who: str) -> str:
    st = m.download[who]
    return f"{med_range(st, secs)} ({_mbps(m.size, st)})"


def _p(st: Stats) -> str:
    return f"p50 {ms(st.median)}, p95 {ms(st.p95)}"


def rows(m: Measured, base: str, what: str, base_note: str = "", stack: bool = False) -> list[Row]:
    """The download row and the requests row: ours vs ``base`` (kubectl or stock), floor raw."""
    ours, b, raw = m.download["ours"], m.download[base], m.download["raw"]
    vs_base, vs_raw = b.median / ours.median, ours.median / raw.median
    label = LABELS[base] + base_note
    download = Row(
        f"{what}: {m.size >> 20} MB download (n={m.rounds})",
        _dl(m, "ours"),
        f"{label}: {_dl(m, base)}",
        f"{ratio(vs_base)} {LABELS[base]}'s speed; {vs_raw:.2f}x the raw stream's time",
        f"at least {LABELS[base]}'s throughput (median); within {RAW_LIMIT}x of the raw stream",
        yes_no(vs_base >= 1.0 and vs_raw <= RAW_LIMIT),
        bench=NAME,
        floor=f"{LABELS['raw']}: {_dl(m, 'raw')}",
        stack=stack,
    )
    o, q, f = m.requests["ours"], m.requests[base], m.requests["raw"]
    r50, r95 = q.median / o.median, q.p95 / o.p95
    n = len(o.samples) // m.rounds
    requests = Row(
        f"{what}: {n} small HTTP requests ({SMALL_SIZE}-byte GETs) over {CONNECTIONS} "
        f"concurrent connections (HTTP/1.0: a new one per request; n={len(o.samples)}: "
        f"{m.rounds} rounds)",
        _p(o),
        f"{label}: {_p(q)}",
        f"p50 {ratio(r50)}, p95 {ratio(r95)} ({LABELS[base]} / ours)",
        f"p50 and p95 against {LABELS[base]} (the issue sets no bound)",
        "n/a",
        bench=NAME,
        floor=f"{LABELS['raw']}: {_p(f)}",
        stack=stack,
    )
    return [download, requests]


def direct_note(m: Measured, where: str) -> str:
    """The reference without any forward (the pod's port on this host's network)."""
    return (
        f"Port forward{where}: {LABELS['direct']} (no forward; pods share this host's network): "
        f"{m.size >> 20} MB in {_dl(m, 'direct')}, requests {_p(m.requests['direct'])}: what "
        "`python3 -m http.server` itself serves on this machine."
    )


def _sizes(ctx: Context) -> tuple[int, int, int]:
    """(download size, rounds, requests per round)."""
    if ctx.smoke:
        return 4 << 20, 2, 16
    return 256 << 20, ROUNDS, REQUESTS


def run_stack(ctx: Context) -> list[Row]:
    """The real stack's rows (vs kubectl port-forward), if a stack is given; else none."""
    run_dir = bench_realstack.stack_dir(ctx)
    if run_dir is None or not shutil.which("kubectl"):
        return []
    info = bench_realstack.stack_info(run_dir)
    load0 = os.getloadavg()
    sub = Context(
        cluster=None,
        kubeconfig=info["kubeconfig"],
        namespace=info["namespace"],
        smoke=ctx.smoke,
        workdir=ctx.workdir / "realstack-forward",
        reps=ctx.reps,
    )
    sub.workdir.mkdir(parents=True, exist_ok=True)
    size, reps, n = _sizes(ctx)
    try:
        m = measure(
            sub.kubeconfig,
            sub.namespace,
            fixtures.session(sub),
            size=size,
            reps=reps,
            n=n,
            cache_dir=str(sub.workdir / "kubectl-cache"),
            kubectl=True,
            stock=False,
        )
    finally:
        fixtures.cleanup(sub)
    load = f"{load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    notes = [direct_note(m, " on the real stack")]
    if "realstack" in ctx.shared:  # bench_realstack ran first: its header has its own load
        notes.append(f"Port forward on the real stack: load average {load}.")
    shared = ctx.shared.setdefault(
        "realstack", {"stack": bench_realstack.describe(info), "load": load, "notes": []}
    )
    shared["notes"] += notes
    return rows(m, "kubectl", "Real stack: port forward", stack=True)


def run(ctx: Context) -> list[Row]:
    """The local cluster's rows (vs the stock client), then the real stack's, if given."""
    sess = fixtures.session(ctx)
    size, reps, n = _sizes(ctx)
    m = measure(
        ctx.kubeconfig,
        ctx.namespace,
        sess,
        size=size,
        reps=reps,
        n=n,
        cache_dir=str(ctx.workdir / "kubectl-cache"),
        kubectl=False,
        stock=True,
    )
    ctx.note(direct_note(m, ""))
    note = (
        " (kubectl port-forward fails here, `error upgrading connection: Upgrade request "
        "required`: the local cluster serves no SPDY)"
    )
    return rows(m, "stock", "Port forward", note) + run_stack(ctx)
