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
from ..kubelet import mount_namespace, processes
from ..kubelet.container_status import container_image, image_id, image_ref, waiting_status
from ..kubelet.image_pull import ImageService
from ..kubelet.node import NodeResources
from ..kubelet.pod_env import ContainerConfigError, container_env, expand, uses_references
from ..kubelet.volumes import (
    PodIdentity,
    PodVolumes,
    VolumeError,
    is_token_mount,
    needs_mount_namespace,
)
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
VOLUME_RETRY = 2.0  # seconds between a failed mount or env lookup and the next try, at most
# what the pod's processes get from the kubelet sandbox and never from the pod's env
_SANDBOX_ENV = frozenset({"HOSTNAME", "HOME", "PATH", "POD_NAME", "POD_NAMESPACE"})


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
    node: NodeResources
    identity: PodIdentity | None
    _volume_wake: asyncio.Event | None
    _pod_tokens: dict[tuple[str, str], str]
    _releases: set[asyncio.Task[None]]
    _pod_volumes: dict[tuple[str, str], PodVolumes]

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
        enter: dict[str, list[str]] = {}
        for slot in hosts:
            pod_name = st.pods.get(slot)
            sb = self.sandboxes.get((st.namespace, pod_name or ""))
            if sb is not None:
                dirs[sb.hostname] = sb.workdir
                envs[sb.hostname] = {
                    k: v for k, v in sb.env.items() if k not in ("PATH", "HOME", "HOSTNAME")
                }
                # as root only: a process in one pod's user namespace cannot enter another's
                if sb.mount_ns is not None and sb.mount_ns.mode == "root":
                    enter[sb.hostname] = sb.mount_ns.enter_argv([])
        processes.write_hostfile(st.hostfile, names, dirs, envs, enter)

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
        # The kubelet mounts the pod's volumes before it starts containers (syncPod:
        # WaitForAttachAndMount), then pulls the image and builds the container's config.
        if not await self._mount_volumes(ns, name, cname, sandbox):
            return
        if not await self._ensure_image(ns, name, cname):
            return
        if not await self._resolve_env(ns, name, cname, sandbox):
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
        # the kubelet expands $(NAME) of the container's env and "$$" -> "$" in command and
        # args (kubecontainer.ExpandContainerCommandAndArgs); the sandbox's own names are not env
        spec_env = {
            k: v
            for k, v in sandbox.env.items()
            if k not in _SANDBOX_ENV and k != "TMPDIR" and not k.startswith("TRAINJOB_LOCAL")
        }
        argv = [expand(arg, spec_env) for arg in argv]
        code = await processes.run_container(sandbox, argv)
        self._terminate_pod(ns, name, code, "Completed" if code == 0 else "Error")

    def volume_changed(self) -> None:
        """An object a pod may wait for changed: the kubelet's waits look again now."""
        if self._volume_wake is not None:
            self._volume_wake.set()

    async def _wait_retry(self) -> None:
        if self._volume_wake is None:
            self._volume_wake = asyncio.Event()
        wake = self._volume_wake
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), VOLUME_RETRY)
        wake.clear()

    def _live_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        pod = self.store.try_get(PODS, ns, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return None
        return pod

    async def _mount_volumes(
        self, ns: str, name: str, cname: str, sandbox: processes.PodSandbox
    ) -> bool:
        """Set up the pod's volumes and, for a pod that mounts any, its mount namespace
        (False: the pod went away). A volume that cannot be set up records the kubelet's
        Warning ``FailedMount`` (pkg/volume/util/operationexecutor/operation_generator.go,
        ``MountVolume.SetUp failed for volume "v" : <err>``, aggregated) and is tried again;
        the container keeps waiting in ``ContainerCreating``."""
        while True:
            pod = self._live_pod(ns, name)
            if pod is None:
                return False
            spec = pod.get("spec") or {}
            container = next(
                (c for c in spec.get("containers") or [] if c.get("name") == cname), {}
            )
            if not spec.get("volumes") or not needs_mount_namespace(pod, container):
                return True
            state = sandbox.workdir.parent / f".{name}.kubelet"
            # the pod's volumes (its service-account token among them) for this user only
            state.mkdir(mode=0o700, exist_ok=True)
            volumes = PodVolumes(
                self.store,
                pod,
                state,
                self.identity,
                self.node.memory,
            )
            try:
                mounts = volumes.set_up(container)
                if volumes.token is not None:
                    self._pod_tokens[(ns, name)] = volumes.token
                    if self.identity is not None and self.identity.address:
                        host, _, port = self.identity.address().rpartition(":")
                        sandbox.env["KUBERNETES_SERVICE_HOST"] = host
                        sandbox.env["KUBERNETES_SERVICE_PORT"] = port
                sandbox.mount_ns = await mount_namespace.create(
                    mounts, state, sandbox.workdir, str(container.get("workingDir") or "")
                )
                self._pod_volumes[(ns, name)] = volumes
                owner = self._jobs.get(self._pod_owner.get((ns, name), ""))
                if owner is not None and owner.hostfile is not None:
                    self._write_hostfile(owner)  # MPI ranks started in this pod join it
                return True
            except VolumeError as exc:
                message = str(exc)
            except mount_namespace.MountNamespaceError as exc:
                mounts_asked = [
                    m for m in container.get("volumeMounts") or [] if not is_token_mount(pod, m)
                ]
                if not mounts_asked:
                    # only the token of a named service account: run as pods without
                    # volumes do (no token file at the well-known path) rather than not at all
                    token = self._pod_tokens.pop((ns, name), None)
                    if token is not None and self.identity is not None:
                        self.identity.revoke_token(token)
                    sandbox.env.pop("KUBERNETES_SERVICE_HOST", None)
                    sandbox.env.pop("KUBERNETES_SERVICE_PORT", None)
                    return True
                first = mounts_asked[0].get("name", "")
                message = f'MountVolume.SetUp failed for volume "{first}" : {exc}'
            # a token written for this try is refused again (the next try writes a new one)
            token = self._pod_tokens.pop((ns, name), None) or volumes.token
            if token is not None and self.identity is not None:
                self.identity.revoke_token(token)
            pod = self._live_pod(ns, name)
            if pod is None:
                return False
            with contextlib.suppress(ApiError):
                record_event(
                    self.store,
                    pod,
                    reason="FailedMount",
                    message=message,
                    type="Warning",
                    component="kubelet",
                )
            await self._wait_retry()

    async def _resolve_env(
        self, ns: str, name: str, cname: str, sandbox: processes.PodSandbox
    ) -> bool:
        """The container's env from ConfigMaps and Secrets (False: the pod went away). A
        reference that cannot be resolved leaves the container waiting with
        ``CreateContainerConfigError`` and the message, plus the Warning ``Failed``
        ``Error: <message>`` (kuberuntime_container.go startContainer), until it can."""
        shown = ""
        while True:
            pod = self._live_pod(ns, name)
            if pod is None:
                return False
            container = next(
                (c for c in pod["spec"].get("containers") or [] if c.get("name") == cname), {}
            )
            if not uses_references(container):
                return True
            try:
                env = container_env(self.store, pod, container)
            except ContainerConfigError as exc:
                message = str(exc)
            else:
                sandbox.env.update({k: v for k, v in env.items() if k not in _SANDBOX_ENV})
                return True
            if message != shown:
                shown = message

                def waiting(p: dict[str, Any], m: str = message) -> None:
                    p["status"]["containerStatuses"] = [
                        waiting_status(p, cname, "CreateContainerConfigError", m)
                    ]

                if self._patch_status(ns, name, waiting) is None:
                    return False
            with contextlib.suppress(ApiError):
                record_event(
                    self.store,
                    pod,
                    reason="Failed",
                    message=f"Error: {message}",
                    type="Warning",
                    component="kubelet",
                )
            await self._wait_retry()

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
            await self._release_mounts(key, sb)

    def refresh_volumes(self, kind_key: str, namespace: str, name: str) -> None:
        """A ConfigMap or Secret changed: the volumes of running pods that show it are written
        again (the kubelet syncs them about once a minute; ``subPath`` mounts and env stay)."""
        kind = "configmap" if kind_key == "configmaps" else "secret"
        for (ns, _pod), volumes in list(self._pod_volumes.items()):
            if ns == namespace:
                volumes.refresh(kind, name)

    async def _release_mounts(self, key: tuple[str, str], sb: processes.PodSandbox) -> None:
        """The pod's mount namespace ends with its processes; its token is refused from now."""
        self._pod_volumes.pop(key, None)
        ns = sb.mount_ns
        sb.mount_ns = None
        if ns is not None:
            await ns.close()
        token = self._pod_tokens.pop(key, None)
        if token is not None and self.identity is not None:
            self.identity.revoke_token(token)

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
            if sb.mount_ns is not None or key in self._pod_tokens:
                task = asyncio.ensure_future(self._release_mounts(key, sb))
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)
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
