"""Port forwarding, side by side in one run: ``session.forward()`` over its one tunnel (a
WebSocket carrying SPDY, kube-apiserver 1.30+), ``session.forward(via="websocket")`` (the v4
fallback: a WebSocket per connection), ``kubectl port-forward`` (the baseline: SPDY over one
WebSocket as well) and the raw pods/portforward stream (the floor), interleaved.

Four measurements: a 256 MB download through one connection; 200 small HTTP requests over 8
concurrent connections (p50/p95); connect-to-first-byte of a new connection, one at a time;
100 connections at once moving 1 MB each (the slowest one: no stall; the peak growth of this
process's resident memory while ours run: bounded buffers).

The trainer pod serves its working directory with ``python3 -m http.server`` (HTTP/1.0: every
request is its own TCP connection, so its own forwarded stream; listen backlog 128, not 5). Every
HTTP client reads with a plain socket that counts the bytes and checks the length; the warm-up
round checks each client's download against the pod's ``sha256sum`` too, outside the timing.
On the local cluster and, with ``--realstack-dir``, on the real stack (rows in its section).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import baselines, bench_realstack, fixtures, k8s
from benchmarks.common import Context, Row, Stats, med_range, ms, ratio, secs, yes_no
from trainjob_magics.engine.errors import TrainJobError

NAME = "forward"
BIG = "fwd-bench-big.bin"
SMALL = "fwd-bench-small.bin"
SMALL_SIZE = 1024
MID = "fwd-bench-1mb.bin"
MID_SIZE = 1 << 20
AT_ONCE = 100  # connections opened at once, each moving MID_SIZE
FIRST_BYTES = 50  # new connections timed one at a time to their first byte
CONNECTIONS = 8
REQUESTS = 200
RAW_LIMIT = 1.2  # ours within this many times the raw stream's download time (issue 31)
BUFSIZE = 1 << 20
BACKLOG = 128  # the pod's http.server's listen backlog (start_server)
ROUNDS = 7  # as bench_transfer's 256 MB rows: the downloads vary a lot on a busy machine

# fetch(path, size, sink): one HTTP GET of ``path`` (``size`` body bytes), optionally hashed
Fetch = Callable[[str, int, Any], None]

LABELS = {
    "ours": "`session.forward()` (tunnel)",
    "v4": '`session.forward(via="websocket")` (v4 fallback)',
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
    first_byte: dict[str, Stats] = field(default_factory=dict)
    at_once: dict[str, Stats] = field(default_factory=dict)  # per connection (s)
    at_once_wall: dict[str, float] = field(default_factory=dict)
    rss_growth: dict[str, int] = field(default_factory=dict)  # bytes, while ``at_once`` ran
    modes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # requests that failed, per client
    first_failure: dict[str, str] = field(default_factory=dict)


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
    # stop at Content-Length, as a browser does: a real node's containerd ends a forwarded
    # connection up to 1 s after the pod closed it (it waits for the client's side), for every
    # client alike, so reading to EOF would time that wait
    length = _content_length(bytes(head[:end]))
    while length is None or got < length:
        n = sock.recv_into(buf)
        if not n:
            break
        got += n
        if sink is not None:
            sink.update(mv[:n])
    if got != size:
        raise ConnectionError(f"read {got} body bytes, expected {size}")


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return None


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


def reachable(port: int) -> bool:
    """Whether the pod's port answers on this host (no: a real node's pod network)."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def raw_fetch(target: k8s.KubeTarget, namespace: str, pod: str, port: int) -> Fetch:
    """A fetch through ``baselines.raw_portforward`` (counts only: no sink)."""

    def fetch(path: str, size: int, sink: Any = None) -> None:
        r = baselines.raw_portforward(target, namespace, pod, port, http_request(path))
        if r.stdout or r.stdout_len < size:  # the count includes the response head
            raise ConnectionError(f"raw stream read {r.stdout_len} bytes: {r.stdout!r}")

    return fetch


class Failed(Exception):
    """A client's request failed: counted in ``Measured.failures``, its sample left out."""


def counted(fetch: Fetch, who: str, failures: dict[str, int], first: dict[str, str]) -> Fetch:
    """``fetch``, with each failure counted for ``who`` (the first one's text kept)."""

    def run(path: str, size: int, sink: Any = None) -> None:
        try:
            fetch(path, size, sink)
        except OSError as exc:
            failures[who] = failures.get(who, 0) + 1
            first.setdefault(who, f"{type(exc).__name__}: {exc}"[:160])
            raise Failed(str(exc)) from None

    return run


def burst(fetch: Fetch, n: int, connections: int) -> list[float]:
    """``n`` requests of the small file, ``connections`` at a time: each one's latency (s)."""

    def worker(count: int) -> list[float]:
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            with contextlib.suppress(Failed):
                fetch(SMALL, SMALL_SIZE, None)
                out.append(time.perf_counter() - t0)
        return out

    shares = [n // connections + (1 if i < n % connections else 0) for i in range(connections)]
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        return [t for part in pool.map(worker, shares) for t in part]


def first_byte(connect: Callable[[], socket.socket] | None, fetch: Fetch) -> float:
    """Seconds from opening a new connection to the first byte of the answer to a small GET
    (``connect`` None: the whole ``fetch``, an upper bound, for the raw stream)."""
    t0 = time.perf_counter()
    if connect is None:
        fetch(SMALL, SMALL_SIZE, None)
        return time.perf_counter() - t0
    sock = connect()
    try:
        sock.sendall(http_request(SMALL))
        if not sock.recv(1):
            raise ConnectionError("closed before the first byte")
        return time.perf_counter() - t0
    finally:
        sock.close()


def rss() -> int:
    """This process's resident memory now (bytes)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def at_once(fetch: Fetch, n: int, size: int) -> tuple[list[float], float, int]:
    """``n`` connections started together, each reading ``size`` bytes: every one's time (s),
    the wall time, and the peak growth of this process's RSS meanwhile (sampled every 5 ms)."""
    start = threading.Barrier(n + 1)
    peak = {"rss": rss()}
    base = peak["rss"]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak["rss"] = max(peak["rss"], rss())

    def one(_i: int) -> float | None:
        start.wait()
        t0 = time.perf_counter()
        try:
            fetch(MID, size, None)
        except Failed:
            return None
        return time.perf_counter() - t0

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        start.wait()
        t0 = time.perf_counter()
        times = [t for f in futures if (t := f.result()) is not None]
        wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    return times, wall, peak["rss"] - base


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
    """The big, the 1 MB and the small file in the pod; the big one's sha256 (in the pod)."""
    res = sess.execute(
        f"head -c {size} /dev/urandom > {BIG} && head -c {SMALL_SIZE} /dev/urandom > {SMALL} "
        f"&& head -c {MID_SIZE} /dev/urandom > {MID} && sha256sum {BIG}"
    )
    assert res.ok, res.stderr
    return res.stdout.split()[0]


def warm_up(fetches: dict[str, Fetch], size: int, want: str) -> None:
    """One download of the big file through each client, its sha256 compared with the pod's
    (the raw stream only counts), and one request per connection."""
    for who, fetch in fetches.items():
        h = None if who == "raw" else hashlib.sha256()
        try:
            fetch(BIG, size, h)
        except Failed:
            continue
        if h is not None and h.hexdigest() != want:
            raise AssertionError(f"{who}: sha256 {h.hexdigest()} != the pod's {want}")
        burst(fetch, CONNECTIONS, CONNECTIONS)


def rounds(
    fetches: dict[str, Fetch],
    connects: dict[str, Callable[[], socket.socket] | None],
    out: Measured,
    size: int,
    n: int,
    conns: int,
    firsts: int,
    many: int,
) -> None:
    """``out.rounds`` rounds; in each, every client (shuffled order) downloads the big file,
    then runs its burst of requests, its new connections one at a time, and (in the first
    round only: it is the longest) its ``many`` connections at once."""
    dl: dict[str, list[float]] = {k: [] for k in fetches}
    lat: dict[str, list[float]] = {k: [] for k in fetches}
    fb: dict[str, list[float]] = {k: [] for k in fetches}
    rng = random.Random(11)
    for i in range(out.rounds):
        order = list(fetches)
        rng.shuffle(order)
        for who in order:
            t0 = time.perf_counter()
            with contextlib.suppress(Failed):
                fetches[who](BIG, size, None)
                dl[who].append(time.perf_counter() - t0)
        rng.shuffle(order)
        for who in order:
            lat[who] += burst(fetches[who], n, conns)
        rng.shuffle(order)
        for who in order:
            for _ in range(firsts):
                with contextlib.suppress(Failed, OSError):
                    fb[who].append(first_byte(connects[who], fetches[who]))
        if i == 0:
            for who in order:
                times, wall, grew = at_once(fetches[who], many, MID_SIZE)
                out.at_once[who], out.at_once_wall[who] = Stats(times), wall
                out.rss_growth[who] = grew
    out.download = {k: Stats(v) for k, v in dl.items()}
    out.requests = {k: Stats(v) for k, v in lat.items()}
    out.first_byte = {k: Stats(v) for k, v in fb.items()}


def measure(
    kubeconfig: str,
    namespace: str,
    sess: Any,
    *,
    size: int,
    reps: int,
    n: int,
    firsts: int,
    many: int,
    cache_dir: str,
) -> Measured:
    """Serve the files from ``sess``'s pod and measure every client on them, interleaved."""
    port = free_port()
    pid = start_server(sess, port)
    try:
        want = make_files(sess, size)
        target = k8s.read_kubeconfig(kubeconfig)
        pod = sess.pod
        out = Measured(size, reps)
        with (
            sess.forward(port) as fwd,
            sess.forward(port, via="websocket") as v4,
            contextlib.ExitStack() as running,
        ):
            local = free_port()
            running.enter_context(
                baselines.kubectl_port_forward(kubeconfig, cache_dir, namespace, pod, port, local)
            )
            connects: dict[str, Callable[[], socket.socket] | None] = {
                "ours": tcp(fwd.local_port),
                "v4": tcp(v4.local_port),
                "kubectl": tcp(local),
                "raw": None,
            }
            fetches: dict[str, Fetch] = {
                who: socket_fetch(c) for who, c in connects.items() if c is not None
            }
            fetches["raw"] = raw_fetch(target, namespace, pod, port)
            fetches = {
                who: counted(f, who, out.failures, out.first_failure) for who, f in fetches.items()
            }
            warm_up(fetches, size, want)
            if reachable(port):  # pods on this host's network (the local cluster, kwok)
                connects["direct"] = tcp(port)
                fetches["direct"] = counted(
                    socket_fetch(tcp(port)), "direct", out.failures, out.first_failure
                )
            rounds(fetches, connects, out, size, n, CONNECTIONS, firsts, many)
            out.modes = {"ours": fwd.mode, "v4": v4.mode}
            if fwd.errors or v4.errors:
                raise AssertionError(f"forward errors: {fwd.errors + v4.errors}")
        return out
    finally:
        with contextlib.suppress(TrainJobError):  # a pod gone meanwhile has nothing to clean
            sess.execute(f"kill {pid}; rm -f {BIG} {SMALL} {MID} http.log")


def _mbps(size: int, st: Stats) -> str:
    return f"{size / st.median / 1e6:.0f} MB/s"


def _dl(m: Measured, who: str) -> str:
    st = m.download[who]
    return f"{med_range(st, secs)} ({_mbps(m.size, st)})"


def _p(st: Stats) -> str:
    return f"p50 {ms(st.median)}, p95 {ms(st.p95)}"


def _both(m: Measured, attr: str, fmt: Callable[[Stats], str]) -> str:
    """Ours through the tunnel, then the v4 fallback, in one cell."""
    per = getattr(m, attr)
    return f"tunnel: {fmt(per['ours'])}; v4 fallback: {fmt(per['v4'])}"


def rows(m: Measured, what: str, stack: bool = False) -> list[Row]:
    """The four rows: ours (tunnel, and the v4 fallback beside it) vs ``kubectl port-forward``,
    floor the raw stream."""
    if m.modes.get("ours") != "tunnel":
        raise AssertionError(f"the forward did not take the tunnel: {m.modes}")
    kub = LABELS["kubectl"]
    ours, k, raw = m.download["ours"], m.download["kubectl"], m.download["raw"]
    vs_k, vs_raw = k.median / ours.median, ours.median / raw.median
    download = Row(
        f"{what}: {m.size >> 20} MB through one connection (n={m.rounds})",
        f"tunnel: {_dl(m, 'ours')}; v4 fallback: {_dl(m, 'v4')}",
        f"{kub}: {_dl(m, 'kubectl')}",
        f"tunnel {ratio(vs_k)} kubectl's speed (v4 {ratio(k.median / m.download['v4'].median)});"
        f" tunnel {vs_raw:.2f}x the raw stream's time",
        f"at least kubectl's throughput (median); within {RAW_LIMIT}x of the raw stream",
        yes_no(vs_k >= 1.0 and vs_raw <= RAW_LIMIT),
        bench=NAME,
        floor=f"{LABELS['raw']}: {_dl(m, 'raw')}",
        stack=stack,
    )
    o, q, f = m.requests["ours"], m.requests["kubectl"], m.requests["raw"]
    r50, r95 = q.median / o.median, q.p95 / o.p95
    n = len(o.samples) // m.rounds
    requests = Row(
        f"{what}: {n} small HTTP requests ({SMALL_SIZE}-byte GETs) over {CONNECTIONS} "
        f"concurrent connections (HTTP/1.0: a new one per request; n={len(o.samples)}: "
        f"{m.rounds} rounds)",
        _both(m, "requests", _p),
        f"{kub}: {_p(q)}",
        f"p50 {ratio(r50)}, p95 {ratio(r95)} (kubectl / tunnel)",
        "p50 and p95 no slower than kubectl's",
        yes_no(r50 >= 1.0 and r95 >= 1.0),
        bench=NAME,
        floor=f"{LABELS['raw']}: {_p(f)}",
        stack=stack,
    )
    o, q = m.first_byte["ours"], m.first_byte["kubectl"]
    first = Row(
        f"{what}: connect to the first byte of a new connection, one at a time "
        f"(n={len(o.samples)})",
        _both(m, "first_byte", _p),
        f"{kub}: {_p(q)}",
        f"p50 {ratio(q.median / o.median)} (kubectl / tunnel)",
        "p50 no slower than kubectl's",
        yes_no(q.median >= o.median),
        bench=NAME,
        floor=f"{LABELS['raw']} (its whole answer): {_p(m.first_byte['raw'])}",
        stack=stack,
    )
    count = len(m.at_once["ours"].samples)

    def many(who: str) -> str:
        st = m.at_once[who]
        return f"all in {secs(m.at_once_wall[who])}, slowest {secs(st.max)}, p50 {secs(st.median)}"

    grew = m.rss_growth["ours"] / 1e6
    alone = m.rss_growth["kubectl"] / 1e6  # kubectl relays in its own process: our readers only
    slow_ok = m.at_once["ours"].max <= 2 * m.at_once["kubectl"].max
    at_once_row = Row(
        f"{what}: {count} connections at once, {MID_SIZE >> 20} MB each",
        f"tunnel: {many('ours')}, RSS +{grew:.0f} MB; v4 fallback: {many('v4')}, "
        f"RSS +{m.rss_growth['v4'] / 1e6:.0f} MB",
        f"{kub}: {many('kubectl')} (this process's RSS +{alone:.0f} MB: the readers alone)",
        f"slowest: kubectl / tunnel {ratio(m.at_once['kubectl'].max / m.at_once['ours'].max)}",
        "every connection completes; slowest within 2x kubectl's; this process's RSS grows "
        "< 64 MB more than with kubectl's (the relay's buffers are bounded)",
        yes_no(slow_ok and grew - alone < 64),
        bench=NAME,
        floor=f"{LABELS['raw']}: {many('raw')}",
        stack=stack,
    )
    return [download, requests, first, at_once_row]


def failure_note(m: Measured, where: str) -> list[str]:
    """One note naming the clients whose requests failed (left out of the figures), if any."""
    failed = [
        f"{LABELS[who]}: {n} ({m.first_failure.get(who, '')})"
        for who, n in sorted(m.failures.items())
    ]
    if not failed:
        return []
    return [
        f"Port forward{where}: requests that failed, left out of the figures: " + "; ".join(failed)
    ]


def direct_note(m: Measured, where: str) -> str:
    """The reference without any forward (the pod's port on this host's network)."""
    if "direct" not in m.download:
        return (
            f"Port forward{where}: the pod has a network of its own (a real node), so no "
            "direct connection to its port is measured."
        )
    return (
        f"Port forward{where}: {LABELS['direct']} (no forward; pods share this host's network): "
        f"{m.size >> 20} MB in {secs(m.download['direct'].median)}, requests "
        f"{_p(m.requests['direct'])}, first byte {_p(m.first_byte['direct'])}: what "
        "`python3 -m http.server` itself serves on this machine. The raw stream's first byte "
        "is its whole answer (1 KiB), an upper bound."
    )


def _sizes(ctx: Context) -> tuple[int, int, int, int, int]:
    """(download size, rounds, requests per round, first bytes per round, connections at once)."""
    if ctx.smoke:
        return 4 << 20, 2, 16, 4, 10
    return 256 << 20, ROUNDS, REQUESTS, FIRST_BYTES // ROUNDS + 1, AT_ONCE


def _measure(ctx: Context, sess: Any, workdir: Path) -> Measured:
    size, reps, n, firsts, many = _sizes(ctx)
    return measure(
        ctx.kubeconfig,
        ctx.namespace,
        sess,
        size=size,
        reps=reps,
        n=n,
        firsts=firsts,
        many=many,
        cache_dir=str(workdir / "kubectl-cache"),
    )


def run_stack(ctx: Context) -> list[Row]:
    """The real stack's rows, if a stack is given; else none."""
    run_dir = bench_realstack.stack_dir(ctx)
    if run_dir is None or not baselines.kubectl_available():
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
    try:
        m = _measure(sub, fixtures.session(sub), sub.workdir)
    finally:
        fixtures.cleanup(sub)
    load = f"{load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    notes = [direct_note(m, " on the real stack"), *failure_note(m, " on the real stack")]
    if "realstack" in ctx.shared:  # bench_realstack ran first: its header has its own load
        notes.append(f"Port forward on the real stack: load average {load}.")
    shared = ctx.shared.setdefault(
        "realstack", {"stack": bench_realstack.describe(info), "load": load, "notes": []}
    )
    shared["notes"] += notes
    return rows(m, "Real stack: port forward", stack=True)


def run(ctx: Context) -> list[Row]:
    """The local cluster's rows, then the real stack's, if given."""
    if not baselines.kubectl_available():
        raise RuntimeError(f"bench_forward needs {baselines.kubectl()} (the baseline)")
    m = _measure(ctx, fixtures.session(ctx), ctx.workdir)
    ctx.note(direct_note(m, ""))
    for note in failure_note(m, ""):
        ctx.note(note)
    return rows(m, "Port forward") + run_stack(ctx)
