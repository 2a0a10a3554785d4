"""TrainJob and JobSet status: per-replicated-job counts, success policy, conditions."""

from __future__ import annotations

import contextlib
from typing import Any

from ..core.apierror import ApiError
from ..core.resources import JOBSETS, TRAINJOBS
from ..core.status_conditions import condition, set_condition
from ..core.store import Store
from ..kubelet.container_status import pod_ready
from .job_state import JobState
from .podspec import slots


class JobStatusUpdater:
    """The status method of the Controller (a mixin; it uses the pod helpers of PodLifecycle)."""

    store: Store

    def _update_status(self, tj: dict[str, Any], st: JobState, suspend: bool) -> None:
        all_slots = slots(st.jobset_spec)
        jobs_status: list[dict[str, Any]] = []
        rjob_done: dict[str, bool] = {}
        any_failed = False
        for rjob in self._rjobs(st):
            rname = rjob["name"]
            replicas = int(rjob.get("replicas", 1))
            counts = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            done_jobs = 0
            for j in range(replicas):
                job_slots = [s for s in all_slots[rname] if s.job_index == j]
                pods = [self._pod(st, s) for s in job_slots]
                phases = [(p or {}).get("status", {}).get("phase") for p in pods]
                if suspend:
                    counts["suspended"] += 1
                elif any(ph == "Failed" for ph in phases):
                    counts["failed"] += 1
                elif (job_slots and all(ph == "Succeeded" for ph in phases)) or not job_slots:
                    counts["succeeded"] += 1
                    done_jobs += 1
                elif any(p is not None for p in pods):
                    counts["active"] += 1
                    ready = sum(
                        1
                        for p in pods
                        if p is not None
                        and (pod_ready(p) or p["status"].get("phase") == "Succeeded")
                    )
                    if ready >= len(job_slots):
                        counts["ready"] += 1
            any_failed = any_failed or counts["failed"] > 0
            rjob_done[rname] = done_jobs == replicas
            jobs_status.append({"name": rname, **counts})
        policy = st.jobset_spec.get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or list(rjob_done)
        if policy.get("operator") == "Any":
            complete = any(rjob_done.get(t) for t in targets)
        else:
            complete = all(rjob_done.get(t) for t in targets)
        conds_tj: list[dict[str, Any]] = []
        conds_js: list[dict[str, Any]] = []
        if suspend:
            conds_tj.append(condition("Suspended", "True", "Suspended", "TrainJob is suspended"))
            conds_js.append(condition("Suspended", "True", "SuspendedJobs", "jobset is suspended"))
        elif st.was_suspended:
            conds_tj.append(condition("Suspended", "False", "Resumed", "TrainJob is resumed"))
            conds_js.append(condition("Suspended", "False", "ResumeJobs", "jobset is resumed"))
        if not suspend and any_failed:
            msg = "jobset failed due to one or more job failures"
            conds_tj.append(condition("Failed", "True", "FailedJobs", msg))
            conds_js.append(condition("Failed", "True", "FailedJobs", msg))
            st.finished = True
        elif not suspend and complete:
            msg = "jobset completed successfully"
            conds_tj.append(condition("Complete", "True", "AllJobsCompleted", msg))
            conds_js.append(condition("Completed", "True", "AllJobsCompleted", msg))
            st.finished = True
        if st.finished:
            self._delete_pods(st, only_active=True)

        def apply(o: dict[str, Any], conds: list[dict[str, Any]], key: str) -> None:
            status = o.setdefault("status", {})
            for c in conds:
                set_condition(status, c)
            status[key] = [dict(j) for j in jobs_status]  # its own list in each object
            if key == "replicatedJobsStatus":  # JobSetStatus: restarts is not omitempty
                status.setdefault("restarts", 0)
                for c in conds:
                    if c["type"] in ("Completed", "Failed") and c["status"] == "True":
                        status["terminalState"] = c["type"]

        with contextlib.suppress(ApiError):
            self.store.mutate(
                TRAINJOBS, st.namespace, st.name, lambda o: apply(o, conds_tj, "jobsStatus")
            )
        with contextlib.suppress(ApiError):
            self.store.mutate(
                JOBSETS,
                st.namespace,
                st.name,
                lambda o: apply(o, conds_js, "replicatedJobsStatus"),
            )
