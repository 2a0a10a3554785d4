"""kube-scheduler for the one node: resource fit, binding, the unschedulable condition and its
Event, preemption of lower-priority pods, and retrying when capacity frees up.

Follows Kubernetes 1.32 (the version /version reports):

- ``pkg/scheduler/framework/plugins/noderesources/fit.go`` (``fitsRequest``): the reasons
  ``Too many pods``, ``Insufficient cpu``, ``Insufficient memory``,
  ``Insufficient ephemeral-storage`` and ``Insufficient <resource>`` for scalar resources such as
  ``nvidia.com/gpu``; a node has none of a resource it does not report. (1.34 and later call a
  request larger than the whole node UnschedulableAndUnresolvable, and their preemption
  message then says "Preemption is not helpful for scheduling"; 1.32 does not.)
- ``pkg/scheduler/framework/types.go`` (``FitError.Error``): ``0/1 nodes are available: `` then
  the sorted histogram ``1 <reason>`` joined by ``, ``, a period, then the PostFilter message.
- ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`` and
  ``pkg/scheduler/framework/preemption/preemption.go``: ``preemption: `` + the FitError of the
  dry run (``No preemption victims found for incoming pod`` when no pod has a lower priority),
  ``not eligible due to preemptionPolicy=Never.``, ``not eligible due to a terminating pod on
  the nominated node.``; victims get a ``DisruptionTarget`` condition (reason
  ``PreemptionByScheduler``), a ``Preempted`` Event, and are deleted; the preemptor gets
  ``status.nominatedNodeName``.
- ``pkg/scheduler/schedule_one.go`` (``handleSchedulingFailure``): condition ``PodScheduled``
  False, reason ``Unschedulable``, and a Warning Event ``FailedScheduling`` from
  ``default-scheduler``; on success the binding sets ``spec.nodeName``, ``PodScheduled`` True,
  and the scheduler records ``Scheduled`` ``Successfully assigned <ns>/<pod> to <node>``.
- ``pkg/scheduler/scheduler.go``: the scheduler's pod informer leaves out Succeeded and Failed
  pods (``status.phase!=Succeeded,status.phase!=Failed``), so a finished pod frees its
  resources at once; a deleted (not just terminating) pod frees them when it is gone.
- Before the resources, as the default plugins of Kubernetes 1.36.3 (the real stack's) run
  and word it: ``volumebinding/volume_binding.go`` PreFilter (a claim that does not exist:
  ``0/1 nodes are available: persistentvolumeclaim "x" not found. not found``: the second
  "not found" is the DynamicResources PostFilter's, whose cycle state the failed PreFilter
  never wrote, ``dynamicresources.go`` getStateData; preemption then does not run), then the
  Filters ``tainttoleration`` (``node(s) had untolerated taint(s)``) and ``nodeaffinity``
  (``node(s) didn't match Pod's node affinity/selector``, for ``spec.nodeSelector`` and
  required node affinity), each UnschedulableAndUnresolvable, so the PostFilters answer
  ``no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not
  helpful for scheduling.`` (DynamicResources, then ``framework/preemption/preemption.go``,
  joined by ``runtime/framework.go`` RunPostFilterPlugins). The node's labels are
  ``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch`` and any given to
  the cluster; it has the taints given to the cluster (none by default).
- ``pkg/scheduler/backend/queue/scheduling_queue.go``: the active queue orders by priority,
  then by arrival; unschedulable pods are retried when an assigned pod goes away, and at the
  latest after ``podMaxInUnschedulablePodsDuration`` (5 minutes). The local scheduler retries
  at once instead of after kube-scheduler's per-pod back-off (1s doubling to 10s).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import platform
from dataclasses import dataclass, field
from typing import Any

from ..core.apierror import ApiError
from ..core.events import record_event
from ..core.resources import PERSISTENT_VOLUME_CLAIMS, PODS
from ..core.store import Event, Store, now_rfc3339
from ..kubelet.node import (
    CPU,
    EPHEMERAL,
    MEMORY,
    NODE_NAME,
    PODS_RESOURCE,
    NodeResources,
    pod_requests,
)

log = logging.getLogger(__name__)

SCHEDULER = "default-scheduler"
TERMINAL = ("Succeeded", "Failed")
UNSCHEDULABLE_FLUSH = 300.0  # podMaxInUnschedulablePodsDuration
NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
TERMINATING_VICTIM = "preemption: not eligible due to a terminating pod on the nominated node."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_CLAIMS = "no new claims to deallocate"  # the DynamicResources PostFilter (1.34+)
UNTOLERATED = "node(s) had untolerated taint(s)"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


def fit_reasons(
    request: dict[str, int], used: dict[str, int], allocatable: dict[str, int], pods: int
) -> list[str]:
    """fit.go ``fitsRequest``: why ``request`` does not fit beside ``used`` (``pods`` pods)."""
    reasons: list[str] = []
    if pods + 1 > allocatable.get(PODS_RESOURCE, 0):
        reasons.append("Too many pods")
    for name in (CPU, MEMORY, EPHEMERAL):
        want = request.get(name, 0)
        if want > 0 and want > allocatable.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    for name in sorted(request):
        if name in (CPU, MEMORY, EPHEMERAL, PODS_RESOURCE):
            continue
        want = request[name]
        if want > 0 and want > allocatable.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def fit_error(reasons: list[str], nodes: int = 1, post_filter: str = "") -> str:
    """types.go ``FitError.Error``: ``0/N nodes are available: <histogram>. <PostFilter>``."""
    msg = f"0/{nodes} nodes are available:"
    histogram = sorted(f"{nodes} {r}" for r in dict.fromkeys(reasons))
    if histogram:
        msg += f" {', '.join(histogram)}."
    if post_filter:
        msg += f" {post_filter}"
    return msg


def priority(pod: dict[str, Any]) -> int:
    """``corev1helpers.PodPriority``: ``spec.priority``, 0 when unset."""
    try:
        return int((pod.get("spec") or {}).get("priority") or 0)
    except (TypeError, ValueError):
        return 0


def _terminating_by_preemption(pod: dict[str, Any]) -> bool:
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "PreemptionByScheduler"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@dataclass
class _Queued:
    future: asyncio.Future[bool]
    seq: int
    attempted: bool = False
    last_message: str = field(default="", repr=False)


class Scheduler:
    """Schedules the pods the controller creates onto the one node (see the module doc)."""

    def __init__(
        self,
        store: Store,
        node: NodeResources,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> None:
        self.store = store
        self.node = node
        self.labels = {**default_node_labels(), **(labels or {})}
        self.taints = [dict(t) for t in taints or []]
        self._queue: dict[tuple[str, str], _Queued] = {}
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None
        self._freed = False
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._run())

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for q in self._queue.values():
            if not q.future.done():
                q.future.set_result(False)

    # -- what the controller calls ---------------------------------------------------------

    async def schedule(self, namespace: str, name: str) -> bool:
        """Wait until pod ``namespace/name`` is bound to the node (True), or is gone (False)."""
        loop = asyncio.get_running_loop()
        key = (namespace, name)
        queued = _Queued(loop.create_future(), next(self._seq))
        self._queue[key] = queued
        self._poke()
        try:
            return await queued.future
        finally:
            if self._queue.get(key) is queued:
                del self._queue[key]

    def on_pod_event(self, ev: Event) -> None:
        """A pod changed: retry the unschedulable pods when an assigned pod freed resources."""
        pod = ev.obj
        if not (pod.get("spec") or {}).get("nodeName"):
            if ev.type == "DELETED":
                self._poke()  # a queued pod went away
            return
        phase = (pod.get("status") or {}).get("phase")
        old_phase = ((ev.old or {}).get("status") or {}).get("phase")
        if ev.type == "DELETED" or (phase in TERMINAL and old_phase not in TERMINAL):
            self._freed = True
            self._poke()

    def retry_all(self) -> None:
        """Try every waiting pod again (an object they may wait for changed)."""
        self._freed = True
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- the scheduling loop ---------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), UNSCHEDULABLE_FLUSH)
            except asyncio.TimeoutError:
                self._freed = True  # flushUnschedulablePodsLeftover
            self._wake.clear()
            retry_all, self._freed = self._freed, False
            try:
                self._cycle(retry_all)
            except Exception:  # keep scheduling
                log.exception("scheduling cycle failed")

    def _cycle(self, retry_all: bool) -> None:
        order = sorted(
            self._queue.items(),
            key=lambda kv: (-priority(self.store.try_get(PODS, *kv[0]) or {}), kv[1].seq),
        )
        for key, queued in order:
            if queued.future.done() or (queued.attempted and not retry_all):
                continue
            pod = self.store.try_get(PODS, *key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                queued.future.set_result(False)
                continue
            queued.attempted = True
            if self._schedule_one(pod, queued):
                queued.future.set_result(True)

    def _node_pods(self, exclude: tuple[str, str]) -> list[dict[str, Any]]:
        """The pods the scheduler's cache holds on the node: assigned and not finished."""
        pods, _ = self.store.list(PODS)
        return [
            p
            for p in pods
            if (p.get("spec") or {}).get("nodeName") == NODE_NAME
            and (p.get("status") or {}).get("phase") not in TERMINAL
            and (p["metadata"].get("namespace"), p["metadata"].get("name")) != exclude
        ]

    @staticmethod
    def _used(pods: list[dict[str, Any]]) -> dict[str, int]:
        used: dict[str, int] = {}
        for p in pods:
            for k, v in pod_requests(p).items():
                used[k] = used.get(k, 0) + v
        return used

    def _unresolvable(self, pod: dict[str, Any]) -> str | None:
        """The message of a PreFilter or Filter that no preemption can help (None: none)."""
        claim_error = missing_claim(self.store, pod)
        if claim_error is not None:
            return f"0/1 nodes are available: {claim_error}. not found"
        spec = pod.get("spec") or {}
        if untolerated_taint(self.taints, spec.get("tolerations") or []) is not None:
            return fit_error([UNTOLERATED])
        if not node_affinity_matches(self.labels, NODE_NAME, spec):
            return fit_error([AFFINITY_MISMATCH])
        return None

    def _schedule_one(self, pod: dict[str, Any], queued: _Queued) -> bool:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        unresolvable = self._unresolvable(pod)
        if unresolvable is not None:
            if unresolvable.endswith("not found"):
                message = unresolvable  # the PostFilters stopped at DynamicResources' error
            elif (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
                message = f"{unresolvable} {NO_CLAIMS}, {PREEMPTION_NEVER}"
            else:
                message = f"{unresolvable} {NO_CLAIMS}, preemption: {fit_error([NOT_HELPFUL])}"
            self._unschedulable(pod, message, nominate=False)
            queued.last_message = message
            return False
        request = pod_requests(pod)
        node_pods = self._node_pods(key)
        allocatable = self.node.allocatable()
        reasons = fit_reasons(request, self._used(node_pods), allocatable, len(node_pods))
        if not reasons:
            return self._bind(pod)
        post_filter, victims = self._preempt(pod, request, node_pods, allocatable)
        message = fit_error(reasons, 1, post_filter)
        if victims:
            self._evict(pod, victims)
        self._unschedulable(pod, message, nominate=bool(victims))
        queued.last_message = message
        return False

    # -- preemption (PostFilter) -----------------------------------------------------------

    def _preempt(
        self,
        pod: dict[str, Any],
        request: dict[str, int],
        node_pods: list[dict[str, Any]],
        allocatable: dict[str, int],
    ) -> tuple[str, list[dict[str, Any]]]:
        """The PostFilter message, or ("", victims) when deleting victims makes room."""
        if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return PREEMPTION_NEVER, []
        prio = priority(pod)
        if (pod.get("status") or {}).get("nominatedNodeName") and any(
            priority(p) < prio and _terminating_by_preemption(p) for p in node_pods
        ):
            return TERMINATING_VICTIM, []
        lower = [p for p in node_pods if priority(p) < prio]
        if not lower:
            return f"preemption: {fit_error([NO_VICTIMS])}", []
        keep = [p for p in node_pods if priority(p) >= prio]
        still = fit_reasons(request, self._used(keep), allocatable, len(keep))
        if still:
            return f"preemption: {fit_error(still)}", []
        # SelectVictimsOnNode: reprieve the most important pods first (priority, then the
        # earlier start), as long as the preemptor still fits.
        victims: list[dict[str, Any]] = []
        for p in sorted(
            lower,
            key=lambda q: (-priority(q), (q.get("status") or {}).get("startTime") or ""),
        ):
            trial = [*keep, p]
            if fit_reasons(request, self._used(trial), allocatable, len(trial)):
                victims.append(p)
            else:
                keep = trial
        return "", victims

    def _evict(self, preemptor: dict[str, Any], victims: list[dict[str, Any]]) -> None:
        """preemption.go ``prepareCandidate``: condition, Event, then delete each victim."""
        uid = preemptor["metadata"].get("uid", "")
        scheduler = (preemptor.get("spec") or {}).get("schedulerName") or SCHEDULER
        for victim in victims:
            vmeta = victim["metadata"]
            ns, name = vmeta["namespace"], vmeta["name"]

            def disrupt(p: dict[str, Any]) -> None:
                conds = p.setdefault("status", {}).setdefault("conditions", [])
                conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
                conds.append(
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "message": f"{scheduler}: preempting to accommodate a higher priority pod",
                        "lastProbeTime": None,
                        "lastTransitionTime": now_rfc3339(),
                    }
                )

            with contextlib.suppress(ApiError):
                updated = self.store.mutate(PODS, ns, name, disrupt)
                record_event(
                    self.store,
                    updated,
                    reason="Preempted",
                    message=f"Preempted by pod {uid} on node {NODE_NAME}",
                    component=SCHEDULER,
                )
                grace = (victim.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                self.store.mark_deleting(PODS, ns, name, int(grace))

    # -- writing the outcome ---------------------------------------------------------------

    def _bind(self, pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]

        def bind(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = NODE_NAME
            status = p.setdefault("status", {})
            status.pop("nominatedNodeName", None)
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conds.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
            )
            status["conditions"] = conds

        try:
            bound = self.store.mutate(PODS, ns, name, bind)
        except ApiError:
            return False
        record_event(
            self.store,
            bound,
            reason="Scheduled",
            message=f"Successfully assigned {ns}/{name} to {NODE_NAME}",
            component=SCHEDULER,
        )
        return True

    def _unschedulable(self, pod: dict[str, Any], message: str, *, nominate: bool) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = pod.get("status") or {}
        current = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        changed = (
            current.get("status") != "False"
            or current.get("reason") != "Unschedulable"
            or current.get("message") != message
            or nominate != bool(status.get("nominatedNodeName"))
        )
        pod_now = pod
        if changed:

            def mark(p: dict[str, Any]) -> None:
                st = p.setdefault("status", {})
                old = next(
                    (c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"),
                    {},
                )
                conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
                conds.append(
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": old.get("lastTransitionTime")
                        if old.get("status") == "False"
                        else now_rfc3339(),
                        "reason": "Unschedulable",
                        "message": message,
                    }
                )
                st["conditions"] = conds
                if nominate:
                    st["nominatedNodeName"] = NODE_NAME
                else:
                    st.pop("nominatedNodeName", None)

            try:
                pod_now = self.store.mutate(PODS, ns, name, mark)
            except ApiError:
                return
        record_event(
            self.store,
            pod_now,
            reason="FailedScheduling",
            message=message,
            type="Warning",
            component=SCHEDULER,
        )


def default_node_labels() -> dict[str, str]:
    """The labels the kubelet puts on its Node (``pkg/kubelet/kubelet_node_status.go``)."""
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(
        platform.machine(), platform.machine().lower()
    )
    return {
        "kubernetes.io/hostname": NODE_NAME,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch,
    }


def missing_claim(store: Store, pod: dict[str, Any]) -> str | None:
    """``VolumeBinding.podHasPVCs``: the error for a claim of the pod that cannot be used."""
    ns = (pod.get("metadata") or {}).get("namespace", "")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim")
        if not source:
            continue
        name = source.get("claimName", "")
        claim = store.try_get(PERSISTENT_VOLUME_CLAIMS, ns, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if (claim.get("status") or {}).get("phase") == "Lost":
            pv = (claim.get("spec") or {}).get("volumeName", "")
            return f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{pv}"'
        if claim["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted'
    return None


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """``Toleration.ToleratesTaint`` (k8s.io/api core/v1 toleration.go)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") != taint.get("key") and toleration.get("key"):
        return False
    if not toleration.get("key") and toleration.get("operator") != "Exists":
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """``FindMatchingUntoleratedTaint`` over the NoSchedule and NoExecute taints."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op = expr.get("key", ""), expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_affinity_matches(labels: dict[str, str], node_name: str, spec: dict[str, Any]) -> bool:
    """``nodeaffinity`` Filter: ``spec.nodeSelector`` (every label equal) and the required
    node affinity (any term whose expressions and fields all match;
    component-helpers ``nodeaffinity.go``)."""
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or None
    if required is None:
        return True
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_expression_matches(e, labels) for e in exprs) and all(
            _expression_matches(f, {"metadata.name": node_name}) for f in fields
        ):
            return True
    return False


__all__ = [
    "SCHEDULER",
    "Scheduler",
    "default_node_labels",
    "fit_error",
    "fit_reasons",
    "missing_claim",
    "node_affinity_matches",
    "priority",
    "untolerated_taint",
]
