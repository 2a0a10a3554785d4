"""Idle release: heartbeats that keep an idle-watchdog TrainJob alive while its kernel lives,
and telling a job that ended itself (idle_timeout) from one that failed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from ..errors import (
    IdleReleasedError,
    PodNotRunningError,
    TrainJobError,
)
from ..exec.scripts import heartbeat_argv, heartbeat_interval
from ..kube.names import (
    IDLE_ANNOTATION,
    RJOB_LABEL,
)
from ..kube.objects import is_running, pod_name
from .targets import list_job_pods


# -- heartbeats and idle release ---------------------------------------------------------------
def start_heartbeat(session: Any) -> Heartbeat | None:
    """Start the heartbeat thread when the session's job runs the idle watchdog."""
    if not session.idle_timeout:
        return None
    return Heartbeat(session, session.idle_timeout).start()


def stop_heartbeat(session: Any) -> None:
    heartbeat = getattr(session, "_heartbeat", None)
    if heartbeat is not None:
        heartbeat.stop()


def raise_if_idle(session: Any, exc: PodNotRunningError) -> None:
    """Raise :class:`IdleReleasedError` when the job ended itself through the idle watchdog."""
    if not session.idle_timeout or isinstance(exc, IdleReleasedError):
        return
    try:
        state = session.status().state
    except TrainJobError:
        return
    if state != "Complete":
        return
    stop_heartbeat(session)
    raise IdleReleasedError(
        f"TrainJob {session.name} ended itself after {session.idle_timeout:g}s without a "
        "heartbeat (idle_timeout) and released its resources; reconnect with "
        "%trainjob_connect (add --replace if the alias is taken) or connect(...)",
    ) from exc


log = logging.getLogger(__name__)


HEARTBEAT_TIMEOUT = 20.0


def idle_timeout_of(trainjob: Mapping[str, Any] | None) -> float | None:
    """The idle timeout a TrainJob was created with (its annotation), None when it has none."""
    annotations = ((trainjob or {}).get("metadata") or {}).get("annotations") or {}
    try:
        value = float(annotations.get(IDLE_ANNOTATION, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def watchdog_pods(session: Any) -> list[str]:
    """Running pods of the trainer's replicated job (the ones running the keep-alive)."""
    rjob = getattr(getattr(session, "target", None), "replicated_job", None)
    names = []
    for pod in list_job_pods(session.api_client, session.namespace, session.name):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if is_running(pod) and (rjob is None or labels.get(RJOB_LABEL) == rjob):
            names.append(pod_name(pod))
    return names or [session.pod]


class Heartbeat:
    """Daemon thread sending heartbeats for one session until :meth:`stop`."""

    def __init__(self, session: Any, idle_timeout: float) -> None:
        self.session = session
        self.interval = heartbeat_interval(idle_timeout)
        self.last_ok: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"trainjob-heartbeat-{session.name}"
        )

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def beat(self) -> int:
        """Send one heartbeat to every watchdog pod; returns how many pods got it."""
        session = self.session
        sent = 0
        for pod in watchdog_pods(session):
            try:
                session._exec.run(
                    session.namespace,
                    pod,
                    heartbeat_argv(),
                    container=session.container,
                    timeout=HEARTBEAT_TIMEOUT,
                )
                sent += 1
            except TrainJobError as exc:
                log.debug("heartbeat to pod %s failed: %s", pod, exc)
        if sent:
            self.last_ok = time.monotonic()
        return sent

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if getattr(self.session, "closed", False):
                return
            try:
                self.beat()
            except TrainJobError as exc:
                log.debug("heartbeat for TrainJob %s failed: %s", self.session.name, exc)
            except Exception:  # never let the thread die on a surprise
                log.debug("heartbeat for TrainJob %s failed", self.session.name, exc_info=True)
