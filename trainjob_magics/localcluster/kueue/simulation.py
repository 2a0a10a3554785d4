"""KueueSimulation: Workloads for queued TrainJobs, FIFO admission by quota, eviction, queues.

Runs on the cluster's event loop and reacts to store events (like the TrainJob controller).
Every pass recomputes the desired state from the store, so it is idempotent: writing the same
status again is a no-op that emits no event. Test controls (``preempt``, ``evict``,
``set_quota``...) may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..core.apierror import ApiError
from ..core.events import record_event
from ..core.resources import PODS, TRAINJOBS, Registry
from ..core.store import Event, Store
from . import workload_conditions as C
from .controls import QueueControls
from .eviction import JOBSET_NAME_LABEL, Eviction
from .kinds import (
    CLUSTER_QUEUES,
    JOB_CONTROLLER,
    JOB_UID_LABEL,
    KUEUE_KINDS,
    LOCAL_QUEUES,
    PENDING_WORKLOADS,
    PRIORITY_CLASS_LABEL,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    register_kinds,
)
from .queue_status import QueueStatus
from .quota_fit import add, usage_of
from .scheduling import CHECKS_PENDING_MSG, Scheduling
from .simulation_config import KueueConfig, served_versions
from .trainjob_sync import TrainJobSync
from .webhook import TrainJobWebhook, queue_name
from .workloads import build_workload

log = logging.getLogger(__name__)
MAX_EXEC_REASON = "DeactivatedDueToMaximumExecutionTimeExceeded"
WATCHED = {
    TRAINJOBS.key,
    WORKLOADS.key,
    LOCAL_QUEUES.key,
    CLUSTER_QUEUES.key,
    RESOURCE_FLAVORS.key,
    WORKLOAD_PRIORITY_CLASSES.key,
}

RuntimeResolver = Callable[[str, dict[str, Any]], dict[str, Any]]


def _of(pod: dict[str, Any], tj: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(JOBSET_NAME_LABEL) == tj["metadata"]["name"]


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _ts(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class KueueSimulation(Scheduling, QueueStatus, Eviction, TrainJobSync, QueueControls):
    """The Kueue controller + scheduler + visibility server of one LocalCluster."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        config: KueueConfig,
        resolve_runtime: RuntimeResolver,
    ) -> None:
        self.store = store
        self.config = config
        self.resolve_runtime = resolve_runtime
        versions = served_versions(config.version)
        register_kinds(registry, versions)
        for kind in KUEUE_KINDS:  # stored in the oldest Kueue's only version where it has one
            store.storage_versions[kind.key] = f"{kind.group}/{versions[0]}"
        self._lock = threading.RLock()
        self._seq = itertools.count()
        self._order: dict[str, int] = {}  # workload uid -> place in the queue order
        self._requeue_at: dict[str, float] = {}  # workload uid -> not before (epoch seconds)
        self._admitted_at: dict[str, float] = {}  # workload uid -> epoch seconds
        self._max_exec: dict[str, int] = {}
        self._reserved_at: dict[str, float] = {}  # waiting for (simulated) admission checks
        self._running: dict[str, list[dict[str, Any]]] = {}
        self._preempting: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self._webhook = TrainJobWebhook(store, config)
        if config.local_queue is not None:
            self._create_defaults()

    # -- setup -----------------------------------------------------------------------------

    def webhook(self, kind: Any, op: str, obj: dict[str, Any], old: dict[str, Any] | None):
        """The admission hook to register with the API server."""
        return self._webhook(kind, op, obj, old)

    def _create_defaults(self) -> None:
        cfg = self.config
        self.store.create(RESOURCE_FLAVORS, {"metadata": {"name": cfg.flavor}, "spec": {}})
        self.store.create(CLUSTER_QUEUES, self.cluster_queue_body(cfg.cluster_queue, cfg.quota))
        self.store.create(
            LOCAL_QUEUES,
            {
                "metadata": {"name": cfg.local_queue, "namespace": cfg.namespace},
                "spec": {"clusterQueue": cfg.cluster_queue},
            },
            cfg.namespace,
        )

    def cluster_queue_body(
        self, name: str, quota: dict[str, str | int], flavor: str | None = None
    ) -> dict[str, Any]:
        """A ClusterQueue with one resource group and one flavor holding ``quota``."""
        resources = sorted(quota)
        return {
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": self.config.queueing_strategy,
                "resourceGroups": [
                    {
                        "coveredResources": resources,
                        "flavors": [
                            {
                                "name": flavor or self.config.flavor,
                                "resources": [
                                    {"name": r, "nominalQuota": str(quota[r])} for r in resources
                                ],
                            }
                        ],
                    }
                ],
            },
        }

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start reconciling on ``loop`` (call from the loop's thread or before it runs)."""
        self._loop = loop
        self._main = loop.create_task(self._run())

    async def shutdown(self) -> None:
        # A flag as well as cancel(): on Python 3.11 asyncio.wait_for can swallow a
        # cancellation that lands in the same loop turn as the wake-up it was waiting for.
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        _initial, _, sub = self.store.subscribe(None, self.store.resource_version, loop)
        self._wakeup = sub.wakeup
        try:
            while not self._stopping:
                self._sync_safe()
                sub.wakeup.clear()
                if not any(self._relevant(ev) for ev in sub.drain()):
                    timeout = self._next_timer()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(sub.wakeup.wait(), timeout)
                    sub.wakeup.clear()
                    sub.drain()
        finally:
            self.store.unsubscribe(sub)

    @staticmethod
    def _relevant(ev: Event) -> bool:
        return ev.kind_key in WATCHED or (ev.kind_key == PODS.key and ev.type == "DELETED")

    def _next_timer(self) -> float:
        now = time.time()
        times = [t - now for t in self._requeue_at.values()]
        delay = self.config.admission_check_delay
        times += [t + delay - now for t in self._reserved_at.values()]
        for uid, since in self._admitted_at.items():
            limit = self._max_exec.get(uid)
            if limit:
                times.append(since + limit - now)
        return max(0.05, min([5.0, *times]))

    def _sync_safe(self) -> None:
        try:
            self.sync()
        except Exception:  # keep the simulation alive
            log.exception("kueue simulation pass failed")

    # -- the pass --------------------------------------------------------------------------

    def sync(self) -> None:
        """One reconcile pass over every TrainJob, Workload and queue."""
        with self._lock:
            self._max_exec: dict[str, int] = {}
            now = time.time()
            workloads = self._ensure_workloads()
            cqs = {o["metadata"]["name"]: o for o in self.store.list(CLUSTER_QUEUES)[0]}
            lqs = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in self.store.list(LOCAL_QUEUES)[0]
            }
            flavors = {o["metadata"]["name"] for o in self.store.list(RESOURCE_FLAVORS)[0]}
            pending: dict[str, list[dict[str, Any]]] = {}
            used: dict[str, Any] = {}
            self._running = {}
            for wl in workloads:
                wl = self._lifecycle(wl, now)
                if wl is None or C.is_true(wl, C.FINISHED):
                    continue
                uid = wl["metadata"]["uid"]
                if C.is_true(wl, C.QUOTA_RESERVED):
                    cq_name = (wl["status"].get("admission") or {}).get("clusterQueue", "")
                    used[cq_name] = add(used.get(cq_name, {}), usage_of(wl["status"]["admission"]))
                    if not C.is_true(wl, C.EVICTED):
                        self._running.setdefault(cq_name, []).append(wl)
                    continue
                if (wl.get("spec") or {}).get("active") is False:
                    continue
                problem = self._queue_problem(wl, lqs, cqs, flavors)
                if problem is not None:
                    self._set_pending(wl, *problem)
                    continue
                lq = lqs[(wl["metadata"]["namespace"], wl["spec"]["queueName"])]
                pending.setdefault(lq["spec"]["clusterQueue"], []).append(wl)
                self._order.setdefault(uid, next(self._seq))
            for cq_name, items in pending.items():
                self._schedule(cqs[cq_name], self._sorted(items), used.get(cq_name, {}), now)
            self._update_queues(cqs, lqs, flavors)

    def _ensure_workloads(self) -> list[dict[str, Any]]:
        """Create missing Workloads, delete orphaned ones; return the Workloads."""
        trainjobs = self.store.list(TRAINJOBS)[0]
        trainjobs.sort(key=lambda o: (_ts(o["metadata"]["creationTimestamp"]),))
        by_uid = {
            (o["metadata"].get("labels") or {}).get(JOB_UID_LABEL): o
            for o in self.store.list(WORKLOADS)[0]
        }
        live = set()
        for tj in trainjobs:
            uid = tj["metadata"]["uid"]
            live.add(uid)
            if uid in by_uid or queue_name(tj) is None or tj["metadata"].get("deletionTimestamp"):
                continue
            classes = self._priority_classes()
            pclass = (tj["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
            if pclass and pclass not in classes:
                # No Workload: the job reconciler retries later. Kueue 0.14-0.19 only log it
                # (measured on v0.19.2 by tests/differential); newer Kueue records a Warning
                # (pkg/controller/jobframework/reconciler.go, ErrPriorityClassNotFound ->
                # "WorkloadPriorityClass %q not found", reason WorkloadPriorityClassNotFound).
                if self.config.minor < 20:
                    continue
                record_event(
                    self.store,
                    tj,
                    reason="WorkloadPriorityClassNotFound",
                    message=f"WorkloadPriorityClass {pclass!r} not found".replace("'", '"'),
                    type="Warning",
                    component=JOB_CONTROLLER,
                )
                continue
            try:
                runtime = self.resolve_runtime(tj["metadata"]["namespace"], tj)
                body = build_workload(
                    tj,
                    runtime,
                    classes,
                    v1beta1=served_versions(self.config.version)[0] == "v1beta1",
                    trainer_version=self.config.trainer_version,
                )
                by_uid[uid] = self.store.create(WORKLOADS, body, tj["metadata"]["namespace"])
                record_event(  # jobframework/reconciler.go handleJobWithNoWorkload
                    self.store,
                    tj,
                    reason="CreatedWorkload",
                    message=f"Created Workload: {tj['metadata']['namespace']}/"
                    f"{body['metadata']['name']}",
                    component=JOB_CONTROLLER,
                )
            except ApiError as exc:
                log.debug("no workload for %s: %s", tj["metadata"]["name"], exc)
        out = []
        for uid, wl in by_uid.items():
            if uid not in live:  # owner gone: garbage-collect (releases its quota)
                with contextlib.suppress(ApiError):
                    self.store.remove(
                        WORKLOADS, wl["metadata"]["namespace"], wl["metadata"]["name"]
                    )
                for table in (self._order, self._requeue_at, self._admitted_at, self._reserved_at):
                    table.pop(wl["metadata"]["uid"], None)
                continue
            out.append(wl)
        return out

    def _priority_classes(self) -> dict[str, int]:
        """WorkloadPriorityClass name -> value: the served objects, and the configured ones."""
        served = {
            o["metadata"]["name"]: int(o.get("value") or 0)
            for o in self.store.list(WORKLOAD_PRIORITY_CLASSES)[0]
        }
        return {**self.config.priority_classes, **served}

    def _lifecycle(self, wl: dict[str, Any], now: float) -> dict[str, Any] | None:
        """Finish, complete an eviction, enforce max execution time, sync the TrainJob."""
        tj = self._trainjob(wl)
        if tj is None:
            return None
        uid = wl["metadata"]["uid"]
        if C.is_true(wl, C.FINISHED):
            return wl
        for kind, reason in (("Complete", "Succeeded"), ("Failed", "Failed")):
            done = C.get_cond(tj, kind)
            if done is not None and done.get("status") == "True":
                C.put(wl, C.FINISHED, True, reason, done.get("message") or f"TrainJob {kind}")
                self._admitted_at.pop(uid, None)
                return self._write(wl)
        reserved = C.is_true(wl, C.QUOTA_RESERVED)
        evicted = C.is_true(wl, C.EVICTED)
        checks_since = self._reserved_at.get(uid)
        checks_done = (
            checks_since is not None and now >= checks_since + self.config.admission_check_delay
        )
        if reserved and not evicted and checks_done and not C.is_true(wl, C.ADMITTED):
            C.put(wl, C.ADMITTED, True, "Admitted", C.ADMITTED_MSG)
            self._reserved_at.pop(uid, None)
        if reserved and not evicted and C.is_true(wl, C.ADMITTED):
            limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
            since = self._admitted_at.setdefault(uid, now)
            if limit:
                self._max_exec[uid] = int(limit)
                past = int((wl.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
                if past + (now - since) >= int(limit):
                    wl["spec"]["active"] = False
                    # pkg/controller/core/workload_controller.go: the deactivation target first,
                    # then the eviction that carries its cause
                    C.put(
                        wl,
                        C.DEACTIVATION_TARGET,
                        True,
                        "MaximumExecutionTimeExceeded",
                        "exceeding the maximum execution time",  # measured on v0.19.2
                    )
                    self._evict(
                        wl,
                        MAX_EXEC_REASON,
                        "The workload is deactivated due to exceeding the maximum execution time",
                        now,
                    )
                    evicted = True
        if reserved and evicted and not self._pods_left(tj):
            self._finish_eviction(wl, now)
            reserved = False
        admitted = reserved and not evicted and C.is_true(wl, C.ADMITTED)
        self._pods_ready(wl, tj, admitted, now)
        self._sync_trainjob(tj, wl, admitted)
        return self._write(wl)

    def _pods_ready(
        self, wl: dict[str, Any], tj: dict[str, Any], admitted: bool, now: float
    ) -> None:
        """The PodsReady condition (pkg/controller/jobframework/reconciler.go,
        generatePodsReadyCondition) and, with waitForPodsReady (default on from Kueue 0.19,
        30 min), the eviction of a job whose pods are not ready in time."""
        if not admitted:
            C.put(wl, C.PODS_READY, False, "WaitForStart", C.PODS_NOT_READY_MSG)
            return
        pods = [p for p in self.store.list(PODS, tj["metadata"]["namespace"])[0] if _of(p, tj)]
        ready = bool(pods) and all(_ready(p) for p in pods)
        before = C.get_cond(wl, C.PODS_READY) or {}
        if ready:
            recovered = before.get("reason") in ("WaitForRecovery", "Recovered")
            C.put(wl, C.PODS_READY, True, "Recovered" if recovered else "Started", C.PODS_READY_MSG)
            return
        failed = any((p.get("status") or {}).get("phase") == "Failed" for p in pods)
        if before.get("status") == "True" and failed:
            C.put(wl, C.PODS_READY, False, "WaitForRecovery", C.PODS_RECOVERY_MSG)
            return
        C.put(wl, C.PODS_READY, False, "WaitForStart", C.PODS_NOT_READY_MSG)
        timeout = self.config.pods_ready_timeout
        since = self._admitted_at.get(wl["metadata"]["uid"])
        if timeout and since is not None and now - since >= timeout:
            meta = wl["metadata"]
            self._evict(
                wl,
                "PodsReadyTimeout",
                f"Exceeded the PodsReady timeout {meta['namespace']}/{meta['name']}",
                now,
            )


__all__ = [
    "CHECKS_PENDING_MSG",
    "JOBSET_NAME_LABEL",
    "PENDING_WORKLOADS",
    "KueueSimulation",
]
