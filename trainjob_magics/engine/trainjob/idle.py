"""Idle release: heartbeats that keep an idle-watchdog TrainJob alive while its kernel lives,
and the error for a job that ended itself (idle_timeout)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from ..errors import IdleReleasedError, TrainJobError
from ..exec.client import ExecClient
from ..exec.scripts import heartbeat_argv, heartbeat_interval
from ..kube.names import IDLE_ANNOTATION, RJOB_LABEL
from ..kube.objects import is_running, labels_of, pod_name
from .targets import list_job_pods

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


def idle_released_error(name: str, idle_timeout: float) -> IdleReleasedError:
    """The error of a session whose job ended itself through the idle watchdog."""
    return IdleReleasedError(
        f"TrainJob {name} ended itself after {idle_timeout:g}s without a "
        "heartbeat (idle_timeout) and released its resources; reconnect with "
        "%trainjob_connect (add --replace if the alias is taken) or connect(...)",
    )


class Heartbeat:
    """Daemon thread sending heartbeats to a job's watchdog pods until :meth:`stop`.

    The watchdog pods are the running pods of the trainer's replicated job (those running the
    keep-alive command); ``trainer()`` gives the trainer pod and container, the fallback.
    """

    def __init__(
        self,
        client: ExecClient,
        api: ApiClient,
        namespace: str,
        name: str,
        idle_timeout: float,
        *,
        replicated_job: str | None,
        trainer: Callable[[], tuple[str, str | None]],
    ) -> None:
        self.client = client
        self.api = api
        self.namespace = namespace
        self.name = name
        self.replicated_job = replicated_job
        self.trainer = trainer
        self.interval = heartbeat_interval(idle_timeout)
        self.sent = 0  # heartbeats delivered so far (to any pod)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"trainjob-heartbeat-{name}"
        )

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def watchdog_pods(self) -> list[str]:
        """Running pods of the trainer's replicated job (the ones running the keep-alive)."""
        rjob = self.replicated_job
        names = [
            pod_name(pod)
            for pod in list_job_pods(self.api, self.namespace, self.name)
            if is_running(pod) and (rjob is None or labels_of(pod).get(RJOB_LABEL) == rjob)
        ]
        return names or [self.trainer()[0]]

    def beat(self) -> int:
        """Send one heartbeat to every watchdog pod; returns how many pods got it."""
        container = self.trainer()[1]
        sent = 0
        for pod in self.watchdog_pods():
            try:
                self.client.run(
                    self.namespace,
                    pod,
                    heartbeat_argv(),
                    container=container,
                    timeout=HEARTBEAT_TIMEOUT,
                )
                sent += 1
            except TrainJobError as exc:
                log.debug("heartbeat to pod %s failed: %s", pod, exc)
        self.sent += sent
        return sent

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except TrainJobError as exc:
                log.debug("heartbeat for TrainJob %s failed: %s", self.name, exc)
            except Exception:  # never let the thread die on a surprise
                log.debug("heartbeat for TrainJob %s failed", self.name, exc_info=True)


__all__ = ["HEARTBEAT_TIMEOUT", "Heartbeat", "idle_released_error", "idle_timeout_of"]
