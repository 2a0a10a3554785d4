"""Exec with streamed binary stdin and stdout, for file transfers.

:class:`StreamingExecClient` extends the engine's :class:`ExecClient` with two things a tar
stream needs: stdin read from a binary file object in chunks (then half-closed with the v5 close
frame) with a progress callback, and raw stdout bytes handed to a sink instead of being kept in
memory and decoded. stderr is still collected (it carries ``tar``'s error messages).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import websocket

from .errors import ApiServerError
from .exec_client import CLOSE, RECV_SIZE, STDIN, STDOUT, V5, ExecClient, _Collector, exec_url
from .result import ExecResult

log = logging.getLogger(__name__)

CHUNK = RECV_SIZE
ByteSink = Callable[[bytes], None]
Progress = Callable[[int], None]  # bytes moved in this step


class _SinkCollector(_Collector):
    """Sends stdout bytes to ``sink`` (nothing kept); stderr is collected as usual."""

    def __init__(self, sink: ByteSink) -> None:
        super().__init__(None)
        self.sink = sink
        self.stdout_total = 0

    def add(self, channel: int, data: memoryview) -> None:
        if channel == STDOUT:
            self.stdout_total += len(data)
            self.sink(bytes(data))
            return
        super().add(channel, data)


class StreamingExecClient(ExecClient):
    """:class:`ExecClient` plus :meth:`run_stream` (file-object stdin, stdout sink)."""

    def run_stream(
        self,
        namespace: str,
        pod: str,
        argv: Sequence[str],
        *,
        container: str | None = None,
        stdin: BinaryIO | None = None,
        stdout_sink: ByteSink | None = None,
        on_stdin: Progress | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run ``argv``; stream ``stdin`` (read to EOF, then closed) and stdout into the sink.

        With a sink, the result's ``stdout``/``stdout_bytes`` stay empty.
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
        ws = self._connect(url, namespace, pod)
        collector: Any = _SinkCollector(stdout_sink) if stdout_sink else _Collector(None)
        sender: threading.Thread | None = None
        failure: list[BaseException] = []
        try:
            if stdin is not None:
                sender = self._stream_stdin(ws, stdin, on_stdin, failure)
            returncode, message, got_status = self._read_loop(
                ws, collector, deadline, pod, started, timeout
            )
        finally:
            ws.shutdown()
            if sender is not None:
                sender.join(timeout=5)
        if got_status and returncode is None:
            raise ApiServerError(
                f"the command could not run in pod {pod}: {message}",
                reason="InternalError",
                partial=collector.result(None, started, pod),
            )
        return collector.result(returncode, started, pod)

    @staticmethod
    def _stream_stdin(
        ws: websocket.WebSocket,
        source: BinaryIO,
        on_stdin: Progress | None,
        failure: list[BaseException],
    ) -> threading.Thread:
        v5 = ws.getsubprotocol() == V5

        def send() -> None:
            try:
                while True:
                    chunk = source.read(CHUNK)
                    if not chunk:
                        break
                    ws.send_binary(bytes([STDIN]) + chunk)
                    if on_stdin is not None:
                        on_stdin(len(chunk))
                if v5:
                    ws.send_binary(bytes([CLOSE, STDIN]))
                else:
                    log.debug("v4.channel.k8s.io negotiated: stdin cannot be half-closed")
            except (websocket.WebSocketException, OSError) as exc:
                failure.append(exc)
                log.debug("sending stdin stopped: %s", exc)

        thread = threading.Thread(target=send, name="trainjob-stdin-stream", daemon=True)
        thread.start()
        return thread


__all__ = ["StreamingExecClient"]
