"""TrainJob -> JobSet -> pods: phases with delays, MPI launcher after nodes, suspend, cascade.

Runs on the cluster's event loop and reacts to store events, so a change made by anyone
(API request, test helper, a Kueue simulation) is reconciled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import processes
from .apierror import ApiError, invalid
from .faults import Faults
from .podspec import (
    JOBSET_NAME,
    TRAINER_CONTAINER,
    PodSlot,
    build_jobset_spec,
    build_pod,
    container_argv,
    env_dict,
    is_trainer_rjob,
    mpi_policy,
    slots,
)
from .resources import (
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from .store import Event, Store, now_rfc3339

log = logging.getLogger(__name__)
NODE_NAME = "local-node"
SSHD_LOG = "Server listening on 0.0.0.0 port 2222.\nServer listening on :: port 2222.\n"


@dataclass
class JobState:
    """What the controller tracks for one TrainJob (by uid)."""

    namespace: str
    name: str
    uid: str
    runtime: dict[str, Any]
    jobset_spec: dict[str, Any] = field(default_factory=dict)
    job_uids: dict[tuple[str, int], str] = field(default_factory=dict)
    pods: dict[PodSlot, str] = field(default_factory=dict)  # slot -> current pod name
    started_rjobs: set[str] = field(default_factory=set)
    finished: bool = False
    was_suspended: bool = False
    started_at: float | None = None
    hostfile: Path | None = None


def _cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }


def set_condition(status: dict[str, Any], cond: dict[str, Any]) -> None:
    """Upsert a condition; keep lastTransitionTime when the status did not change."""
    conds = status.setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            if c.get("status") == cond["status"]:
                cond = {**cond, "lastTransitionTime": c.get("lastTransitionTime")}
            if c != cond:
                conds[i] = cond
            return
    conds.append(cond)


def has_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Controller:
    """The TrainJob/JobSet/Job/kubelet simulation."""

    def __init__(
        self,
        store: Store,
        root: Path,
        faults: Faults,
        *,
        pending_delay: float,
        start_delay: float,
        delete_grace: float,
        ancestor_label_on_pods: bool,
    ) -> None:
        self.store = store
        self.root = root
        self.faults = faults
        self.pending_delay = pending_delay
        self.start_delay = start_delay
        self.delete_grace = delete_grace
        self.ancestor_label_on_pods = ancestor_label_on_pods
        self.sandboxes: dict[tuple[str, str], processes.PodSandbox] = {}
        self._jobs: dict[str, JobState] = {}
        self._pod_owner: dict[tuple[str, str], str] = {}
        self._pod_tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._finalizing: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ip = 1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None

    # -- runtime resolution (also the create-time admission check) -------------------------

    def resolve_runtime(self, namespace: str, trainjob: dict[str, Any]) -> dict[str, Any]:
        """The runtime a TrainJob refers to; 422 (webhook style) when it does not exist."""
        ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
        name = ref.get("name", "")
        kind = ref.get("kind") or "ClusterTrainingRuntime"
        if kind == "TrainingRuntime":
            rt = self.store.try_get(TRAINING_RUNTIMES, namespace, name)
        else:
            rt = self.store.try_get(TRAINING_RUNTIMES, namespace, name)
            rt = rt or self.store.try_get(CLUSTER_TRAINING_RUNTIMES, None, name)
        if rt is None:
            lower = kind[0].lower() + kind[1:]
            raise invalid(
                "TrainJob",
                "trainer.kubeflow.org",
                trainjob.get("metadata", {}).get("name", ""),
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "spec.runtimeRef",
                        "message": (
                            f'Invalid value: "{name}": {kind}.trainer.kubeflow.org "{name}" '
                            f"not found: specified {lower} must be created before the "
                            "TrainJob is created"
                        ),
                    }
                ],
            )
        return rt

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.faults.set_pod_failer(self._fail_pod_threadsafe)
        self._main = loop.create_task(self._run())

    async def shutdown(self) -> None:
        """Stop reacting and kill every pod process."""
        if self._main:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        tasks = list(self._pod_tasks.values()) + list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sb in self.sandboxes.values():
            processes.kill_all(sb)
        self.faults.set_pod_failer(None)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        _initial, _, sub = self.store.subscribe(None, self.store.resource_version, loop)
        try:
            for tj in self.store.list(TRAINJOBS)[0]:
                self._reconcile_safe(tj["metadata"]["namespace"], tj["metadata"]["name"])
            while True:
                sub.wakeup.clear()
                events = sub.drain()
                if not events:
                    await sub.wakeup.wait()
                    continue
                for ev in events:
                    self._handle(ev)
        finally:
            self.store.unsubscribe(sub)

    def _handle(self, ev: Event) -> None:
        meta = ev.obj.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if ev.kind_key == TRAINJOBS.key:
            if ev.type == "DELETED":
                self._cascade(meta.get("uid", ""))
            else:
                self._reconcile_safe(ns, name)
        elif ev.kind_key == PODS.key:
            key = (ns, name)
            owner = self._pod_owner.get(key)
            if ev.type == "DELETED":
                self._forget_pod(key)
            elif meta.get("deletionTimestamp") and key not in self._finalizing:
                self._finalizing.add(key)
                self._spawn(self._finalize_pod(key, meta.get("deletionGracePeriodSeconds")))
            st = self._jobs.get(owner or "")
            if st is not None:
                self._reconcile_safe(st.namespace, st.name)

    def _reconcile_safe(self, ns: str, name: str) -> None:
        try:
            self.reconcile(ns, name)
        except ApiError as exc:
            log.debug("reconcile %s/%s: %s", ns, name, exc)
        except Exception:  # keep the controller alive
            log.exception("reconcile %s/%s failed", ns, name)

    # -- reconcile -------------------------------------------------------------------------

    def reconcile(self, ns: str, name: str) -> None:
        tj = self.store.try_get(TRAINJOBS, ns, name)
        if tj is None or tj["metadata"].get("deletionTimestamp"):
            return
        uid = tj["metadata"]["uid"]
        st = self._jobs.get(uid)
        if st is None:
            try:
                runtime = self.resolve_runtime(ns, tj)
            except ApiError:
                return
            st = JobState(ns, name, uid, runtime)
            st.jobset_spec = build_jobset_spec(runtime, tj)
            self._jobs[uid] = st
        if st.finished:
            return
        suspend = bool((tj.get("spec") or {}).get("suspend"))
        self._ensure_jobset(tj, st, suspend)
        if suspend:
            self._delete_pods(st)
            st.was_suspended = True
            st.started_at = None
        else:
            if st.started_at is None:
                st.started_at = time.monotonic()
                deadline = (tj.get("spec") or {}).get("activeDeadlineSeconds")
                if deadline:
                    self._spawn(self._deadline(st, float(deadline)))
            self._create_missing_pods(st)
        self._update_status(tj, st, suspend)

    def _ensure_jobset(self, tj: dict[str, Any], st: JobState, suspend: bool) -> None:
        js = self.store.try_get(JOBSETS, st.namespace, st.name)
        if js is not None and js["metadata"].get("labels", {}).get(
            "trainer.kubeflow.org/trainjob-uid"
        ) not in (None, st.uid):
            js = None  # a leftover from an earlier TrainJob of the same name: replace it
            with contextlib.suppress(ApiError):
                self.store.remove(JOBSETS, st.namespace, st.name)
        if js is None:
            labels = dict(
                (((st.runtime.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
                    "labels"
                )
                or {}
            )
            labels["trainer.kubeflow.org/trainjob-name"] = st.name
            labels["trainer.kubeflow.org/trainjob-uid"] = st.uid
            body = {
                "metadata": {
                    "name": st.name,
                    "namespace": st.namespace,
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": TRAINJOBS.api_version,
                            "kind": "TrainJob",
                            "name": st.name,
                            "uid": st.uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {**st.jobset_spec, "suspend": suspend},
                "status": {},
            }
            self.store.create(JOBSETS, body, st.namespace)
        elif bool(js["spec"].get("suspend")) != suspend:

            def set_suspend(o: dict[str, Any]) -> None:
                o["spec"]["suspend"] = suspend

            self.store.mutate(JOBSETS, st.namespace, st.name, set_suspend)

    def _rjobs(self, st: JobState) -> list[dict[str, Any]]:
        return list(st.jobset_spec.get("replicatedJobs") or [])

    def _pod(self, st: JobState, slot: PodSlot) -> dict[str, Any] | None:
        name = st.pods.get(slot)
        return self.store.try_get(PODS, st.namespace, name) if name else None

    def _depends_met(self, st: JobState, rjob: dict[str, Any]) -> bool:
        all_slots = slots(st.jobset_spec)
        for dep in rjob.get("dependsOn") or []:
            for slot in all_slots.get(dep.get("name"), []):
                pod = self._pod(st, slot)
                if pod is None:
                    return False
                phase = (pod.get("status") or {}).get("phase")
                if dep.get("status") == "Complete":
                    if phase != "Succeeded":
                        return False
                elif not (phase == "Running" and _pod_ready(pod)) and phase != "Succeeded":
                    return False
        return True

    def _create_missing_pods(self, st: JobState) -> None:
        js = self.store.try_get(JOBSETS, st.namespace, st.name)
        if js is None:
            return
        all_slots = slots(st.jobset_spec)
        created = False
        for rjob in self._rjobs(st):
            rname = rjob["name"]
            if rname not in st.started_rjobs and not self._depends_met(st, rjob):
                continue
            st.started_rjobs.add(rname)
            for slot in all_slots[rname]:
                if slot in st.pods:
                    continue
                job_uid = st.job_uids.setdefault((rname, slot.job_index), str(uuid.uuid4()))
                body = build_pod(
                    js,
                    rjob,
                    slot,
                    job_uid=job_uid,
                    ancestor_on_pods=self.ancestor_label_on_pods,
                )
                pod = self.store.create(PODS, body, st.namespace)
                key = (st.namespace, pod["metadata"]["name"])
                st.pods[slot] = key[1]
                self._pod_owner[key] = st.uid
                self._start_pod(st, rjob, pod)
                created = True
        if created and st.hostfile is not None:
            self._write_hostfile(st)

    # -- pods ------------------------------------------------------------------------------

    def _mpi_hosts(self, st: JobState) -> list[PodSlot]:
        mpi = mpi_policy(st.runtime) or {}
        all_slots = slots(st.jobset_spec)
        hosts: list[PodSlot] = []
        if mpi.get("runLauncherAsNode"):
            hosts += all_slots.get("launcher", [])
        hosts += all_slots.get("node", [])
        return hosts

    def _write_hostfile(self, st: JobState) -> None:
        assert st.hostfile is not None
        hosts = self._mpi_hosts(st)
        names = [s.hostname(st.name) for s in hosts]
        dirs: dict[str, Path] = {}
        envs: dict[str, dict[str, str]] = {}
        for slot in hosts:
            pod_name = st.pods.get(slot)
            sb = self.sandboxes.get((st.namespace, pod_name or ""))
            if sb is not None:
                dirs[sb.hostname] = sb.workdir
                envs[sb.hostname] = {
                    k: v for k, v in sb.env.items() if k not in ("PATH", "HOME", "HOSTNAME")
                }
        processes.write_hostfile(st.hostfile, names, dirs, envs)

    def _start_pod(self, st: JobState, rjob: dict[str, Any], pod: dict[str, Any]) -> None:
        ns, name = st.namespace, pod["metadata"]["name"]
        container = next(
            (c for c in pod["spec"].get("containers") or [] if c.get("name") == TRAINER_CONTAINER),
            (pod["spec"].get("containers") or [{}])[0],
        )
        if mpi_policy(st.runtime) is not None and st.hostfile is None:
            st.hostfile = (
                self.root / "namespaces" / ns / "trainjobs" / f"{st.name}-{st.uid[:8]}" / "hostfile"
            )
        sandbox = processes.make_sandbox(
            self.root, ns, name, pod["spec"]["hostname"], env_dict(container), st.hostfile
        )
        self.sandboxes[(ns, name)] = sandbox
        argv = container_argv(container)
        self._pod_tasks[(ns, name)] = asyncio.ensure_future(
            self._pod_lifecycle(ns, name, sandbox, argv, is_trainer_rjob(rjob))
        )

    def _patch_status(self, ns: str, name: str, fn: Any) -> dict[str, Any] | None:
        try:
            return self.store.mutate(PODS, ns, name, fn)
        except ApiError:
            return None

    async def _pod_lifecycle(
        self,
        ns: str,
        name: str,
        sandbox: processes.PodSandbox,
        argv: list[str] | None,
        is_trainer: bool,
    ) -> None:
        await asyncio.sleep(self.pending_delay)
        cname = self._container_name(ns, name)

        def scheduled(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = NODE_NAME
            s = p["status"]
            s["hostIP"] = "127.0.0.1"
            s["hostIPs"] = [{"ip": "127.0.0.1"}]
            s["conditions"] = [
                _cond("PodReadyToStartContainers", "False", "", ""),
                _cond("Initialized", "True", "", ""),
                _cond(
                    "Ready",
                    "False",
                    "ContainersNotReady",
                    f"containers with unready status: [{cname}]",
                ),
                _cond(
                    "ContainersReady",
                    "False",
                    "ContainersNotReady",
                    f"containers with unready status: [{cname}]",
                ),
                _cond("PodScheduled", "True", "", ""),
            ]
            for c in s["conditions"]:
                if not c["reason"]:
                    del c["reason"], c["message"]
            s["containerStatuses"] = [_waiting(p, cname, "ContainerCreating", "")]
            s["startTime"] = now_rfc3339()

        if self._patch_status(ns, name, scheduled) is None:
            return
        shown: str | None = None
        while (hold := self.faults.pod_hold(name)) is not None:
            if shown != hold.reason:
                shown = hold.reason

                def waiting(p: dict[str, Any], h: Any = hold) -> None:
                    p["status"]["containerStatuses"] = [_waiting(p, cname, h.reason, h.message)]

                self._patch_status(ns, name, waiting)
            await asyncio.sleep(0.05)
        await asyncio.sleep(self.start_delay + self.faults.pod_delay(name))
        started = now_rfc3339()
        self._ip += 1
        ip = f"10.244.{(self._ip >> 8) & 255}.{self._ip & 255}"

        def running(p: dict[str, Any]) -> None:
            s = p["status"]
            s["phase"] = "Running"
            s["podIP"] = ip
            s["podIPs"] = [{"ip": ip}]
            for c in s.get("conditions") or []:
                c.update({"status": "True", "lastTransitionTime": started})
                c.pop("reason", None)
                c.pop("message", None)
            s["containerStatuses"] = [
                {
                    "name": cname,
                    "image": image_ref(_image(p, cname)),
                    "imageID": image_id(_image(p, cname)),
                    "containerID": f"containerd://{uuid.uuid4().hex}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                    "lastState": {},
                }
            ]

        if self._patch_status(ns, name, running) is None:
            return
        if argv is None or os.path.basename(argv[0]) == "sshd":
            if argv is not None:
                with open(sandbox.log_path, "a") as fh:
                    fh.write(SSHD_LOG)
            else:
                sandbox.log_path.touch()
            await asyncio.Event().wait()  # a daemon: Running until deleted
            return
        code = await processes.run_container(sandbox, argv)
        self._terminate_pod(ns, name, code, "Completed" if code == 0 else "Error")

    def _container_name(self, ns: str, name: str) -> str:
        pod = self.store.try_get(PODS, ns, name) or {}
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        return TRAINER_CONTAINER if TRAINER_CONTAINER in names else (names or ["node"])[0]

    def _terminate_pod(self, ns: str, name: str, code: int, reason: str) -> None:
        finished = now_rfc3339()
        cname = self._container_name(ns, name)

        def terminated(p: dict[str, Any]) -> None:
            s = p["status"]
            s["phase"] = "Succeeded" if code == 0 else "Failed"
            for c in s.get("conditions") or []:
                if c["type"] in ("Ready", "ContainersReady"):
                    c.update(
                        status="False",
                        reason="PodCompleted" if code == 0 else "PodFailed",
                        lastTransitionTime=finished,
                    )
                    c.pop("message", None)
            old = (s.get("containerStatuses") or [{}])[0]
            started = ((old.get("state") or {}).get("running") or {}).get("startedAt", finished)
            s["containerStatuses"] = [
                {
                    **old,
                    "name": cname,
                    "ready": False,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason,
                            "startedAt": started,
                            "finishedAt": finished,
                            "containerID": old.get("containerID", ""),
                        }
                    },
                }
            ]

        self._patch_status(ns, name, terminated)

    def _fail_pod_threadsafe(self, ns: str, name: str, code: int, reason: str) -> None:
        if self._loop is None:
            raise RuntimeError("the local cluster is not running")
        fut = asyncio.run_coroutine_threadsafe(self._fail_pod(ns, name, code, reason), self._loop)
        fut.result(timeout=10)

    async def _fail_pod(self, ns: str, name: str, code: int, reason: str) -> None:
        self.store.get(PODS, ns, name)
        task = self._pod_tasks.pop((ns, name), None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        sb = self.sandboxes.get((ns, name))
        if sb is not None:
            processes.kill_all(sb)
        self._terminate_pod(ns, name, code or 1, reason)

    async def _finalize_pod(self, key: tuple[str, str], grace: Any) -> None:
        task = self._pod_tasks.pop(key, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        sb = self.sandboxes.get(key)
        if sb is not None:
            processes.kill_all(sb)
        delay = self.delete_grace if grace is None or int(grace) > 0 else 0.0
        await asyncio.sleep(delay)
        with contextlib.suppress(ApiError):
            self.store.remove(PODS, key[0], key[1])

    def _forget_pod(self, key: tuple[str, str]) -> None:
        task = self._pod_tasks.pop(key, None)
        if task is not None:
            task.cancel()
        sb = self.sandboxes.pop(key, None)
        if sb is not None:
            processes.kill_all(sb)
        self._finalizing.discard(key)
        owner = self._pod_owner.pop(key, None)
        st = self._jobs.get(owner or "")
        if st is not None:
            for slot, pod_name in list(st.pods.items()):
                if pod_name == key[1]:
                    del st.pods[slot]

    def _delete_pods(self, st: JobState, only_active: bool = False) -> None:
        for slot, pod_name in list(st.pods.items()):
            pod = self.store.try_get(PODS, st.namespace, pod_name)
            if pod is None:
                st.pods.pop(slot, None)
                continue
            phase = (pod.get("status") or {}).get("phase")
            if only_active and phase in ("Succeeded", "Failed"):
                continue
            with contextlib.suppress(ApiError):
                self.store.mark_deleting(PODS, st.namespace, pod_name, 30)

    def _cascade(self, uid: str) -> None:
        """The TrainJob is gone: its JobSet goes now, its pods after the grace delay."""
        st = self._jobs.pop(uid, None)
        if st is None:
            return
        st.finished = True
        js = self.store.try_get(JOBSETS, st.namespace, st.name)
        if (
            js is not None
            and js["metadata"].get("labels", {}).get("trainer.kubeflow.org/trainjob-uid") == uid
        ):
            with contextlib.suppress(ApiError):
                self.store.mark_deleting(JOBSETS, st.namespace, st.name, 0)
                self.store.remove(JOBSETS, st.namespace, st.name)
        self._delete_pods(st)
        # keep the owner mapping so DELETED events of the pods find nothing to recreate

    async def _deadline(self, st: JobState, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if st.finished or self._jobs.get(st.uid) is not st or st.started_at is None:
            return
        tj = self.store.try_get(TRAINJOBS, st.namespace, st.name)
        if tj is None:
            return
        st.finished = True
        self._delete_pods(st, only_active=True)

        def fail(o: dict[str, Any]) -> None:
            set_condition(
                o.setdefault("status", {}),
                _cond(
                    "Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline"
                ),
            )

        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, st.namespace, st.name, fail)

    # -- status ----------------------------------------------------------------------------

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
                        and (_pod_ready(p) or p["status"].get("phase") == "Succeeded")
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
            conds_tj.append(_cond("Suspended", "True", "Suspended", "TrainJob is suspended"))
            conds_js.append(_cond("Suspended", "True", "SuspendedJobs", "jobset is suspended"))
        elif st.was_suspended:
            conds_tj.append(_cond("Suspended", "False", "Resumed", "TrainJob is resumed"))
            conds_js.append(_cond("Suspended", "False", "ResumeJobs", "jobset is resumed"))
        if not suspend and any_failed:
            msg = "jobset failed due to one or more job failures"
            conds_tj.append(_cond("Failed", "True", "FailedJobs", msg))
            conds_js.append(_cond("Failed", "True", "FailedJobs", msg))
            st.finished = True
        elif not suspend and complete:
            msg = "jobset completed successfully"
            conds_tj.append(_cond("Complete", "True", "AllJobsCompleted", msg))
            conds_js.append(_cond("Completed", "True", "AllJobsCompleted", msg))
            st.finished = True
        if st.finished:
            self._delete_pods(st, only_active=True)

        def apply(o: dict[str, Any], conds: list[dict[str, Any]], key: str) -> None:
            status = o.setdefault("status", {})
            for c in conds:
                set_condition(status, c)
            status[key] = jobs_status
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

    # -- queries used by the server --------------------------------------------------------

    def sandbox(self, ns: str, name: str) -> processes.PodSandbox | None:
        return self.sandboxes.get((ns, name))

    def job_of_pod(self, pod: dict[str, Any]) -> str | None:
        return (pod.get("metadata", {}).get("labels") or {}).get(JOBSET_NAME)


def _pod_ready(pod: dict[str, Any]) -> bool:
    css = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(css) and all(cs.get("ready") for cs in css)


def _image(pod: dict[str, Any], cname: str) -> str:
    for c in pod["spec"].get("containers") or []:
        if c.get("name") == cname:
            return c.get("image", "")
    return ""


def image_ref(image: str) -> str:
    """The fully qualified reference containerd reports in containerStatuses[].image:
    `busybox` -> `docker.io/library/busybox:latest`."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = "" if digest or ":" in last else ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    return name + tag + (f"@{digest}" if digest else "")


def image_id(image: str) -> str:
    """containerStatuses[].imageID: `<repository>@sha256:<digest>` (a stand-in digest)."""
    ref = image_ref(image).split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    repo = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _waiting(pod: dict[str, Any], cname: str, reason: str, message: str) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {
        "name": cname,
        "image": _image(pod, cname),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": state},
        "lastState": {},
    }
