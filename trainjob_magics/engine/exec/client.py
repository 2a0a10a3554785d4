"""pods/exec over WebSocket (``v5.channel.k8s.io``, ``v4.channel.k8s.io``) with our own frame loop.

websocket-client does the handshake (TLS, auth headers, proxy); after the 101 we read frames
straight from the socket: one channel byte then payload (0 stdin, 1 stdout, 2 stderr, 3 status).
Each stream is kept as byte chunks up to a memory limit, then spilled to a file
(``output.py``), and decoded only when the result is read; ``on_output`` gets text decoded
incrementally so multi-byte UTF-8 split across frames stays intact. A stream can go to a raw
sink instead (file transfers).

Exit status (channel 3): ``Success`` -> 0; ``NonZeroExitCode`` with an ``ExitCode`` cause -> N;
a failure that says the container is not running (``container not found``, completed pod: how a
1.30+ apiserver reports it, after the upgrade) raises :class:`PodNotRunningError` like a 404/400
handshake, when no output came; any other failure (``InternalError``, e.g. the runtime could not
start the process) raises :class:`ApiServerError` with the server's message and the output so far
in ``.partial``.
A clean close (1000) without a status gives ``returncode=None``; a drop before the status raises
:class:`ConnectionLostError`, as does a ``Success`` of a wrapped command without its end marks
(scripts.WRAPPER): its stream was cut behind the API server (:func:`cut_short`).

stdin (bytes, str or a binary file object read in chunks): sent on channel 0 as masked client
frames, then closed with ``[255, 0]`` when v5 was negotiated. On v4 there is no way to signal
EOF: a command that reads stdin to the end waits until its timeout.

All socket I/O of one exec happens in the calling thread (OpenSSL does not allow SSL_read and
SSL_write on one connection from two threads at once): a full-duplex loop with the socket
non-blocking and one selector, reading whatever arrives and writing stdin only when the socket
takes it, so a command that stops reading stdin while its output waits never deadlocks us.

Framing (reader, masked frames, the stdin sender) is in ``frames.py``; what the frames mean
(output routing, the exit status) in ``exec_streams.py``.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import re
import selectors
import ssl
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import websocket
from kubernetes.client import ApiClient
from kubernetes.stream.ws_client import websocket_proxycare

from ..errors import (
    ApiServerError,
    ConnectionLostError,
    ExecTimeoutError,
    InvalidInputError,
    PodNotRunningError,
    TrainJobError,
)
from ..kube.credentials import with_fresh_credentials
from ..kube.requests import connection_failure, map_http_failure, parse_status_body
from ..kube.retry import window_of, with_retries
from ..result import ExecResult
from . import handshake
from .frames import (
    OP_CLOSE,
    STDERR,
    STDOUT,
    ConnectionDropped,
    FrameReader,
    Progress,
    Stdin,
    StdinError,
    StdinSender,
    client_frame,
)
from .liveness import SILENT_AFTER, ConnectionSilent, Liveness
from .output import MAX_MEMORY_OUTPUT, Sink, SpillDir
from .scripts import end_mark_of
from .streams import Collector, FrameHandler, OnOutput

PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]


V5 = "v5.channel.k8s.io"


EXEC_RBAC = "get and create"


EXEC_RESOURCE = "pods/exec"


READ_BUDGET = 1 << 20  # bytes read before the loop looks at the deadline and stdin again


WRITE_BUDGET = 1 << 20  # bytes written before the loop reads again


CONNECT_TIMEOUT = 30.0


CLOSE_FLUSH = 0.5  # at most this long to write our close reply


IDLE_WAIT = 60.0  # longest single wait for output when there is no deadline


_NODE_GONE = re.compile(r'pods "([^"]+)" not found')
_NOT_RUNNING = re.compile(
    r"completed pod|current phase|does not have a host|not running|is terminated|"
    r"waiting to start|being deleted|terminating|container not found",
    re.IGNORECASE,
)


# A channel-3 failure without an exit code that means the command never started: a 1.30+
# apiserver (WebSocket stream translator) upgrades first and reports kubelet's failed upgrade
# as ``Internal error occurred: unable to upgrade connection: container not found ("node")``.
# A real kubelet on containerd whose container is being stopped (its pod deleted or evicted)
# answers `error executing command in container: ... ttrpc: closed` or `... not created: not
# found` (seen on the real stack's node), or, once its task is deleted, `failed to load task:
# ... task <id> not found` (containerd v2.2 internal/cri/server/container_execsync.go and
# plugins/services/tasks/local.go getTask): the container is going, nothing ran.
_NEVER_STARTED = re.compile(
    r"container not found|completed pod|current phase is|not running|CONTAINER_EXITED|"
    r"ttrpc: closed|not created: not found|cannot exec in a stopped|"
    r"failed to load task:.*not found",
    re.IGNORECASE,
)


LOST_HINT = "check with another command"


@functools.lru_cache(maxsize=1024)
def _quoted(value: str) -> str:
    """``value`` percent-encoded for a query (cached: a fan-out sends the same script to
    every pod)."""
    return quote(value, safe="")


def exec_url(
    host: str,
    namespace: str,
    pod: str,
    argv: Sequence[str],
    *,
    container: str | None,
    stdin: bool,
) -> str:
    """WebSocket URL of pods/exec; one ``command=`` per argv element, percent-encoded."""
    query: list[tuple[str, str]] = [("command", arg) for arg in argv]
    if container:
        query.append(("container", container))
    query += [
        ("stdin", "true" if stdin else "false"),
        ("stdout", "true"),
        ("stderr", "true"),
        ("tty", "false"),
    ]
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
    return f"{ws_base(host)}{path}?" + "&".join(f"{key}={_quoted(value)}" for key, value in query)


def ws_base(host: str) -> str:
    """The API server's address with its WebSocket scheme (``wss://`` for ``https://``)."""
    base = host.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :]
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :]
    return base


def _is_loopback(host: str) -> bool:
    hostname = urlsplit(host).hostname or ""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def not_running_error(pod: str, message: str, *, status: int, reason: str) -> PodNotRunningError:
    """The error for an exec the server refused because the pod's container is not running."""
    return PodNotRunningError(
        f"pod {pod} cannot run commands: {message}; check the TrainJob with session.status()",
        status=status,
        reason=reason,
    )


class ExecClient:
    """Runs commands in pods through pods/exec; safe to use from several threads."""

    # no byte for this long, pongs to our pings included: the connection went silent
    silent_after: float = SILENT_AFTER

    def __init__(
        self,
        api_client: ApiClient,
        *,
        spill_dir: SpillDir | None = None,
        max_memory_output: int = MAX_MEMORY_OUTPUT,
    ) -> None:
        self.configuration = api_client.configuration
        self.spill_dir = spill_dir  # None: the process-wide default directory
        self.max_memory_output = max_memory_output  # bytes per stream kept in memory
        # the subprotocol the server chose for the latest exec ("" before any): v4 where
        # neither the API server nor the kubelet translates to v5 (docs/real-cluster.md)
        self.protocol = ""
        self._ssl_context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    # -- connection setup -------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of every exec (built once)."""
        with self._lock:
            if self._ssl_context is None:
                self._ssl_context = self._build_context()
            return self._ssl_context

    def _build_context(self) -> ssl.SSLContext:
        cfg = self.configuration
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if cfg.verify_ssl:
            if cfg.ssl_ca_cert:
                ctx.load_verify_locations(cafile=cfg.ssl_ca_cert)
            elif getattr(cfg, "ca_cert_data", None):
                data = cfg.ca_cert_data
                ctx.load_verify_locations(cadata=data if isinstance(data, str) else data.decode())
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            if cfg.assert_hostname is False:
                ctx.check_hostname = False
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
        return ctx

    def headers(self) -> list[str]:
        """The credential headers an exec sends now (refreshing an expiring token)."""
        cfg = self.configuration
        if not (cfg.host.startswith("https://") or _is_loopback(cfg.host)):
            return []  # like client-go: no credentials over plain http to another host
        headers = []
        for setting in cfg.auth_settings().values():  # runs refresh_api_key_hook if set
            if setting.get("in") == "header" and setting.get("value"):
                headers.append(f"{setting['key']}: {setting['value']}")
        if not headers and cfg.username and cfg.password:
            headers.append(f"authorization: {cfg.get_basic_auth_token()}")
        return headers

    def _connect(
        self,
        url: str,
        namespace: str,
        pod: str,
        *,
        protocols: Sequence[str] = PROTOCOLS,
        resource: str = EXEC_RESOURCE,
        bio: bool = False,
    ) -> handshake.ExecSocket:
        cfg = self.configuration
        sslopt: dict[str, Any] = {}
        if url.startswith("wss://"):
            sslopt["context"] = self.ssl_context()
            if cfg.tls_server_name:
                sslopt["server_hostname"] = cfg.tls_server_name
        proxy: dict[str, Any] = {}
        if cfg.proxy or cfg.proxy_headers:
            proxy = websocket_proxycare(proxy, cfg, url, None)
            proxy.setdefault("proxy_type", "http")
        try:
            ws = handshake.connect(
                url,
                headers=self.headers(),
                protocols=protocols,
                sslopt=sslopt,
                timeout=CONNECT_TIMEOUT,
                proxy=proxy,
                bio=bio,
            )
        except websocket.WebSocketBadStatusException as exc:
            raise self._handshake_error(exc, namespace, pod, resource, protocols) from None
        except (websocket.WebSocketException, OSError) as exc:
            raise connection_failure(exc, cfg.host) from None
        if resource == EXEC_RESOURCE:
            self.protocol = ws.subprotocol or ""
        return ws

    def upgrade(
        self,
        url: str,
        namespace: str,
        pod: str,
        *,
        protocols: Sequence[str],
        resource: str,
        bio: bool = False,
    ) -> handshake.ExecSocket:
        """Open another pod subresource's WebSocket (e.g. pods/portforward), with the same
        credentials, retries and one-line errors as an exec (``bio``: TLS over memory BIOs,
        for bulk streams; see ``handshake.connect``)."""
        return with_fresh_credentials(
            self.configuration,
            lambda: with_retries(
                lambda: self._connect(
                    url, namespace, pod, protocols=protocols, resource=resource, bio=bio
                ),
                what=f"{resource} of pod {pod}",
                window=window_of(self.configuration),
            ),
        )

    def _handshake_error(
        self,
        exc: websocket.WebSocketBadStatusException,
        namespace: str,
        pod: str,
        resource: str = EXEC_RESOURCE,
        protocols: Sequence[str] = PROTOCOLS,
    ) -> TrainJobError:
        status = int(exc.status_code or 0)
        body = exc.resp_body
        message, _reason, _details = parse_status_body(body)
        if status == 403 and not (body or b"").strip():
            # no Status: not the API server's authorization (its 403 always carries one) but
            # the node's stream server refusing every subprotocol offered (x/net/websocket
            # answers a failed handshake with a bare 403: server.go; apimachinery wsstream
            # ``handshake``), reached when neither the API server nor the kubelet serves them
            return ApiServerError(
                f"the server refused {resource} of pod {pod} with a bare 403: the node's "
                f"stream server speaks none of the WebSocket subprotocols offered "
                f"({', '.join(protocols)}); see docs/real-cluster.md, streaming protocols",
                status=403,
                reason="SubprotocolRefused",
            )
        node = _NODE_GONE.fullmatch(message or "")
        if status == 404 and node and node[1] != pod:
            # kube-apiserver looks the pod's node up to reach its kubelet; a deleted node
            # answers `pods "NODE" not found` (the real stack's node deletion, docs/faults.md)
            return PodNotRunningError(
                f"pod {pod} was lost: its node {node[1]} was deleted; the pod garbage collector "
                "removes the pod (about 40s) and its Job creates a replacement: run the command "
                "again then, or check session.status()",
                status=404,
                reason="NodeGone",
            )
        if status == 404:
            return PodNotRunningError(
                f"pod {pod} is gone from namespace {namespace}"
                + (f" ({message})" if message else "")
                + "; check the TrainJob with session.status()",
                status=404,
                reason="NotFound",
            )
        if status == 400 and _NOT_RUNNING.search(message):
            return not_running_error(pod, message, status=400, reason="BadRequest")
        if status == 500 and _NEVER_STARTED.search(message):
            # a real kubelet whose container just exited, before the pod's status says so:
            # `container not found ("node")` through kube-apiserver's 500 (seen on the real node)
            return not_running_error(pod, message, status=500, reason="InternalError")
        if status == 400 and resource != EXEC_RESOURCE:
            return InvalidInputError(
                f"the API server refused {resource} of pod {pod}: {message or 'bad request'}",
                status=400,
                reason="BadRequest",
            )
        if status == 400:
            return InvalidInputError(
                f"the API server refused to exec in pod {pod}: {message or 'bad request'}; "
                "check the container name",
                status=400,
                reason="BadRequest",
            )
        return map_http_failure(
            status,
            body,
            verb=EXEC_RBAC,
            resource=resource,
            namespace=namespace,
            name=pod,
            host=self.configuration.host,
            http_reason=str(exc.status_message or ""),
        )

    # -- running a command ------------------------------------------------------------------
    def run(
        self,
        namespace: str,
        pod: str,
        argv: Sequence[str],
        *,
        container: str | None = None,
        stdin: Stdin | None = None,
        timeout: float | None = None,
        on_output: OnOutput | None = None,
        on_stdin: Progress | None = None,
        stdout_sink: Sink | None = None,
        stderr_sink: Sink | None = None,
        max_memory_output: int | None = None,
        on_start: Callable[[Callable[[], ExecResult]], None] | None = None,
    ) -> ExecResult:
        """Run ``argv`` in ``pod`` and return its output and exit status.

        ``stdin``: bytes, str (UTF-8) or a binary file object read to EOF in chunks (then
        half-closed on v5); ``on_stdin(n)`` is called after each chunk sent. A
        ``stdout_sink``/``stderr_sink`` (callable taking bytes, or a binary file) receives that
        stream's raw bytes instead of the result (no decode, no ``on_output``). Each collected
        stream keeps at most ``max_memory_output`` bytes in memory (default: the client's
        :attr:`max_memory_output`), the rest goes to a spill file (``ExecResult.stdout_path``).
        ``on_start(snapshot)`` gets, once the command started, a function returning the output
        received so far (for another thread that has to give up waiting).
        """
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        url = exec_url(
            self.configuration.host,
            namespace,
            pod,
            argv,
            container=container,
            stdin=stdin is not None,
        )
        # A handshake that failed (5xx, connection error) started nothing: safe to retry.
        # A 401 gets a fresh credential (each connect sends the current token) and one more try.
        ws = with_fresh_credentials(
            self.configuration,
            lambda: with_retries(
                lambda: self._connect(url, namespace, pod),
                what=f"exec in pod {pod}",
                window=window_of(self.configuration),
            ),
        )
        collector = self.collector(on_output, pod, max_memory_output, stdout_sink, stderr_sink)
        collector.expect_end(end_mark_of(argv))
        if on_start is not None:
            on_start(lambda: collector.snapshot(started, pod))
        sender = StdinSender(ws.sock, stdin, v5=ws.subprotocol == V5, on_stdin=on_stdin)
        try:
            outcome = self._io_loop(ws, sender, collector, deadline)
        except KeyboardInterrupt as exc:
            collector.flush()
            # the output so far, on the user's own KeyboardInterrupt
            exc.partial = collector.result(None, started, pod)  # type: ignore[attr-defined]
            raise
        except StdinError as exc:
            raise exc.error from None
        except (TimeoutError, ConnectionDropped, OSError) as exc:  # ssl.SSLError is an OSError
            raise exec_failure(exc, collector, started, pod, timeout) from None
        finally:
            ws.shutdown()
        return exec_outcome(outcome, collector, started, pod)

    def collector(
        self,
        on_output: OnOutput | None,
        pod: str,
        max_memory_output: int | None = None,
        stdout_sink: Sink | None = None,
        stderr_sink: Sink | None = None,
    ) -> Collector:
        """Where one exec's output goes (memory limit and spill directory of this client)."""
        return Collector(
            on_output,
            pod=pod,
            limit=self.max_memory_output if max_memory_output is None else max_memory_output,
            spill_dir=self.spill_dir,
            sinks={STDOUT: stdout_sink, STDERR: stderr_sink},
        )

    def _io_loop(
        self,
        ws: handshake.ExecSocket,
        sender: StdinSender,
        collector: Collector,
        deadline: float | None,
    ) -> tuple[int | None, str, bool]:
        """All socket I/O of one exec, in this thread, until the close frame: read frames and
        write stdin as the socket allows. The socket stays non-blocking; while something is
        left to send, one selector waits for readable or writable, else the read itself waits
        (socket timeout, inside the ssl module: no exception and no select per TLS record).

        While nothing arrives it pings (:mod:`.liveness`); no byte for :attr:`silent_after`
        seconds, pongs included, is :class:`~.liveness.ConnectionSilent`.

        Returns ``(returncode, status message, got_status)``; raises ``TimeoutError`` past
        ``deadline`` and :class:`ConnectionDropped` / ``OSError`` when the connection breaks."""
        sock = ws.sock
        alive = Liveness(self.silent_after)
        reader = FrameReader(sock)
        reader.buf += ws.leftover  # frames that came with the upgrade response
        frames = FrameHandler(collector, sender)
        pending = getattr(sock, "pending", None)  # TLS bytes already decrypted (no select)
        sock.settimeout(0.0)
        selector = selectors.DefaultSelector()
        registered = selectors.EVENT_READ
        selector.register(sock, registered)
        try:
            while True:
                limit = frames.close_by if frames.got_status else deadline
                now = time.monotonic()
                if limit is not None and now >= limit:
                    if frames.got_status:
                        return frames.outcome()
                    raise TimeoutError
                ping = alive.check(now)
                if ping is not None:
                    sender.queue_control(ping)
                if sender.busy and not sender.waits_for:
                    sender.send(WRITE_BUDGET)
                idle = not sender.busy  # only reading: let the read wait
                status_known = frames.got_status
                wait = (IDLE_WAIT if limit is None else limit - now) if idle else 0.0
                wait = max(0.0, min(wait, alive.next_due() - now))
                sock.settimeout(wait)
                read_waits_for = 0
                got = 0
                while got < READ_BUDGET:
                    frame = reader.next_frame()
                    if frame is None:
                        try:
                            got += reader.receive()
                        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                            read_waits_for = selectors.EVENT_READ
                            break
                        except ssl.SSLWantWriteError:
                            read_waits_for = selectors.EVENT_WRITE
                            break
                        except TimeoutError:  # the idle wait ended: look at the clock
                            break
                        alive.heard()
                        if idle and limit is not None:  # output trickling in: keep the limit
                            wait = limit - time.monotonic()
                            if wait <= 0:
                                break
                            sock.settimeout(wait)
                        continue
                    if frames.handle(*frame):  # the close frame
                        self._reply_close(sender, selector)
                        return frames.outcome()
                    if idle and (sender.busy or frames.got_status != status_known):
                        break  # a pong to send, or the status came: stop waiting in reads
                if idle or not read_waits_for or (pending is not None and pending()):
                    continue
                if sender.busy and not sender.waits_for:
                    continue  # more to write right now
                events = read_waits_for | (sender.waits_for if sender.busy else 0)
                if events != registered:
                    selector.modify(sock, events)
                    registered = events
                due = alive.next_due() if limit is None else min(limit, alive.next_due())
                select_wait = max(0.0, due - time.monotonic())
                ready = 0
                for _key, mask in selector.select(select_wait):
                    ready |= mask
                if ready & sender.waits_for:
                    sender.waits_for = 0  # retry the blocked write (with the same buffer)
        except (ConnectionDropped, OSError):
            if frames.got_status:  # the command's end is known: a broken close does not matter
                return frames.outcome()
            raise
        finally:
            selector.close()

    @staticmethod
    def _reply_close(sender: StdinSender, selector: selectors.BaseSelector) -> None:
        """Answer the server's close frame (best effort, briefly): finish a stdin frame that
        is partly written, then send the close."""
        sender.abandon_stdin()
        sender.queue_control(client_frame(struct.pack("!H", 1000), OP_CLOSE))
        give_up = time.monotonic() + CLOSE_FLUSH
        with contextlib.suppress(OSError, ValueError, KeyError):
            sender.sock.settimeout(0.0)
            selector.modify(sender.sock, selectors.EVENT_WRITE)
            while sender.busy:
                sender.send(WRITE_BUDGET)
                if not sender.busy or sender.waits_for != selectors.EVENT_WRITE:
                    return
                remaining = give_up - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return
                sender.waits_for = 0


def exec_failure(
    exc: BaseException, collector: Collector, started: float, pod: str, timeout: float | None
) -> TrainJobError:
    """The error for an exec whose stream ended early: past its deadline (``TimeoutError``)
    or cut (``ConnectionDropped``/``OSError``); the output so far in ``.partial``."""
    collector.flush()
    partial = collector.result(None, started, pod)
    if isinstance(exc, TimeoutError):
        return ExecTimeoutError(
            f"the command did not finish within {timeout:g}s; it may still be running in pod "
            f"{pod} (closing the connection does not stop it)",
            partial=partial,
        )
    if isinstance(exc, ConnectionSilent):
        return ConnectionLostError(
            f"the connection to pod {pod} went silent ({exc}: a dead node, or a network that "
            f"dropped it); what ran is unknown, the command may still be running in the pod: "
            f"{LOST_HINT}",
            partial=partial,
        )
    return ConnectionLostError(
        f"the connection to pod {pod} was lost before the command finished ({exc}); "
        f"the command may still be running in the pod: {LOST_HINT}",
        partial=partial,
    )


def exec_outcome(
    outcome: tuple[int | None, str, bool], collector: Collector, started: float, pod: str
) -> ExecResult:
    """The result of an exec that ended with its close frame; raises when the status says
    the command could not run."""
    returncode, message, got_status = outcome
    collector.flush()
    never_started = not collector.received and _NEVER_STARTED.search(message)
    if got_status and returncode is None and never_started:
        # Upgraded, then refused (1.30+ apiserver): nothing ran, like a 404/400 handshake,
        # so the session may re-resolve the trainer pod and retry.
        raise not_running_error(pod, message, status=500, reason="InternalError")
    if got_status and returncode is None:
        raise ApiServerError(
            f"the command could not run in pod {pod}: {message}",
            reason="InternalError",
            partial=collector.result(None, started, pod),
        )
    if collector.marks and returncode in (0, None):
        # a wrapped command: its end marks prove both streams reached its end (scripts.WRAPPER)
        ended = collector.ended()
        if ended is not None:
            returncode = ended
        elif got_status:
            raise cut_short(collector, started, pod)
    return collector.result(returncode, started, pod)


class StreamCutShortError(ConnectionLostError):
    """A "Success" without the wrapper's end marks: the stream ended before the command's
    output did (raised by :func:`cut_short`; Commands.failed words it after the stopper)."""


def cut_short(collector: Collector, started: float, pod: str) -> ConnectionLostError:
    """The error for a "Success" that came before the command's end: a stream cut behind the
    API server (a kubelet restart), which its stream translator reports as success
    (client-go remotecommand: an error stream that ends empty reads as success), or the end of
    a large output dropped by the server while the command ended normally
    (kubernetes/kubernetes#124571: seen with 64 MB from mpirun on the real stack under load)."""
    return StreamCutShortError(
        f"the connection to pod {pod} ended before the command did (the server reported "
        "success, but the command's end never came: its stream from the node was cut, e.g. by "
        f"a kubelet restart); the command may still be running in the pod: {LOST_HINT}",
        partial=collector.result(None, started, pod),
    )
