"""Queueing and admission: queue checks, queue order, FIFO/StrictFIFO fitting into quota."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..core.events import record_event
from . import workload_conditions as C
from .quota_fit import add, fit, flavor_names, usage_of
from .state import SimulationState
from .workloads import resource_requests

CHECKS_PENDING_MSG = "The workload has not all admission checks"


def _age(obj: dict[str, Any], now: float) -> float:
    """Seconds since ``obj`` was created (0 when unknown)."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - created)


def is_stopped(obj: dict[str, Any]) -> bool:
    """A LocalQueue or ClusterQueue with a stopPolicy other than None."""
    return ((obj.get("spec") or {}).get("stopPolicy") or "None") != "None"


class Scheduling(SimulationState):
    """Pending reasons and quota admission (a part of KueueSimulation)."""

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
        if is_stopped(lq):
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
        return not is_stopped(cq) and all(f in flavors for f in flavor_names(cq))

    def _set_pending(self, wl: dict[str, Any], granular: str, message: str) -> None:
        reason = C.reason_for(granular, self.config.reasons)
        before = (C.get_cond(wl, C.QUOTA_RESERVED) or {}).get("message")
        C.put(wl, C.QUOTA_RESERVED, False, reason, message)
        # Admitted=False/NoReservation only once there was a reservation to lose
        # (pkg/workload/admission.go UnsetQuotaReservationWithCondition); a Workload that was
        # never admitted has no Admitted condition (measured on v0.19.2)
        if C.get_cond(wl, C.ADMITTED) is not None:
            C.put(wl, C.ADMITTED, False, "NoReservation", C.NO_RESERVATION_MSG)
        wl.setdefault("status", {})["resourceRequests"] = resource_requests(wl)
        wl = self._write(wl)
        if message != before and granular not in (C.MISCONFIGURED, C.SUSPENDED):
            # pkg/scheduler/scheduler.go: a Warning "Pending" Event with the reasons
            record_event(
                self.store,
                wl,
                reason="Pending",
                message=message,
                type="Warning",
                component="kueue-admission",
            )

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
            if not result.ok and not blocked:
                victims = self._preemption_targets(wl, cq, used)
                if victims:
                    self._preempt_for(wl, victims, now, cq["metadata"]["name"])
                    self._preempting[uid] = len(victims)
                if uid in self._preempting:  # until the victims' quota is free
                    n = self._preempting[uid]
                    result.message += f". Pending the preemption of {n} workload(s)"
            if not result.ok or blocked:
                if result.ok:  # StrictFIFO: the head blocks everyone behind it
                    result.reason, result.message = C.WAITING_FOR_QUOTA, self._head_message(wl)
                self._set_pending(wl, result.reason, result.message)
                blocked = blocked or strict
                continue
            used = add(used, result.usage)
            self._preempting.pop(uid, None)
            self._admit(wl, cq, result.pod_sets, now)

    def _preemption_targets(
        self, wl: dict[str, Any], cq: dict[str, Any], used: Any
    ) -> list[dict[str, Any]]:
        """Admitted Workloads of ``cq`` whose preemption lets ``wl`` fit, when the ClusterQueue
        preempts by priority (``spec.preemption.withinClusterQueue: LowerPriority``): lowest
        priority first, then the most recently admitted (pkg/scheduler/preemption/
        preemption.go, candidatesOrdering). Empty when preemption would not make room."""
        policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue")
        if policy not in ("LowerPriority", "LowerOrNewerEqualPriority"):
            return []
        mine = int((wl.get("spec") or {}).get("priority") or 0)
        running = self._running.get(cq["metadata"]["name"], [])
        candidates = sorted(
            (
                r
                for r in running
                if int((r.get("spec") or {}).get("priority") or 0) < mine
                and not C.is_true(r, C.EVICTED)
            ),
            key=lambda r: (
                int((r.get("spec") or {}).get("priority") or 0),
                -self._admitted_at.get(r["metadata"]["uid"], 0.0),
            ),
        )
        freed = used
        chosen: list[dict[str, Any]] = []
        for r in candidates:
            usage = usage_of((r.get("status") or {}).get("admission") or {})
            freed = add(freed, {k: -v for k, v in usage.items()})
            chosen.append(r)
            if fit(wl, cq, freed).ok:
                return chosen
        return []

    def _preempt_for(
        self, preemptor: dict[str, Any], victims: list[dict[str, Any]], now: float, cq: str
    ) -> None:
        """Evict ``victims`` for ``preemptor`` (Evicted/Preempted with Kueue's message,
        pkg/scheduler/preemption/preemption.go; pkg/workload/admission.go)."""
        tj = self._trainjob(preemptor)
        job_uid = tj["metadata"]["uid"] if tj is not None else ""
        mine = int((preemptor.get("spec") or {}).get("priority") or 0)
        for victim in victims:
            theirs = int((victim.get("spec") or {}).get("priority") or 0)
            message = (
                f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, "
                f"JobUID: {job_uid}) due to prioritization in the ClusterQueue"
            )
            if self.config.minor >= 15:  # the paths: pkg/scheduler/preemption at v0.15+
                message += f"; preemptor path: /{cq}; preemptee path: /{cq}"
            priorities = (
                f"preemptor effective priority: {mine} (base: {mine}, boost: 0); "
                f"preemptee effective priority: {theirs} (base: {theirs}, boost: 0)"
            )
            self._evict(victim, "Preempted", message, now)
            victim = self._write(victim)
            meta = victim["metadata"]
            events = [
                (victim, "Preempted", message),
                (victim, "EvictedDueToPreempted", message),
            ]
            if self.config.minor >= 17:
                # measured: v0.19.2 adds the priorities and a PreemptedWorkload Event on the
                # preemptor; v0.14.8 does neither (versions in between not measured)
                events[0] = (victim, "Preempted", f"{message}; {priorities}")
                events.append(
                    (
                        preemptor,
                        "PreemptedWorkload",
                        f"Preempted workload {meta['namespace']}/{meta['name']} (UID: "
                        f"{meta['uid']}) in ClusterQueue {cq}; {priorities}",
                    )
                )
            for obj, reason, text in events:
                record_event(
                    self.store, obj, reason=reason, message=text, component="kueue-admission"
                )
            vtj = self._trainjob(victim)
            if vtj is not None:
                self._sync_trainjob(vtj, victim, False)

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
        # pkg/scheduler/scheduler.go admit: the two Events of an admission
        queued = _age(wl, now)
        record_event(
            self.store,
            wl,
            reason="QuotaReserved",
            message=f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was "
            f"{queued:.0f}s",
            component="kueue-admission",
        )
        if C.is_true(wl, C.ADMITTED):
            record_event(
                self.store,
                wl,
                reason="Admitted",
                message=f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
                component="kueue-admission",
            )
        tj = self._trainjob(wl)
        if tj is not None:
            self._sync_trainjob(tj, wl, C.is_true(wl, C.ADMITTED))
