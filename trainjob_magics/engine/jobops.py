"""Whole-job operations of a session: run on several pods, copy files, read logs.

:class:`JobOps` is a mixin of :class:`~trainjob_magics.engine.session.TrainJobSession` holding
its ``execute(..., pods=...)``, ``pods``, ``upload``, ``download``, ``write_file`` and ``logs``;
it uses the session's ``api_client``, ``namespace``, ``name``, ``pod``, ``container``,
``_exec`` and ``_inflight``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .errors import InvalidInputError, SessionClosedError
from .exec.commands import SessionRunner
from .exec.fanout import OnPodDone, OnPodOutput, PodCommand, run_on_pods
from .files.logs import OnLog, PodLogs, read_log, read_logs
from .files.transfer import TransferProgress, TransferResult
from .files.transfer import download as _download
from .files.transfer import upload as _upload
from .files.transfer import write_file as _write_file
from .result import MultiExecResult, PodRef
from .trainjob.targets import TRAINER, TargetSpec, names_one_pod, resolve_pods, split_spec
from .validation import validate_exec


def _check_open(session: Any) -> None:
    if getattr(session, "closed", False):
        raise SessionClosedError(
            f"TrainJob session {session.name} is closed; start a new one with connect(...)"
        )


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


def wants_multi(pods: TargetSpec) -> bool:
    """True when ``execute(pods=...)`` should return a :class:`MultiExecResult`."""
    return pods is not None and split_spec(pods) != [TRAINER]


class JobOps:
    """The session's whole-job methods (mixed into ``TrainJobSession``)."""

    api_client: Any
    namespace: str
    name: str
    _exec: Any

    def pods(self, target: TargetSpec = "all") -> list[PodRef]:
        """The pods a target names (``all``, ``node``, ``node-2``, ``launcher``, a pod name)."""
        return resolve(self, target)

    def _execute_multi(
        self,
        command: str | Sequence[str],
        pods: TargetSpec,
        *,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_output: OnPodOutput | None = None,
        on_done: OnPodDone | None = None,
        max_memory_output: int | None = None,
    ) -> MultiExecResult:
        """Run ``command`` on every pod ``pods`` names, concurrently; each pod's command is
        wrapped, stopped on its timeout, and all are stopped on Ctrl-C."""
        argv, timeout, data = validate_exec(command, timeout, stdin)
        targets = commands(self, resolve(self, pods), container)
        runner = SessionRunner(self, max_memory_output)
        return run_on_pods(
            runner,
            self.namespace,
            targets,
            argv,
            stdin=data,
            timeout=timeout,
            on_output=on_output,
            on_done=on_done,
            on_interrupt=runner.interrupt,
        )

    def upload(
        self,
        local: str,
        remote: str,
        pods: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        progress: TransferProgress | None = None,
        verify: bool = True,
        timeout: float | None = None,
    ) -> TransferResult:
        """Copy a local file or directory to ``remote`` on the target pods (tar over exec)."""
        targets = commands(self, resolve(self, pods), container)
        return _upload(
            self._exec,
            self.namespace,
            targets,
            local,
            remote,
            progress=progress,
            verify=verify,
            timeout=timeout,
        )

    def download(
        self,
        remote: str,
        local: str,
        pod: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        progress: TransferProgress | None = None,
        verify: bool = True,
        timeout: float | None = None,
    ) -> TransferResult:
        """Copy ``remote`` (file or directory) from one pod to ``local``, unpacked safely."""
        refs = resolve(self, pod)
        if len(refs) != 1:
            names = ", ".join(r.name for r in refs)
            raise InvalidInputError(
                f"download needs exactly one pod, but {pod!r} names {len(refs)} ({names}); "
                "pick one, e.g. node-0"
            )
        (target,) = commands(self, refs, container)
        return _download(
            self._exec,
            self.namespace,
            target,
            remote,
            local,
            progress=progress,
            verify=verify,
            timeout=timeout,
        )

    def write_file(
        self,
        path: str,
        text: str | bytes,
        pods: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        timeout: float | None = None,
    ) -> TransferResult:
        """Write ``text`` (UTF-8) or bytes to ``path`` on the target pods (parent directories
        created)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        targets = commands(self, resolve(self, pods), container)
        return _write_file(self._exec, self.namespace, targets, path, data, timeout=timeout)

    def logs(
        self,
        pod: TargetSpec = None,
        tail: int | None = None,
        follow: bool = False,
        container: str | None = None,
        on_output: OnLog | None = None,
        *,
        timestamps: bool = False,
        stop: threading.Event | None = None,
    ) -> str | PodLogs:
        """Pod logs: str for one pod (``trainer``, ``node-2``, a pod name), :class:`PodLogs`
        (pod -> text, ``.errors``) for ``all``/roles/lists.

        ``on_output(pod, text)`` gets followed output as it arrives; ``stop=threading.Event()``
        ends a follow from another thread.
        """
        refs = resolve(self, pod)
        targets = commands(self, refs, container)
        kw: dict[str, Any] = {
            "tail": tail,
            "follow": follow,
            "timestamps": timestamps,
            "on_output": on_output,
            "stop": stop,
        }
        if names_one_pod(pod, refs) and len(targets) == 1:
            return read_log(self.api_client, self.namespace, targets[0], **kw)
        return read_logs(self.api_client, self.namespace, targets, **kw)


__all__ = ["JobOps", "commands", "resolve", "wants_multi"]
