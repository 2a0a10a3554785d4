"""Pod logs through ``pods/log`` (``CoreV1Api.read_namespaced_pod_log``), optionally followed.

The response is read as a stream (``_preload_content=False``) so followed logs reach
``on_output(pod, text)`` as they arrive; setting ``stop`` (a ``threading.Event``) closes the
stream from another thread. Several pods are read concurrently, one thread each.
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
) -> str:
    """The log of one pod's container; with ``follow`` it returns when the container ends,
    ``stop`` is set, or ``timeout`` seconds pass without data."""
    _validate(tail)
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
    closer = _close_on(stop, resp) if stop is not None else None
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
            closer.set()
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


def _close_on(stop: threading.Event, resp: Any) -> threading.Event:
    """Close ``resp`` once ``stop`` is set; returns an event that ends the watcher."""
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if stop.wait(0.2):
                shutdown = getattr(resp, "shutdown", None)
                with contextlib.suppress(Exception):
                    (shutdown or resp.close)()
                return

    threading.Thread(target=watch, daemon=True, name="trainjob-log-stop").start()
    return finished


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

    def one(target: PodCommand) -> None:
        try:
            out[target.pod] = read_log(api, namespace, target, **kwargs)
        except Exception as exc:
            out.errors[target.pod] = exc

    threads = [threading.Thread(target=one, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
