"""The user errors of pod shaping, read as upstream words them: the scheduler's FailedScheduling
(kube-scheduler VolumeBinding / NodeAffinity / TaintToleration plugins), the Job controller's
FailedCreate (k8s.io/kubernetes pkg/controller/job via the ServiceAccount admission plugin), the
kubelet's FailedMount and CreateContainerConfigError; each is hopeless and one line naming the
object. And Kueue's admitted-but-suspended TrainJob (kubeflow/trainer#3888) is one line
naming the upgrade within the grace, not a hang (Trainer 2.3 with Kueue <= 0.19 cannot run on
the real stack's defaults: its Workloads are faked here)."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.engine.errors import QueueUnavailableError
from trainjob_magics.engine.kube.events import Event
from trainjob_magics.engine.kueue import admission
from trainjob_magics.engine.result import QueueStatus
from trainjob_magics.engine.trainjob.pending import (
    job_problem,
    placement_mismatch,
    user_error,
)


def pod(*, unscheduled: str = "", waiting: tuple[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if unscheduled:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unscheduled,
            }
        ]
    if waiting:
        status["containerStatuses"] = [
            {"name": "node", "state": {"waiting": {"reason": waiting[0], "message": waiting[1]}}}
        ]
    return {"metadata": {"name": "j-node-0-0-x", "namespace": "tjm"}, "status": status}


def ev(reason: str, message: str, kind: str = "Pod") -> Event:
    return Event(reason=reason, message=message, kind=kind, name="x", type="Warning")


PVC = (
    '0/2 nodes are available: persistentvolumeclaim "data" not found. preemption: 0/2 nodes '
    "are available: 2 Preemption is not helpful for scheduling."
)
SELECTOR = (
    "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: "
    "0/2 nodes are available: 2 Preemption is not helpful for scheduling."
)
TAINT = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {pool: gpu}, 2 node(s) didn't "
    "match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is "
    "not helpful for scheduling."
)
ROOM = (
    "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found "
    "for incoming pod, 2 Preemption is not helpful for scheduling."
)


def test_missing_pvc_from_the_scheduler() -> None:
    found = user_error(pod(unscheduled=PVC), [ev("FailedScheduling", PVC)])
    assert found is not None and found.hopeless
    assert found.fix.startswith('PersistentVolumeClaim "data" not found in namespace tjm')


def test_missing_service_account_from_the_jobs_failed_create() -> None:
    message = (
        'Error creating: pods "j-node-0-0-abcde" is forbidden: error looking up service account '
        'tjm/reader: serviceaccount "reader" not found'
    )
    found = job_problem(
        "j-node-0", "tjm", [ev("SuccessfulCreate", "x", "Job"), ev("FailedCreate", message, "Job")]
    )
    assert found is not None and found.hopeless
    assert 'service account "reader" not found in namespace tjm' in found.fix
    quota = job_problem(
        "j-node-0", "tjm", [ev("FailedCreate", "Error creating: exceeded quota: q", "Job")]
    )
    assert quota is not None and not quota.hopeless  # told, but not the user's option


def test_an_invalid_pod_template_from_the_jobsets_job_creation_failed() -> None:
    """The real stack (Trainer 2.2.1, JobSet 0.11.1): a --pod-patch mounting a volume no pod
    has passes the TrainJob's checks; the JobSet controller cannot create the Job."""
    race = (
        'job "j-node-0" creation failed with error: admission webhook "mjob.kb.io" denied the '
        'request: JobSet.jobset.x-k8s.io "j" not found'
    )
    invalid = (
        'job "j-node-0" creation failed with error: Job.batch "j-node-0" is invalid: '
        'spec.template.spec.containers[0].volumeMounts[0].name: Not found: "nosuch"'
    )
    assert not job_problem("JobSet j", "tjm", [ev("JobCreationFailed", race, "JobSet")]).hopeless
    found = job_problem(
        "JobSet j",
        "tjm",
        [ev("JobCreationFailed", race, "JobSet"), ev("JobCreationFailed", invalid, "JobSet")],
    )
    assert found is not None and found.hopeless
    assert found.fix == (
        'the pods of JobSet j cannot be created: Job.batch "j-node-0" is invalid: '
        'spec.template.spec.containers[0].volumeMounts[0].name: Not found: "nosuch"; fix '
        "--pod-patch (or the options that put it there)"
    )


def test_missing_secret_and_configmap_from_the_kubelet() -> None:
    mount = 'MountVolume.SetUp failed for volume "tjm-secret-0" : secret "creds" not found'
    found = user_error(pod(), [ev("FailedMount", mount)])
    assert found is not None and found.hopeless and found.reason == "FailedMount"
    assert found.fix.startswith('Secret "creds" not found in namespace tjm')
    env = user_error(pod(waiting=("CreateContainerConfigError", 'configmap "cfg" not found')))
    assert env is not None and env.hopeless
    assert env.fix.startswith('ConfigMap "cfg" not found in namespace tjm')
    key = user_error(
        pod(waiting=("CreateContainerConfigError", "couldn't find key TJM in Secret tjm/creds"))
    )
    assert key is not None and "Secret tjm/creds has no key TJM" in key.fix


def test_placement_that_matches_no_node() -> None:
    assert placement_mismatch(SELECTOR) and placement_mismatch(TAINT)
    assert not placement_mismatch(ROOM)  # room may free up: waiting can help
    assert not placement_mismatch("")
    found = user_error(
        pod(unscheduled=SELECTOR), [ev("FailedScheduling", SELECTOR)], placement=True
    )
    assert found is not None and found.hopeless and "no node matches" in found.fix
    # without --node-selector/--toleration it is the runtime's or Kueue's: a real cluster may
    # still add a node (autoscaler), so it is not the session's error
    assert user_error(pod(unscheduled=SELECTOR), [ev("FailedScheduling", SELECTOR)]) is None
    assert user_error(pod(unscheduled=ROOM), [ev("FailedScheduling", ROOM)], placement=True) is None


def test_an_admitted_trainjob_that_stays_suspended_fails_with_the_upgrade(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(admission.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(admission.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    admitted = QueueStatus("Admitted", local_queue="user-queue", workload="trainjob-j-1a2b3")
    monkeypatch.setattr(admission, "queue_status", lambda *a, **k: admitted)
    monkeypatch.setattr(admission, "Visibility", lambda api: None)
    deleted: list[bool] = []
    reporter = admission.QueueReporter(None)
    with pytest.raises(QueueUnavailableError) as info:
        admission.admit_or_raise(
            object(),  # type: ignore[arg-type]
            "tjm",
            "j",
            "uid",
            "user-queue",
            runtime="torch-distributed",
            timeout=600,
            deadline=600,
            started=0,
            reporter=reporter,
            fetch_trainjob=lambda: {"spec": {"suspend": True}},
            delete_job=lambda: deleted.append(True) or True,
            stuck_hint="upgrade Kueue to 0.20 (kubernetes-sigs/kueue#14836)",
        )
    message = str(info.value)
    assert info.value.reason == admission.STUCK and deleted == [True]
    assert "still suspended after 15s" in message and "Kueue to 0.20" in message
    assert "the TrainJob was deleted" in message and "\n" not in message
    assert clock[0] <= admission.STUCK_GRACE + 2  # at once, not at the connect timeout


def test_a_trainjob_kueue_unsuspends_is_not_stuck(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(admission.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(admission.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    admitted = QueueStatus("Admitted", local_queue="user-queue", workload="trainjob-j-1a2b3")
    monkeypatch.setattr(admission, "queue_status", lambda *a, **k: admitted)
    monkeypatch.setattr(admission, "Visibility", lambda api: None)
    states = iter([True] * 5 + [False])
    got = admission.wait_for_admission(
        object(),  # type: ignore[arg-type]
        "tjm",
        "j",
        "uid",
        "user-queue",
        deadline=600,
        report=lambda qs: None,
        fetch_trainjob=lambda: {"spec": {"suspend": next(states)}},
    )
    assert got is admitted


def test_a_webhook_denial_is_the_content_not_a_permission() -> None:
    """kube-apiserver answers a validating webhook's refusal with 403 Forbidden; it names the
    webhook and the field, and asks to fix the input, not for RBAC (the real stack's Trainer
    2.2.1 webhook on env in a runtimePatches trainer container)."""
    import json

    from trainjob_magics.engine.errors import InvalidInputError, PermissionDeniedError
    from trainjob_magics.engine.kube.requests import map_http_failure

    body = json.dumps(
        {
            "reason": "Forbidden",
            "message": 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the '
            'request: spec.runtimePatches: Invalid value: [{"manager":"m","trainingRuntimeSpec":'
            '{"template":{}}}]: must not have envs for the dataset-initializer, model-initializer,'
            " node containers",
        }
    )
    err = map_http_failure(403, body, verb="create", resource="trainjobs", name="j", namespace="n")
    assert isinstance(err, InvalidInputError) and not isinstance(err, PermissionDeniedError)
    assert str(err) == (
        "the API server rejected the request to create trainjobs j: admission webhook "
        '"validator.trainjob.trainer.kubeflow.org" denied the request: spec.runtimePatches: '
        "Invalid value: ...: must not have envs for the dataset-initializer, model-initializer, "
        "node containers; fix the input"
    )
    rbac = json.dumps({"reason": "Forbidden", "message": 'pods is forbidden: User "a" cannot list'})
    denied = map_http_failure(403, rbac, verb="list", resource="pods", namespace="n")
    assert isinstance(denied, PermissionDeniedError)


def test_tolerations_a_flavor_replaced_are_named() -> None:
    """kueue#15161 (Kueue <= 0.19 with Trainer 2.3): the admitted pod carries the flavor's
    tolerations instead of the session's; a queued connect names what it lost."""
    from trainjob_magics.engine.connecting import lost_tolerations
    from trainjob_magics.engine.trainjob.shaping import build_shaping

    shaping = build_shaping(tolerations=["gpu=true:NoSchedule", "spot:NoExecute"])
    flavor_only = {"spec": {"tolerations": [{"key": "pool", "operator": "Exists"}]}}
    assert lost_tolerations(flavor_only, shaping) == ["gpu=true:NoSchedule", "spot:NoExecute"]
    kept = {
        "spec": {
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            ]
        }
    }
    assert lost_tolerations(kept, shaping) == []
