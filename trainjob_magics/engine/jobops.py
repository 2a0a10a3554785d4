"""Whole-job operations on a session: run on several pods, copy files, read logs.

:class:`TrainJobSession` delegates ``execute(..., pods=...)``, ``upload``, ``download``,
``write_file`` and ``logs`` here; every function takes the session first.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from .errors import InvalidInputError, SessionClosedError
from .fanout import MultiExecResult, OnPodDone, OnPodOutput, PodCommand, run_on_pods
from .files import TransferProgress, TransferResult
from .files import download as _download
from .files import upload as _upload
from .files import write_file as _write_file
from .logs import OnLog, PodLogs, read_log, read_logs
from .streaming import StreamingExecClient
from .targets import TRAINER, PodRef, TargetSpec, names_one_pod, resolve_pods, split_spec
from .validation import validate_command, validate_timeout

_CLIENTS: weakref.WeakKeyDictionary[Any, StreamingExecClient] = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def _check_open(session: Any) -> None:
    if getattr(session, "closed", False):
        raise SessionClosedError(
            f"TrainJob session {session.name} is closed; start a new one with connect(...)"
        )


def stream_client(session: Any) -> StreamingExecClient:
    """The session's exec client for streamed transfers (one per session)."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(session)
        if client is None:
            client = StreamingExecClient(session.api_client)
            _CLIENTS[session] = client
        return client


def resolve(session: Any, pods: TargetSpec) -> list[PodRef]:
    """The pods a target spec names in the session's job."""
    _check_open(session)
    return resolve_pods(session.api_client, session.namespace, session.name, pods, session.pod)


def commands(session: Any, refs: Sequence[PodRef], container: str | None) -> list[PodCommand]:
    """Per-pod exec targets: the given container, else the pod's own default."""
    out = []
    for ref in refs:
        default = session.container if ref.role == TRAINER else ref.container
        label = "" if ref.role == TRAINER else ref.label
        out.append(PodCommand(ref.name, container or default, label))
    return out


def execute_multi(
    session: Any,
    command: str | Sequence[str],
    pods: TargetSpec,
    *,
    container: str | None = None,
    stdin: bytes | str | None = None,
    timeout: float | None = None,
    on_output: OnPodOutput | None = None,
    on_done: OnPodDone | None = None,
) -> MultiExecResult:
    """Run ``command`` on every pod ``pods`` names, concurrently."""
    if command is None:
        raise InvalidInputError("command is empty: give a command to run")
    argv = validate_command(command)
    assert argv is not None
    timeout = validate_timeout(timeout)
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8")
    targets = commands(session, resolve(session, pods), container)
    return run_on_pods(
        session._exec,
        session.namespace,
        targets,
        argv,
        stdin=bytes(stdin) if stdin is not None else None,
        timeout=timeout,
        on_output=on_output,
        on_done=on_done,
    )


def upload(
    session: Any,
    local: str,
    remote: str,
    pods: TargetSpec = TRAINER,
    *,
    container: str | None = None,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
) -> TransferResult:
    """Copy a local file or directory to ``remote`` on the target pods."""
    targets = commands(session, resolve(session, pods), container)
    return _upload(
        stream_client(session),
        session.namespace,
        targets,
        local,
        remote,
        progress=progress,
        verify=verify,
        timeout=timeout,
    )


def download(
    session: Any,
    remote: str,
    local: str,
    pod: TargetSpec = TRAINER,
    *,
    container: str | None = None,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
) -> TransferResult:
    """Copy ``remote`` from one pod to ``local``."""
    refs = resolve(session, pod)
    if len(refs) != 1:
        names = ", ".join(r.name for r in refs)
        raise InvalidInputError(
            f"download needs exactly one pod, but {pod!r} names {len(refs)} ({names}); "
            "pick one, e.g. node-0"
        )
    (target,) = commands(session, refs, container)
    return _download(
        stream_client(session),
        session.namespace,
        target,
        remote,
        local,
        progress=progress,
        verify=verify,
        timeout=timeout,
    )


def write_file(
    session: Any,
    path: str,
    text: str | bytes,
    pods: TargetSpec = TRAINER,
    *,
    container: str | None = None,
    timeout: float | None = None,
) -> TransferResult:
    """Write ``text`` (UTF-8) or bytes to ``path`` on the target pods."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    targets = commands(session, resolve(session, pods), container)
    return _write_file(
        stream_client(session), session.namespace, targets, path, data, timeout=timeout
    )


def logs(
    session: Any,
    pod: TargetSpec = None,
    *,
    tail: int | None = None,
    follow: bool = False,
    container: str | None = None,
    on_output: OnLog | None = None,
    timestamps: bool = False,
    stop: threading.Event | None = None,
) -> str | PodLogs:
    """Logs of the target pod(s): a str for one pod (``trainer``, ``node-2``, a pod name),
    a :class:`PodLogs` (pod -> text, ``.errors``) for groups (``all``, ``node``, lists)."""
    refs = resolve(session, pod)
    targets = commands(session, refs, container)
    kw: dict[str, Any] = {
        "tail": tail,
        "follow": follow,
        "timestamps": timestamps,
        "on_output": on_output,
        "stop": stop,
    }
    if names_one_pod(pod, refs) and len(targets) == 1:
        return read_log(session.api_client, session.namespace, targets[0], **kw)
    return read_logs(session.api_client, session.namespace, targets, **kw)


def wants_multi(pods: TargetSpec) -> bool:
    """True when ``execute(pods=...)`` should return a :class:`MultiExecResult`."""
    return pods is not None and split_spec(pods) != [TRAINER]


__all__ = [
    "commands",
    "download",
    "execute_multi",
    "logs",
    "resolve",
    "stream_client",
    "upload",
    "wants_multi",
    "write_file",
]
