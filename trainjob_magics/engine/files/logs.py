"""Pod logs through ``pods/log`` (``CoreV1Api.read_namespaced_pod_log``), optionally followed.

The response is read as a stream (``_preload_content=False``) so followed logs reach
``on_output(pod, text)`` as they arrive; setting ``stop`` (a ``threading.Event``) closes the
streams from another thread (one watcher per call, however many pods). Several pods are read
concurrently through the bounded :class:`~..exec.pool.PodPool`.
"""

from __future__ import annotations

import codecs
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from ..errors import InvalidInputError, TrainJobError
from ..exec.fanout import PodCommand
from ..exec.pool import run_each
from ..kube.credentials import with_fresh_credentials
from ..kube.requests import connection_failure, map_api_exception

OnLog = Callable[[str, str], None]  # (pod, text)


CHUNK = 1 << 16


class PodLogs(dict[str, str]):
    """pod -> log text; ``errors`` holds the pods whose log could not be read."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: dict[str, BaseException] = {}


def _validate(tail: int | None) -> None:
    if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or tail < 0):
        raise InvalidInputError(f"tail must be a number of lines >= 0, got {tail!r}")


def read_log(
    api: ApiClient,
    namespace: str,
    target: PodCommand,
    *,
    tail: int | None = None,
    follow: bool = False,
    timestamps: bool = False,
    on_output: OnLog | None = None,
    stop: threading.Event | None = None,
    timeout: float | None = None,
    closer: _Closer | None = None,
) -> str:
    """The log of one pod's container; with ``follow`` it returns when the container ends,
    ``stop`` is set, or ``timeout`` seconds pass without data."""
    _validate(tail)
    if stop is not None and closer is None:
        with _Closer(stop) as own:
            return read_log(
                api,
                namespace,
                target,
                tail=tail,
                follow=follow,
                timestamps=timestamps,
                on_output=on_output,
                stop=stop,
                timeout=timeout,
                closer=own,
            )
    kwargs: dict[str, Any] = {"follow": follow, "timestamps": timestamps}
    if target.container:
        kwargs["container"] = target.container
    if tail is not None:
        kwargs["tail_lines"] = tail
    host = api.configuration.host

    def open_log() -> Any:
        try:
            return CoreV1Api(api).read_namespaced_pod_log(
                target.pod,
                namespace,
                _preload_content=False,
                _request_timeout=(30, timeout) if timeout else None,
                **kwargs,
            )
        except ApiException as exc:
            raise map_api_exception(
                exc,
                verb="get",
                resource="pods/log",
                namespace=namespace,
                name=target.pod,
                host=host,
            ) from None
        except TrainJobError:  # a credential that could not be fetched
            raise
        except Exception as exc:
            raise connection_failure(exc, host) from None

    resp = with_fresh_credentials(api.configuration, open_log)
    if closer is not None:
        closer.add(resp)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []
    try:
        for chunk in resp.stream(CHUNK, decode_content=True):
            text = decoder.decode(chunk)
            if text:
                parts.append(text)
                if on_output is not None:
                    on_output(target.pod, text)
            if stop is not None and stop.is_set():
                break
    except Exception as exc:  # closed by stop, or the stream broke
        stopped = stop is not None and stop.is_set()
        if not stopped and not _is_timeout(exc):
            raise connection_failure(exc, host) from None
    finally:
        if closer is not None:
            closer.discard(resp)
        with contextlib.suppress(Exception):
            resp.release_conn()
    tail_text = decoder.decode(b"", final=True)
    if tail_text:
        parts.append(tail_text)
        if on_output is not None:
            on_output(target.pod, tail_text)
    return "".join(parts)


def _is_timeout(exc: BaseException) -> bool:
    return "timed out" in str(exc).lower() or isinstance(exc, TimeoutError)


class _Closer:
    """One watcher thread that closes every registered response once ``stop`` is set."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self.responses: list[Any] = []
        self.thread = threading.Thread(target=self._watch, daemon=True, name="trainjob-log-stop")

    def __enter__(self) -> _Closer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finished.set()

    def add(self, resp: Any) -> None:
        with self.lock:
            self.responses.append(resp)
        if self.stop.is_set():
            _shutdown(resp)

    def discard(self, resp: Any) -> None:
        with self.lock:
            if resp in self.responses:
                self.responses.remove(resp)

    def _watch(self) -> None:
        while not self.finished.is_set():
            if self.stop.wait(0.2):
                with self.lock:
                    responses = list(self.responses)
                for resp in responses:
                    _shutdown(resp)
                return


def _shutdown(resp: Any) -> None:
    shutdown = getattr(resp, "shutdown", None)
    with contextlib.suppress(Exception):
        (shutdown or resp.close)()


def read_logs(
    api: ApiClient,
    namespace: str,
    targets: Sequence[PodCommand],
    **kwargs: Any,
) -> PodLogs:
    """Logs of several pods, read concurrently (same options as :func:`read_log`)."""
    out = PodLogs()
    for t in targets:
        out[t.pod] = ""
    stop = kwargs.get("stop")
    with contextlib.ExitStack() as stack:
        closer = stack.enter_context(_Closer(stop)) if stop is not None else None

        def one(target: PodCommand) -> None:
            try:
                out[target.pod] = read_log(api, namespace, target, closer=closer, **kwargs)
            except Exception as exc:
                out.errors[target.pod] = exc

        run_each(one, targets, name="trainjob-logs")
    return out
