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
from datetime import datetime, timezone
from typing import Any

from ..apierror import ApiError
from ..resources import PODS, TRAINJOBS, Registry
from ..store import Event, Store, now_rfc3339
from . import conditions as C
from .admission import add, fit, flavor_names, nominal, usage_of
from .config import KueueConfig
from .kinds import (
    CLUSTER_QUEUES,
    JOB_UID_LABEL,
    LOCAL_QUEUES,
    MANAGER,
    PENDING_WORKLOADS,
    PODSET_LABEL,
    RESOURCE_FLAVORS,
    WORKLOADS,
    register_kinds,
)
from .quantity import format_quantity
from .visibility import missing, summary
from .webhook import queue_name, trainjob_webhook
from .workloads import build_workload, resource_requests

log = logging.getLogger(__name__)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
MAX_EXEC_REASON = "DeactivatedDueToMaximumExecutionTimeExceeded"
CHECKS_PENDING_MSG = "The workload has not all admission checks"
WATCHED = {
    TRAINJOBS.key,
    WORKLOADS.key,
    LOCAL_QUEUES.key,
    CLUSTER_QUEUES.key,
    RESOURCE_FLAVORS.key,
}

RuntimeResolver = Callable[[str, dict[str, Any]], dict[str, Any]]


def _ts(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _stopped(obj: dict[str, Any]) -> bool:
    return ((obj.get("spec") or {}).get("stopPolicy") or "None") != "None"


class KueueSimulation:
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
        register_kinds(registry)
        self._lock = threading.RLock()
        self._seq = itertools.count()
        self._order: dict[str, int] = {}  # workload uid -> place in the queue order
        self._requeue_at: dict[str, float] = {}  # workload uid -> not before (epoch seconds)
        self._admitted_at: dict[str, float] = {}  # workload uid -> epoch seconds
        self._max_exec: dict[str, int] = {}
        self._reserved_at: dict[str, float] = {}  # waiting for (simulated) admission checks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        if config.local_queue is not None:
            self._create_defaults()

    # -- setup -----------------------------------------------------------------------------

    def webhook(self, kind: Any, op: str, obj: dict[str, Any], old: dict[str, Any] | None):
        """The admission hook to register with the API server."""
        return trainjob_webhook(kind, op, obj, old)

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

    def _kick(self) -> None:
        """Ask the loop for a pass soon (thread-safe)."""
        loop, wake = self._loop, self._wakeup
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

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
            for wl in workloads:
                wl = self._lifecycle(wl, now)
                if wl is None or C.is_true(wl, C.FINISHED):
                    continue
                uid = wl["metadata"]["uid"]
                if C.is_true(wl, C.QUOTA_RESERVED):
                    cq_name = (wl["status"].get("admission") or {}).get("clusterQueue", "")
                    used[cq_name] = add(used.get(cq_name, {}), usage_of(wl["status"]["admission"]))
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
            try:
                runtime = self.resolve_runtime(tj["metadata"]["namespace"], tj)
                body = build_workload(tj, runtime, self.config.priority_classes)
                by_uid[uid] = self.store.create(WORKLOADS, body, tj["metadata"]["namespace"])
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

    def _trainjob(self, wl: dict[str, Any]) -> dict[str, Any] | None:
        owner = (wl["metadata"].get("ownerReferences") or [{}])[0]
        tj = self.store.try_get(TRAINJOBS, wl["metadata"]["namespace"], owner.get("name", ""))
        if tj is None or tj["metadata"]["uid"] != owner.get("uid"):
            return None
        return tj

    def _write(self, wl: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.store.replace(WORKLOADS, wl, check_rv=False)
        except ApiError:
            return wl

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
        self._sync_trainjob(tj, wl, admitted)
        return self._write(wl)

    def _pods_left(self, tj: dict[str, Any]) -> bool:
        pods, _ = self.store.list(PODS, tj["metadata"]["namespace"])
        name = tj["metadata"]["name"]
        return any((p["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL) == name for p in pods)

    def _evict(self, wl: dict[str, Any], reason: str, message: str, now: float) -> None:
        """Phase 1: Evicted=True (quota kept until the pods are gone); the job is suspended."""
        uid = wl["metadata"]["uid"]
        C.put(wl, C.EVICTED, True, reason, message)
        if reason == "Preempted":
            C.put(wl, C.PREEMPTED, True, "InClusterQueue", message)
        C.put(wl, C.REQUEUED, False, reason, message)
        status = wl.setdefault("status", {})
        since = self._admitted_at.pop(uid, None)
        if since is not None:
            past = int(status.get("accumulatedPastExecutionTimeSeconds") or 0)
            status["accumulatedPastExecutionTimeSeconds"] = past + int(now - since)
        stats = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
        for row in stats:
            if row.get("reason") == reason:
                row["count"] = int(row.get("count", 0)) + 1
                break
        else:
            stats.append({"reason": reason, "underlyingCause": "", "count": 1})

    def _finish_eviction(self, wl: dict[str, Any], now: float) -> None:
        """Phase 2 (pods gone): release the quota and requeue (after the backoff, if any)."""
        uid = wl["metadata"]["uid"]
        ev = C.get_cond(wl, C.EVICTED) or {}
        reason, message = ev.get("reason", "Evicted"), ev.get("message", "")
        status = wl["status"]
        status.pop("admission", None)
        C.put(wl, C.QUOTA_RESERVED, False, C.PENDING, message)
        C.put(wl, C.ADMITTED, False, "NoReservation", C.NO_RESERVATION_MSG)
        if (wl.get("spec") or {}).get("active") is False:
            return
        count = int((status.get("requeueState") or {}).get("count") or 0) + 1
        status["requeueState"] = {"count": count}
        backoff = self.config.requeue_backoff
        if backoff > 0:
            at = now + backoff
            self._requeue_at[uid] = at
            status["requeueState"]["requeueAt"] = datetime.fromtimestamp(at, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        else:
            C.put(wl, C.REQUEUED, True, reason, message)
        self._order[uid] = next(self._seq)  # requeued by eviction time: to the back

    def _sync_trainjob(self, tj: dict[str, Any], wl: dict[str, Any], admitted: bool) -> None:
        """Admitted: unsuspend and fill Kueue's runtime patch; otherwise keep it suspended."""
        spec = tj.get("spec") or {}
        want_suspend = not admitted
        patch = self._runtime_patch(wl) if admitted else {"manager": MANAGER}
        patches = list(spec.get("runtimePatches") or [])
        new_patches = [p for p in patches if p.get("manager") != MANAGER]
        old = next((p for p in patches if p.get("manager") == MANAGER), None)
        if (
            old is not None
            and admitted
            and old.get("trainingRuntimeSpec") == patch.get("trainingRuntimeSpec")
        ):
            patch = old
        new_patches.append(patch)
        if bool(spec.get("suspend")) == want_suspend and (
            old is not None
            and {k: v for k, v in old.items() if k != "time"}
            == {k: v for k, v in patch.items() if k != "time"}
        ):
            return

        def apply(o: dict[str, Any]) -> None:
            o.setdefault("spec", {})["suspend"] = want_suspend
            o["spec"]["runtimePatches"] = new_patches

        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, tj["metadata"]["namespace"], tj["metadata"]["name"], apply)

    def _runtime_patch(self, wl: dict[str, Any]) -> dict[str, Any]:
        """Kueue's patch on admission: podset labels, flavor node labels and tolerations."""
        rjobs = []
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            flavor_names_ = sorted(set((psa.get("flavors") or {}).values()))
            node_selector: dict[str, str] = {}
            tolerations: list[dict[str, Any]] = []
            for fname in flavor_names_:
                rf = self.store.try_get(RESOURCE_FLAVORS, None, fname) or {}
                node_selector.update((rf.get("spec") or {}).get("nodeLabels") or {})
                tolerations += (rf.get("spec") or {}).get("tolerations") or []
            pod_spec: dict[str, Any] = {}
            if node_selector:
                pod_spec["nodeSelector"] = node_selector
            if tolerations:
                pod_spec["tolerations"] = tolerations
            pod_tpl: dict[str, Any] = {"metadata": {"labels": {PODSET_LABEL: psa["name"]}}}
            if pod_spec:
                pod_tpl["spec"] = pod_spec
            rjobs.append({"name": psa["name"], "template": {"spec": {"template": pod_tpl}}})
        return {
            "manager": MANAGER,
            "time": now_rfc3339(),
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}},
        }

    # -- queueing --------------------------------------------------------------------------

    def _queue_problem(
        self,
        wl: dict[str, Any],
        lqs: dict[tuple[str, str], dict[str, Any]],
        cqs: dict[str, dict[str, Any]],
        flavors: set[str],
    ) -> tuple[str, str] | None:
        name = (wl.get("spec") or {}).get("queueName", "")
        lq = lqs.get((wl["metadata"]["namespace"], name))
        if lq is None:
            return C.MISCONFIGURED, f"LocalQueue {name} doesn't exist"
        if _stopped(lq):
            return C.SUSPENDED, f"LocalQueue {name} is stopped"
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        cq = cqs.get(cq_name)
        if cq is None:
            return C.MISCONFIGURED, f"ClusterQueue {cq_name} doesn't exist"
        if not self._cq_active(cq, flavors):
            return C.SUSPENDED, f"ClusterQueue {cq_name} is inactive"
        return None

    @staticmethod
    def _cq_active(cq: dict[str, Any], flavors: set[str]) -> bool:
        return not _stopped(cq) and all(f in flavors for f in flavor_names(cq))

    def _set_pending(self, wl: dict[str, Any], granular: str, message: str) -> None:
        reason = C.reason_for(granular, self.config.reason_style)
        C.put(wl, C.QUOTA_RESERVED, False, reason, message)
        C.put(wl, C.ADMITTED, False, "NoReservation", C.NO_RESERVATION_MSG)
        wl.setdefault("status", {})["resourceRequests"] = resource_requests(wl)
        self._write(wl)

    def _sorted(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Queue order: priority (high first), then time entered the queue (FIFO)."""
        return sorted(
            items,
            key=lambda w: (
                -int((w.get("spec") or {}).get("priority") or 0),
                self._order.get(w["metadata"]["uid"], 1 << 60),
            ),
        )

    def _schedule(
        self, cq: dict[str, Any], ordered: list[dict[str, Any]], used: Any, now: float
    ) -> None:
        strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
        blocked = False
        for wl in ordered:
            uid = wl["metadata"]["uid"]
            at = self._requeue_at.get(uid)
            if at is not None:
                if at > now:
                    continue
                del self._requeue_at[uid]
                C.put(wl, C.REQUEUED, True, "BackoffFinished", "The workload backoff was finished")
                wl["status"].get("requeueState", {}).pop("requeueAt", None)
            result = fit(wl, cq, used)
            if not result.ok or blocked:
                if result.ok:  # StrictFIFO: the head blocks everyone behind it
                    result.reason, result.message = C.WAITING_FOR_QUOTA, self._head_message(wl)
                self._set_pending(wl, result.reason, result.message)
                blocked = blocked or strict
                continue
            used = add(used, result.usage)
            self._admit(wl, cq, result.pod_sets, now)

    @staticmethod
    def _head_message(wl: dict[str, Any]) -> str:
        cond = C.get_cond(wl, C.QUOTA_RESERVED) or {}
        return cond.get("message") or "Workload is waiting behind the head of a StrictFIFO queue"

    def _admit(
        self, wl: dict[str, Any], cq: dict[str, Any], pod_sets: list[dict[str, Any]], now: float
    ) -> None:
        cq_name = cq["metadata"]["name"]
        status = wl.setdefault("status", {})
        status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": pod_sets}
        status.pop("resourceRequests", None)
        C.put(
            wl, C.QUOTA_RESERVED, True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}"
        )
        uid = wl["metadata"]["uid"]
        if self.config.admission_check_delay > 0:
            self._reserved_at[uid] = now
            C.put(wl, C.ADMITTED, False, "UnsatisfiedChecks", CHECKS_PENDING_MSG)
        else:
            C.put(wl, C.ADMITTED, True, "Admitted", C.ADMITTED_MSG)
        for type_ in (C.EVICTED, C.PREEMPTED):
            old = C.get_cond(wl, type_)
            if old is not None and old.get("status") == "True":
                C.put(wl, type_, False, "QuotaReserved", f"Previously: {old.get('message', '')}")
        if C.is_true(wl, C.ADMITTED):
            self._admitted_at[uid] = now
        wl = self._write(wl)
        tj = self._trainjob(wl)
        if tj is not None:
            self._sync_trainjob(tj, wl, C.is_true(wl, C.ADMITTED))

    # -- queue status ----------------------------------------------------------------------

    def ordered_pending(self, cq_name: str) -> list[dict[str, Any]]:
        """Pending workloads of a ClusterQueue in queue order (what the visibility API lists)."""
        with self._lock:
            lqs = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in self.store.list(LOCAL_QUEUES)[0]
            }
            items = []
            for wl in self.store.list(WORKLOADS)[0]:
                if C.is_true(wl, C.QUOTA_RESERVED) or C.is_true(wl, C.FINISHED):
                    continue
                if (wl.get("spec") or {}).get("active") is False:
                    continue
                lq = lqs.get((wl["metadata"]["namespace"], wl["spec"].get("queueName", "")))
                if lq is None or lq["spec"].get("clusterQueue") != cq_name:
                    continue
                items.append(wl)
            return self._sorted(items)

    def _update_queues(
        self,
        cqs: dict[str, dict[str, Any]],
        lqs: dict[tuple[str, str], dict[str, Any]],
        flavors: set[str],
    ) -> None:
        wls = self.store.list(WORKLOADS)[0]
        for cq_name, cq in cqs.items():
            mine = [
                w
                for w in wls
                if (w.get("status", {}).get("admission") or {}).get("clusterQueue") == cq_name
                and C.is_true(w, C.QUOTA_RESERVED)
                and not C.is_true(w, C.FINISHED)
            ]
            usage: dict[Any, Any] = {}
            for w in mine:
                usage = add(usage, usage_of(w["status"]["admission"]))
            quota = nominal(cq)
            by_flavor: dict[str, list[dict[str, Any]]] = {}
            for (fname, res), _q in quota.items():
                amount = usage.get((fname, res), 0)
                by_flavor.setdefault(fname, []).append(
                    {"name": res, "total": format_quantity(amount, res), "borrowed": "0"}
                )
            flv = [{"name": f, "resources": r} for f, r in by_flavor.items()]
            status = dict(cq.get("status") or {})
            status.update(
                pendingWorkloads=len(self.ordered_pending(cq_name)),
                reservingWorkloads=len(mine),
                admittedWorkloads=sum(1 for w in mine if C.is_true(w, C.ADMITTED)),
                flavorsReservation=flv,
                flavorsUsage=flv,
            )
            cq = {**cq, "status": status}
            missing_flavors = [f for f in flavor_names(cq) if f not in flavors]
            if _stopped(cq):
                C.put(cq, "Active", False, "Stopped", "Can't admit new workloads: is stopped.")
            elif missing_flavors:
                C.put(
                    cq,
                    "Active",
                    False,
                    "FlavorNotFound",
                    "Can't admit new workloads: references missing ResourceFlavor(s): "
                    f"{','.join(missing_flavors)}.",
                )
            else:
                C.put(cq, "Active", True, "Ready", "Can admit new workloads")
            with contextlib.suppress(ApiError):
                self.store.replace(CLUSTER_QUEUES, cq, check_rv=False)
        for (ns, name), lq in lqs.items():
            mine = [
                w
                for w in wls
                if w["metadata"]["namespace"] == ns
                and (w.get("spec") or {}).get("queueName") == name
                and not C.is_true(w, C.FINISHED)
            ]
            reserving = [w for w in mine if C.is_true(w, C.QUOTA_RESERVED)]
            status = dict(lq.get("status") or {})
            status.update(
                pendingWorkloads=sum(
                    1
                    for w in mine
                    if not C.is_true(w, C.QUOTA_RESERVED) and w["spec"].get("active") is not False
                ),
                reservingWorkloads=len(reserving),
                admittedWorkloads=sum(1 for w in reserving if C.is_true(w, C.ADMITTED)),
            )
            lq = {**lq, "status": status}
            cq = cqs.get((lq.get("spec") or {}).get("clusterQueue", ""))
            if _stopped(lq):
                C.put(lq, "Active", False, "Stopped", "LocalQueue is stopped")
            elif cq is None:
                C.put(
                    lq,
                    "Active",
                    False,
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            elif not self._cq_active(cq, flavors):
                C.put(
                    lq,
                    "Active",
                    False,
                    "ClusterQueueIsInactive",
                    "Can't submit new workloads to clusterQueue",
                )
            else:
                C.put(lq, "Active", True, "Ready", "Can submit new workloads to localQueue")
            with contextlib.suppress(ApiError):
                self.store.replace(LOCAL_QUEUES, lq, check_rv=False)

    # -- visibility API ----------------------------------------------------------------------

    def pending_workloads(
        self,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """GET .../localqueues/NAME/pendingworkloads or .../clusterqueues/NAME/pendingworkloads."""
        query = query or {}
        limit = int(query.get("limit") or 1000)
        offset = int(query.get("offset") or 0)
        if plural == LOCAL_QUEUES.plural:
            lq = self.store.try_get(LOCAL_QUEUES, namespace, name)
            if lq is None:
                raise missing("localqueues", name)
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            ordered = self.ordered_pending(cq_name)
            return summary(
                version, ordered, namespace=namespace, local_queue=name, limit=limit, offset=offset
            )
        if self.store.try_get(CLUSTER_QUEUES, None, name) is None:
            raise missing("clusterqueues", name)
        return summary(
            version,
            self.ordered_pending(name),
            namespace=None,
            local_queue=None,
            limit=limit,
            offset=offset,
        )

    # -- test controls (any thread) ----------------------------------------------------------

    def workload_for(self, trainjob: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The Workload of a TrainJob (by the job-uid label), or None."""
        ns = namespace or self.config.namespace
        tj = self.store.try_get(TRAINJOBS, ns, trainjob)
        if tj is None:
            return None
        for wl in self.store.list(WORKLOADS, ns)[0]:
            if (wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == tj["metadata"]["uid"]:
                return wl
        return None

    def evict(
        self,
        trainjob: str,
        reason: str = "PodsReadyTimeout",
        message: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Evict an admitted workload: the TrainJob is suspended, its pods go, it is requeued."""
        with self._lock:
            wl = self.workload_for(trainjob, namespace)
            if wl is None or not C.is_true(wl, C.QUOTA_RESERVED):
                raise ValueError(f"TrainJob {trainjob} has no admitted Workload to evict")
            text = message or {
                "PodsReadyTimeout": "Exceeded the PodsReady timeout "
                f"{wl['metadata']['namespace']}/{wl['metadata']['name']}",
                "ClusterQueueStopped": "The ClusterQueue is stopped",
                "LocalQueueStopped": "The LocalQueue is stopped",
            }.get(reason, f"The workload was evicted: {reason}")
            self._evict(wl, reason, text, time.time())
            wl = self._write(wl)
            tj = self._trainjob(wl)
            if tj is not None:
                self._sync_trainjob(tj, wl, False)
        self._kick()
        return wl

    def preempt(
        self, trainjob: str, namespace: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Preempt a workload as if a higher-priority one needed its quota."""
        wl = self.workload_for(trainjob, namespace)
        if wl is None:
            raise ValueError(f"TrainJob {trainjob} has no Workload")
        preemptor = by or "00000000-0000-0000-0000-000000000000"
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor}, JobUID: {preemptor}) "
            "due to prioritization in the ClusterQueue"
        )
        return self.evict(trainjob, "Preempted", message, namespace)

    def set_quota(
        self,
        quota: dict[str, str | int],
        cluster_queue: str | None = None,
        flavor: str | None = None,
    ) -> None:
        """Set nominal quota (resource -> amount) of a flavor of a ClusterQueue."""
        name = cluster_queue or self.config.cluster_queue
        fname = flavor or self.config.flavor

        def apply(cq: dict[str, Any]) -> None:
            groups = cq["spec"].setdefault("resourceGroups", [])
            for res, amount in quota.items():
                rg = next((g for g in groups if res in g.get("coveredResources", [])), None)
                if rg is None:
                    rg = groups[0] if groups else None
                    if rg is None:
                        rg = {"coveredResources": [], "flavors": [{"name": fname, "resources": []}]}
                        groups.append(rg)
                    rg["coveredResources"].append(res)
                    for fl in rg["flavors"]:
                        fl["resources"].append({"name": res, "nominalQuota": "0"})
                fl = next((f for f in rg["flavors"] if f["name"] == fname), None)
                if fl is None:
                    raise ValueError(f"ClusterQueue {name} has no flavor {fname}")
                for r in fl["resources"]:
                    if r["name"] == res:
                        r["nominalQuota"] = str(amount)

        with self._lock:
            self.store.mutate(CLUSTER_QUEUES, None, name, apply)
        self._kick()

    def set_stop_policy(self, local_queue: str | None = None, policy: str = "Hold") -> None:
        """Stop (``Hold``/``HoldAndDrain``) or resume (``None``) a LocalQueue."""
        name = local_queue or self.config.local_queue or ""

        def apply(lq: dict[str, Any]) -> None:
            lq["spec"]["stopPolicy"] = policy

        self.store.mutate(LOCAL_QUEUES, self.config.namespace, name, apply)
        self._kick()


__all__ = ["PENDING_WORKLOADS", "KueueSimulation"]
