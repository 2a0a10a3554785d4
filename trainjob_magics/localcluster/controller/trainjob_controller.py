"""TrainJob -> JobSet -> pods: phases with delays, MPI launcher after nodes, suspend, cascade.

Runs on the cluster's event loop and reacts to store events, so a change made by anyone
(API request, test helper, a Kueue simulation) is reconciled the same way.

Follows kubeflow/trainer pkg/controller/trainjob_controller.go Reconcile of the Trainer version
it imitates (``controller/versions.py``): the JobSet is (re)built from the runtime and the
TrainJob while either is suspended, and left alone once both run
(pkg/runtime/framework/plugins/jobset/jobset.go Build); a failed build records a Warning Event
``TrainJobResourcesCreationFailed``. From v2.3 the runtime comes from the TrainJob's runtime
snapshot ConfigMap, created from the live runtime on first reconcile
(pkg/runtime/core/snapshot.go), and a TrainJob managed by another controller (``spec.managedBy``)
is skipped (pkg/util/trainjob IsManagedByExternalController).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from ..core.apierror import ApiError, invalid
from ..core.events import record_event
from ..core.faults import Faults
from ..core.garbage import GarbageCollector
from ..core.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    JOBSETS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from ..core.status_conditions import condition, set_condition
from ..core.store import Event, Store
from ..kubelet import processes
from ..kubelet.container_status import pod_ready
from ..kubelet.image_pull import ImageService
from ..kubelet.node import NodeResources, node_resources
from ..kubelet.volumes import PodIdentity, PodVolumes
from .core_objects import CoreObjects
from .job_state import JobState
from .job_status import JobStatusUpdater
from .pod_admission import JOB_CONTROLLER, PodForbidden, admit_pod, job_reference
from .pod_lifecycle import PodLifecycle
from .podspec import JOBSET_NAME, build_jobset_spec, build_pod, jobset_metadata, slots
from .runtime_snapshot import SnapshotError, read_snapshot, snapshot_configmap, snapshot_name
from .scheduler import Scheduler
from .versions import DEFAULT_TRAINER_VERSION, at_least, check_trainer_version

TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
# Objects pods wait for: their creation (ServiceAccount admission), scheduling (claims) and
# start (the kubelet's volumes and env).
WAITED_ON = frozenset(
    k.key for k in (SERVICE_ACCOUNTS, PERSISTENT_VOLUME_CLAIMS, SECRETS, CONFIGMAPS)
)
EVENT_COMPONENT = "trainer-trainjob-controller"  # pkg/controller/setup.go event recorder


class ReconcileError(Exception):
    """Building the TrainJob's objects failed (NewObjects' error, worded like Trainer's)."""


log = logging.getLogger(__name__)

__all__ = ["Controller"]


class Controller(PodLifecycle, JobStatusUpdater):
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
        node: NodeResources | None = None,
        images: ImageService | None = None,
        trainer_version: str = DEFAULT_TRAINER_VERSION,
        identity: PodIdentity | None = None,
        node_labels: dict[str, str] | None = None,
        node_taints: list[dict[str, str]] | None = None,
    ) -> None:
        self.trainer_version = check_trainer_version(trainer_version)
        self.store = store
        self.node = node or node_resources()
        self.scheduler = Scheduler(store, self.node, node_labels, node_taints)
        self.images = images or ImageService(store)
        self.root = root
        self.faults = faults
        self.pending_delay = pending_delay
        self.start_delay = start_delay
        self.delete_grace = delete_grace
        self.ancestor_label_on_pods = ancestor_label_on_pods
        self.sandboxes: dict[tuple[str, str], processes.PodSandbox] = {}
        self.core = CoreObjects(store, root)
        self.garbage = GarbageCollector(store)
        self.identity = identity
        self._volume_wake: asyncio.Event | None = None
        self._pod_tokens: dict[tuple[str, str], str] = {}
        self._releases: set[asyncio.Task[None]] = set()
        self._pod_volumes: dict[tuple[str, str], PodVolumes] = {}
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
        # Each kind is fetched by its own name only: a TrainingRuntime never stands in for a
        # ClusterTrainingRuntime of the same name (kubeflow/trainer
        # pkg/runtime/core/clustertrainingruntime.go NewObjects: `c.client.Get(ctx,
        # client.ObjectKey{Name: trainJob.Spec.RuntimeRef.Name}, &clusterTrainingRuntime)`).
        if kind == "TrainingRuntime":
            rt = self.store.try_get(TRAINING_RUNTIMES, namespace, name)
        else:
            rt = self.store.try_get(CLUSTER_TRAINING_RUNTIMES, None, name)
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
        self.scheduler.start(loop)
        self._main = loop.create_task(self._run())

    async def shutdown(self) -> None:
        """Stop reacting and kill every pod process."""
        if self._main:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        await self.scheduler.shutdown()
        tasks = list(self._pod_tasks.values()) + list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key, sb in list(self.sandboxes.items()):
            processes.kill_all(sb)
            await self._release_mounts(key, sb)
        # mount namespaces of pods forgotten just before (their holders reaped on this loop)
        await asyncio.gather(*list(self._releases), return_exceptions=True)
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
            self.core.sync_all()
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
        self.core.handle(ev)
        self.garbage.handle(ev)
        if ev.kind_key in WAITED_ON and ev.type != "DELETED":
            # a pod creation or a volume waited for this object (FailedCreate, FailedMount,
            # FailedScheduling): try again, as the informers of those components do
            self._on_dependency(ev.kind_key, ns)
            if ev.kind_key in (CONFIGMAPS.key, SECRETS.key):
                self.refresh_volumes(ev.kind_key, ns, name)
        if ev.kind_key == TRAINJOBS.key:
            if ev.type == "DELETED":
                self._cascade(meta.get("uid", ""))
            else:
                self._reconcile_safe(ns, name)
        elif ev.kind_key == PODS.key:
            key = (ns, name)
            owner = self._pod_owner.get(key)
            self.scheduler.on_pod_event(ev)
            if ev.type == "DELETED":
                # The Job controller counts a deleted pod that had not Succeeded as failed and
                # creates a replacement while status.failed <= backoffLimit (job_controller.go
                # isPodFailed; the default backoffLimit 6 applies, Trainer's runtimes set none):
                # the reconcile below recreates the slot's pod.
                self.images.forget_pod(meta.get("uid", ""))
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
        spec = tj.get("spec") or {}
        if at_least(self.trainer_version, "2.3") and spec.get("managedBy") not in (
            None,
            TRAINJOB_CONTROLLER,
        ):
            return  # e.g. kueue.x-k8s.io/multikueue: its pods run on a worker cluster
        uid = tj["metadata"]["uid"]
        st = self._jobs.get(uid)
        if st is None:
            try:
                runtime = self.runtime_of(tj)
            except (ApiError, ReconcileError) as exc:
                self._reconcile_failed(tj, exc)
                return
            st = JobState(ns, name, uid, runtime)
            st.jobset_spec = build_jobset_spec(runtime, tj, self.trainer_version)
            self._jobs[uid] = st
        if st.finished:
            return
        suspend = bool(spec.get("suspend"))
        jobset_suspended = self._ensure_jobset(tj, st, suspend)
        if jobset_suspended:
            self._delete_pods(st)
        if suspend:
            st.was_suspended = True
            st.started_at = None
        elif not jobset_suspended:
            if st.started_at is None:
                st.started_at = time.monotonic()
                deadline = spec.get("activeDeadlineSeconds")
                if deadline:
                    self._spawn(self._deadline(st, float(deadline)))
            self._create_missing_pods(st)
        self._update_status(tj, st, suspend)

    # -- the runtime a TrainJob is built from ----------------------------------------------

    def runtime_of(self, tj: dict[str, Any]) -> dict[str, Any]:
        """The runtime Trainer builds ``tj``'s JobSet from: from v2.3 its snapshot (created from
        the live runtime when missing: ClusterTrainingRuntime.NewObjects /
        TrainingRuntime.NewObjects, v2.3.0), before v2.3 the live runtime. Raises
        ReconcileError (or ApiError) with Trainer's wording."""
        meta = tj["metadata"]
        if not at_least(self.trainer_version, "2.3"):
            return self._live_runtime(tj)
        ref = (tj.get("spec") or {}).get("runtimeRef") or {}
        what = (
            "unable to get runtime snapshot"
            if ref.get("kind") == "TrainingRuntime"
            else "getting runtime snapshot"
        )
        cm = self.store.try_get(CONFIGMAPS, meta["namespace"], snapshot_name(meta["name"]))
        if cm is not None:
            try:
                return read_snapshot(cm, tj)
            except SnapshotError as exc:
                raise ReconcileError(f"{what}: {exc}") from None
        runtime = self._live_runtime(tj)
        self.store.create(CONFIGMAPS, snapshot_configmap(tj, runtime), meta["namespace"])
        return runtime

    def _live_runtime(self, tj: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.resolve_runtime(tj["metadata"]["namespace"], tj)
        except ApiError:
            ref = (tj.get("spec") or {}).get("runtimeRef") or {}
            name = ref.get("name", "")
            if ref.get("kind") == "TrainingRuntime":
                raise ReconcileError(
                    "TrainingRuntime specified in TrainJob is not found: "
                    f'trainingruntimes.trainer.kubeflow.org "{name}" not found'
                ) from None
            raise ReconcileError(
                "not found ClusterTrainingRuntime specified in TrainJob: "
                f'clustertrainingruntimes.trainer.kubeflow.org "{name}" not found'
            ) from None

    def _reconcile_failed(self, tj: dict[str, Any], exc: Exception) -> None:
        """Trainer's Warning Event for a failed reconcileObjects (message cut at 950 chars)."""
        text = str(exc)
        message = f"TrainJob resources reconciliation failed: {text[:950]}"
        if len(text) > 950:
            message += " ..."
        with contextlib.suppress(ApiError):
            record_event(
                self.store,
                tj,
                reason="TrainJobResourcesCreationFailed",
                message=message,
                type="Warning",
                component=EVENT_COMPONENT,
            )

    def _desired_jobset(
        self, tj: dict[str, Any], st: JobState
    ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]] | None:
        """The JobSet spec, labels and annotations Trainer would apply now; None (after the
        Event) when the runtime cannot be had."""
        try:
            runtime = self.runtime_of(tj)
        except (ApiError, ReconcileError) as exc:
            self._reconcile_failed(tj, exc)
            return None
        st.runtime = runtime
        spec = build_jobset_spec(runtime, tj, self.trainer_version)
        labels, annotations = jobset_metadata(runtime, tj, self.trainer_version)
        labels["trainer.kubeflow.org/trainjob-name"] = st.name
        labels["trainer.kubeflow.org/trainjob-uid"] = st.uid
        return spec, labels, annotations

    def _ensure_jobset(self, tj: dict[str, Any], st: JobState, suspend: bool) -> bool:
        """Create or update the JobSet; return whether it is (still) suspended.

        Trainer rebuilds the JobSet from the runtime and the TrainJob on every reconcile while
        the TrainJob or the JobSet is suspended (so Kueue's patch reaches it before it runs),
        and does not touch a running JobSet (jobset.go Build).
        """
        js = self.store.try_get(JOBSETS, st.namespace, st.name)
        if js is not None and js["metadata"].get("labels", {}).get(
            "trainer.kubeflow.org/trainjob-uid"
        ) not in (None, st.uid):
            js = None  # a leftover from an earlier TrainJob of the same name: replace it
            with contextlib.suppress(ApiError):
                self.store.remove(JOBSETS, st.namespace, st.name)
        js_suspended = bool((js or {}).get("spec", {}).get("suspend"))
        if js is not None and not suspend and not js_suspended:
            return False
        desired = self._desired_jobset(tj, st)
        if desired is None:
            return js is None or js_suspended
        spec, labels, annotations = desired
        st.jobset_spec = spec
        body_spec = {**spec, "suspend": suspend}
        if js is None:
            meta: dict[str, Any] = {
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
            }
            if annotations:
                meta["annotations"] = annotations
            self.store.create(
                JOBSETS, {"metadata": meta, "spec": body_spec, "status": {}}, st.namespace
            )
            return suspend
        old_meta = js["metadata"]
        if (
            js.get("spec") != body_spec
            or {**(old_meta.get("labels") or {}), **labels} != (old_meta.get("labels") or {})
            or {**(old_meta.get("annotations") or {}), **annotations}
            != (old_meta.get("annotations") or {})
        ):

            def update(o: dict[str, Any]) -> None:
                o["spec"] = copy.deepcopy(body_spec)
                o["metadata"].setdefault("labels", {}).update(labels)
                if annotations:
                    o["metadata"].setdefault("annotations", {}).update(annotations)

            self.store.mutate(JOBSETS, st.namespace, st.name, update)
        return suspend

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
                elif not (phase == "Running" and pod_ready(pod)) and phase != "Succeeded":
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
                try:
                    admit_pod(self.store, body)
                except PodForbidden as exc:
                    self._failed_create(st, rname, slot.job_index, job_uid, str(exc))
                    continue
                pod = self.store.create(PODS, body, st.namespace)
                key = (st.namespace, pod["metadata"]["name"])
                st.pods[slot] = key[1]
                self._pod_owner[key] = st.uid
                self._start_pod(st, rjob, pod)
                created = True
        if created and st.hostfile is not None:
            self._write_hostfile(st)

    def _failed_create(
        self, st: JobState, rjob: str, job_index: int, job_uid: str, error: str
    ) -> None:
        """The Job controller's Warning Event when the API server refuses a pod
        (pkg/controller/controller_utils.go CreatePods); the pod is tried again when the
        object it waited for appears (``_on_dependency``)."""
        job = job_reference(st.namespace, f"{st.name}-{rjob}-{job_index}", job_uid)
        with contextlib.suppress(ApiError):
            record_event(
                self.store,
                job,
                reason="FailedCreate",
                message=f"Error creating: {error}",
                type="Warning",
                component=JOB_CONTROLLER,
            )

    def _on_dependency(self, kind_key: str, namespace: str) -> None:
        """An object pods may wait for changed in ``namespace``: a ServiceAccount lets the
        Job controller create the pods it could not, a claim lets the scheduler try again, and
        every kind lets the kubelet look again at the volumes and env it waits for."""
        if kind_key == SERVICE_ACCOUNTS.key:
            for st in list(self._jobs.values()):
                if st.namespace == namespace and not st.finished:
                    self._reconcile_safe(st.namespace, st.name)
        elif kind_key == PERSISTENT_VOLUME_CLAIMS.key:
            self.scheduler.retry_all()
        self.volume_changed()

    def _cascade(self, uid: str) -> None:
        """The TrainJob is gone: its JobSet goes now, its pods after the grace delay."""
        st = self._jobs.pop(uid, None)
        if st is None:
            return
        st.finished = True
        js = self.store.try_get(JOBSETS, st.namespace, st.name)
        refs = (js or {}).get("metadata", {}).get("ownerReferences") or []
        if js is not None and not any(r.get("uid") == uid for r in refs):
            return  # orphaned (propagationPolicy Orphan): the JobSet and its pods stay
        if (
            js is not None
            and js["metadata"].get("labels", {}).get("trainer.kubeflow.org/trainjob-uid") == uid
        ):
            with contextlib.suppress(ApiError):
                self.store.mark_deleting(JOBSETS, st.namespace, st.name, 0)
                self.store.remove(JOBSETS, st.namespace, st.name)
        self._collect_owned(CONFIGMAPS, st.namespace, uid)
        self._delete_pods(st)
        # keep the owner mapping so DELETED events of the pods find nothing to recreate

    def _collect_owned(self, kind: Any, namespace: str, uid: str) -> None:
        """The garbage collector: objects of ``kind`` owned by ``uid`` go with their owner."""
        items, _ = self.store.list(kind, namespace)
        for obj in items:
            if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or []):
                with contextlib.suppress(ApiError):
                    self.store.remove(kind, namespace, obj["metadata"]["name"])

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
                condition(
                    "Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline"
                ),
            )

        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, st.namespace, st.name, fail)

    # -- status ----------------------------------------------------------------------------
    # -- queries used by the server --------------------------------------------------------

    def sandbox(self, ns: str, name: str) -> processes.PodSandbox | None:
        return self.sandboxes.get((ns, name))

    def job_of_pod(self, pod: dict[str, Any]) -> str | None:
        return (pod.get("metadata", {}).get("labels") or {}).get(JOBSET_NAME)
