"""The pod half of the controller: start a pod's process (through the kubelet), walk its
phases, fail and finalize it, and write the MPI hostfile."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

from ..core.apierror import ApiError
from ..core.events import record_event
from ..core.faults import Faults
from ..core.resources import PODS
from ..core.status_conditions import condition
from ..core.store import Store, now_rfc3339
from ..kubelet import processes
from ..kubelet.container_status import container_image, image_id, image_ref, waiting_status
from ..kubelet.image_pull import ImageService
from ..runtimes.loader import is_trainer_rjob
from .job_state import JobState
from .podspec import (
    TRAINER_CONTAINER,
    PodSlot,
    container_argv,
    env_dict,
    mpi_policy,
    slots,
)
from .scheduler import Scheduler

SSHD_LOG = "Server listening on 0.0.0.0 port 2222.\nServer listening on :: port 2222.\n"


class PodLifecycle:
    """Pod methods of the Controller (a mixin; the Controller sets these attributes)."""

    store: Store
    root: Path
    faults: Faults
    pending_delay: float
    start_delay: float
    delete_grace: float
    sandboxes: dict[tuple[str, str], processes.PodSandbox]
    _jobs: dict[str, JobState]
    _pod_owner: dict[tuple[str, str], str]
    _pod_tasks: dict[tuple[str, str], asyncio.Task[None]]
    _finalizing: set[tuple[str, str]]
    _ip: int
    _loop: asyncio.AbstractEventLoop | None
    scheduler: Scheduler
    images: ImageService

    def _rjobs(self, st: JobState) -> list[dict[str, Any]]:
        return list(st.jobset_spec.get("replicatedJobs") or [])

    def _pod(self, st: JobState, slot: PodSlot) -> dict[str, Any] | None:
        name = st.pods.get(slot)
        return self.store.try_get(PODS, st.namespace, name) if name else None

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
        # kube-scheduler: Pending (PodScheduled=False when it does not fit) until bound.
        if not await self.scheduler.schedule(ns, name):
            return
        cname = self._container_name(ns, name)

        def accepted(p: dict[str, Any]) -> None:
            """The kubelet admits the bound pod: sandbox, conditions, ContainerCreating."""
            s = p["status"]
            s["hostIP"] = "127.0.0.1"
            s["hostIPs"] = [{"ip": "127.0.0.1"}]
            scheduled_cond = next(
                (c for c in s.get("conditions") or [] if c.get("type") == "PodScheduled"),
                condition("PodScheduled", "True", "", ""),
            )
            s["conditions"] = [
                condition("PodReadyToStartContainers", "True", "", ""),
                condition("Initialized", "True", "", ""),
                condition(
                    "Ready",
                    "False",
                    "ContainersNotReady",
                    f"containers with unready status: [{cname}]",
                ),
                condition(
                    "ContainersReady",
                    "False",
                    "ContainersNotReady",
                    f"containers with unready status: [{cname}]",
                ),
                scheduled_cond,
            ]
            for c in s["conditions"]:
                if not c.get("reason"):
                    c.pop("reason", None)
                    c.pop("message", None)
            s["containerStatuses"] = [waiting_status(p, cname, "ContainerCreating", "")]
            s["startTime"] = now_rfc3339()

        if self._patch_status(ns, name, accepted) is None:
            return
        if not await self._ensure_image(ns, name, cname):
            return
        shown: str | None = None
        while (hold := self.faults.pod_hold(name)) is not None:
            if shown != hold.reason:
                shown = hold.reason

                def waiting(p: dict[str, Any], h: Any = hold) -> None:
                    p["status"]["containerStatuses"] = [
                        waiting_status(p, cname, h.reason, h.message)
                    ]

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
                if c.get("status") != "True":
                    c.update({"status": "True", "lastTransitionTime": started})
                c.pop("reason", None)
                c.pop("message", None)
            s["containerStatuses"] = [
                {
                    "name": cname,
                    "image": image_ref(container_image(p, cname)),
                    "imageID": image_id(container_image(p, cname)),
                    "containerID": f"containerd://{uuid.uuid4().hex}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                    "lastState": {},
                }
            ]

        pod_now = self._patch_status(ns, name, running)
        if pod_now is None:
            return
        # kuberuntime_container.go startContainer (1.32 wording)
        self._kubelet_event(pod_now, "Created", f"Created container {cname}")
        self._kubelet_event(pod_now, "Started", f"Started container {cname}")
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

    async def _ensure_image(self, ns: str, name: str, cname: str) -> bool:
        """The kubelet's image step, re-synced until the image is there (False: pod gone).

        The container waits with ``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``
        or ``ErrImageNeverPull`` meanwhile (kubelet/image_pull.py)."""
        shown: tuple[str, str] | None = None
        while True:
            pod = self.store.try_get(PODS, ns, name)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return False
            container = next(
                (c for c in pod["spec"].get("containers") or [] if c.get("name") == cname), {}
            )
            outcome = self.images.ensure(pod, container)
            if outcome.ok:
                return True
            if shown != (outcome.reason, outcome.message):
                shown = (outcome.reason, outcome.message)

                def waiting(p: dict[str, Any], o: Any = outcome) -> None:
                    p["status"]["containerStatuses"] = [
                        waiting_status(p, cname, o.reason, o.message)
                    ]

                if self._patch_status(ns, name, waiting) is None:
                    return False
            await asyncio.sleep(outcome.retry_after)

    def _kubelet_event(self, pod: dict[str, Any], reason: str, message: str) -> None:
        with contextlib.suppress(ApiError):
            record_event(self.store, pod, reason=reason, message=message, component="kubelet")

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

    def _fail_pod_threadsafe(
        self, ns: str, name: str, code: int, reason: str, message: str = ""
    ) -> None:
        if self._loop is None:
            raise RuntimeError("the local cluster is not running")
        fut = asyncio.run_coroutine_threadsafe(
            self._fail_pod(ns, name, code, reason, message), self._loop
        )
        fut.result(timeout=10)

    async def _stop_pod(self, key: tuple[str, str]) -> None:
        """Cancel the pod's lifecycle task (and wait for it), then kill all its processes."""
        task = self._pod_tasks.pop(key, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        sb = self.sandboxes.get(key)
        if sb is not None:
            processes.kill_all(sb)

    async def _fail_pod(
        self, ns: str, name: str, code: int, reason: str, message: str = ""
    ) -> None:
        self.store.get(PODS, ns, name)
        if reason == "Evicted" and message:
            self._kubelet_evicted(ns, name, message)
        await self._stop_pod((ns, name))
        self._terminate_pod(ns, name, code or 1, reason)

    def _kubelet_evicted(self, ns: str, name: str, message: str) -> None:
        """The kubelet's node-pressure eviction (pkg/kubelet/eviction/eviction_manager.go
        evictPod): a Warning ``Evicted`` Event, the ``DisruptionTarget`` condition
        (``TerminationByKubelet``), then phase Failed with reason ``Evicted`` and the message."""

        def evicted(p: dict[str, Any]) -> None:
            s = p.setdefault("status", {})
            conds = s.setdefault("conditions", [])
            conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
            conds.append(condition("DisruptionTarget", "True", "TerminationByKubelet", message))
            s["reason"] = "Evicted"
            s["message"] = message

        pod = self._patch_status(ns, name, evicted)
        if pod is not None:
            with contextlib.suppress(ApiError):
                record_event(
                    self.store,
                    pod,
                    reason="Evicted",
                    message=message,
                    type="Warning",
                    component="kubelet",
                )

    async def _finalize_pod(self, key: tuple[str, str], grace: Any) -> None:
        pod = self.store.try_get(PODS, key[0], key[1])
        if pod is not None and key in self.sandboxes:
            # kuberuntime_container.go killContainer: "Stopping container <name>"
            cname = self._container_name(key[0], key[1])
            self._kubelet_event(pod, "Killing", f"Stopping container {cname}")
        await self._stop_pod(key)
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
