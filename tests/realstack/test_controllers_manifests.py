"""The controllers' manifests as the stack builds them from each module's own kustomization (Go
module cache), for every Trainer/Kueue pair of the matrix: no cluster needed, only Go and the
module proxy (they skip without Go unless TRAINJOB_MAGICS_REQUIRE_REALSTACK=1)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from devtools.realstack import controllers, fixtures
from devtools.realstack.context import StackContext
from devtools.realstack.manifests import WEBHOOK_KINDS
from devtools.realstack.procs import StackError
from devtools.realstack.versions import MATRIX, NOT_SERVED, Versions

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
PAIRS = [(t, k) for t, k, _ in MATRIX if k not in NOT_SERVED]
CA = "Q0E="


@pytest.fixture(scope="module", params=PAIRS, ids=[f"trainer-{t}+kueue-{k}" for t, k in PAIRS])
def planned(request, tmp_path_factory) -> tuple[StackContext, list[controllers.Controller]]:
    if shutil.which("go") is None:
        if REQUIRE:
            pytest.fail(
                "Go is needed to read the controllers' modules "
                "(TRAINJOB_MAGICS_REQUIRE_REALSTACK=1)"
            )
        pytest.skip("Go is not installed: the controllers' manifests come from the Go module cache")
    trainer, kueue = request.param
    ctx = StackContext(
        run=tmp_path_factory.mktemp("plan"),
        versions=Versions(trainer=trainer, kueue=kueue).resolved(),
    )
    try:
        return ctx, controllers.plan(ctx)
    except StackError as e:
        if REQUIRE:
            raise
        pytest.skip(f"a module of trainer {trainer} / kueue {kueue} is not available: {e}")


def by_name(cs: list[controllers.Controller]) -> dict[str, controllers.Controller]:
    return {c.name: c for c in cs}


def test_every_service_reference_goes_to_an_external_name_service_with_ca(planned):
    _, cs = planned
    for c in cs:
        services = {
            (s["metadata"]["namespace"], s["metadata"]["name"]): s
            for s in controllers.external_services(c)
        }
        wired = controllers.wired_objects(c, CA) + [
            o for o in controllers.setup_objects(c, CA) if o["kind"] == "CustomResourceDefinition"
        ]
        refs = 0
        for o in wired:
            for ref in controllers._service_refs(o):
                refs += 1
                svc = services[(ref["namespace"], ref["name"])]
                assert svc["spec"] == {
                    "type": "ExternalName",
                    "externalName": "127.0.0.1",
                    "ports": [{"name": "https", "port": ref["port"], "protocol": "TCP"}],
                }
            if o["kind"] in WEBHOOK_KINDS:
                assert all(wh["clientConfig"]["caBundle"] == CA for wh in o["webhooks"])
            if o["kind"] == "APIService":
                assert o["spec"]["caBundle"] == CA and "insecureSkipTLSVerify" not in o["spec"]
        assert refs, c.name
        # the ports are the controller's own, none of the upstream defaults
        assert not {p for p in c.services.values()} & {9443, 443, 8443, 8081}


def test_webhook_selectors_are_the_ones_kustomize_adds(planned):
    _, cs = planned
    c = by_name(cs)
    # Kueue: config/components/webhook/kustomization.yaml gives the pod webhooks (all versions)
    # and, by the replacements of v0.19.2 (not in v0.14.8 or v0.17.0), the job webhooks too
    # a namespaceSelector without
    # kube-system and kueue-system; before, Kueue's managedJobsNamespaceSelector alone does it
    kueue_hooks = {
        wh["name"]: wh
        for o in controllers.wired_objects(c["kueue"], CA)
        if o["kind"] in WEBHOOK_KINDS
        for wh in o["webhooks"]
    }
    names = ["mpod.kb.io", "vpod.kb.io"]
    if c["kueue"].version not in ("v0.14.8", "v0.17.0"):
        names += ["mjob.kb.io", "mjobset.kb.io", "mtrainjob.kb.io", "vtrainjob.kb.io"]
    else:
        assert "namespaceSelector" not in kueue_hooks["mtrainjob.kb.io"]
    for name in names:
        expr = kueue_hooks[name]["namespaceSelector"]["matchExpressions"][0]
        assert expr["operator"] == "NotIn" and set(expr["values"]) == {
            "kube-system",
            "kueue-system",
        }, name
    for o in controllers.wired_objects(c["kueue"], CA):
        for wh in o.get("webhooks", []):
            assert wh["clientConfig"]["service"]["namespace"] == "kueue-system"
            assert wh["clientConfig"]["service"]["name"] == "kueue-webhook-service"
    # JobSet: the pod webhooks only see JobSet pods (config/components/webhook/patches)
    for o in controllers.wired_objects(c["jobset"], CA):
        for wh in o["webhooks"]:
            if wh["name"] in ("mpod.kb.io", "vpod.kb.io"):
                assert (
                    wh["objectSelector"]["matchExpressions"][0]["key"]
                    == "jobset.sigs.k8s.io/jobset-name"
                )
            assert wh["clientConfig"]["service"] == {
                "name": "jobset-webhook-service",
                "namespace": "jobset-system",
                "path": wh["clientConfig"]["service"]["path"],
                "port": c["jobset"].services[("jobset-system", "jobset-webhook-service")],
            }
    names = {o["metadata"]["name"] for o in controllers.wired_objects(c["trainer"], CA)}
    assert "validator.trainer.kubeflow.org" in names


def test_kueue_version_differences(planned):
    ctx, cs = planned
    kueue = by_name(cs)["kueue"]
    cfg = controllers.kueue_config(ctx, kueue, Path("/certs"))
    apis = {
        o["metadata"]["name"]
        for o in controllers.wired_objects(kueue, CA)
        if o["kind"] == "APIService"
    }
    crds = {
        o["metadata"]["name"]: o
        for o in controllers.setup_objects(kueue, CA)
        if o["kind"] == "CustomResourceDefinition"
    }
    assert cfg["integrations"]["frameworks"] == list(controllers.KUEUE_FRAMEWORKS)
    assert cfg["leaderElection"]["leaderElect"] is False and cfg["internalCertManagement"] == {
        "enable": False
    }
    assert (
        "waitForPodsReady" not in cfg and "managedJobsNamespaceSelector" not in cfg
    )  # upstream defaults
    if kueue.version.startswith("v0.14."):
        assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta1"
        assert apis == {"v1beta1.visibility.kueue.x-k8s.io"}
        assert "visibilityServer" not in cfg  # fixed port 8082 in pkg/visibility/server.go
        assert controllers.visibility_port(ctx, kueue) == 8082
        assert not any(
            c["spec"].get("conversion", {}).get("strategy") == "Webhook" for c in crds.values()
        )
    else:
        assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
        assert apis == {"v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io"}
        assert cfg["visibilityServer"]["bindPort"] == controllers.visibility_port(ctx, kueue)
        conv = crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["webhook"]["clientConfig"]
        assert conv["caBundle"] == CA and conv["service"]["name"] == "kueue-webhook-service"
    roles = {o["metadata"]["name"]: o for o in kueue.objects if o["kind"] == "ClusterRole"}
    assert {
        "kueue-pending-workloads-lq-viewer-role",
        "kueue-pending-workloads-cq-viewer-role",
    } <= set(roles)
    binding = next(
        o
        for o in kueue.objects
        if o["kind"] == "RoleBinding" and "visibility" in o["metadata"]["name"]
    )
    assert (
        binding["metadata"]["namespace"] == "kube-system"
    )  # role_binding_visibility_transformer.yaml
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kueue-controller-manager", "namespace": "kueue-system"}
    ]


def test_trainer_runtimes_and_config(planned):
    ctx, cs = planned
    trainer = by_name(cs)["trainer"]
    runtimes = {r["metadata"]["name"]: r for r in trainer.runtimes}
    assert {"torch-distributed", "deepspeed-distributed"} <= set(runtimes)
    assert "mpi" in runtimes["deepspeed-distributed"]["spec"]["mlPolicy"]  # an MPI runtime
    assert "torch" in runtimes["torch-distributed"]["spec"]["mlPolicy"]
    cfg = controllers.trainer_config(ctx, trainer)
    assert (
        cfg["certManagement"]["enable"] is False and cfg["leaderElection"]["leaderElect"] is False
    )
    assert (
        cfg["webhook"]["port"]
        == trainer.services[("kubeflow-system", "kubeflow-trainer-controller-manager")]
    )


def test_fixtures_follow_the_docs():
    objs = fixtures.rbac_objects()
    bound = {
        (o["metadata"].get("namespace"), o["roleRef"]["name"])
        for o in objs
        if o["kind"].endswith("Binding")
        if o["subjects"]
        == [{"kind": "User", "name": fixtures.USER, "apiGroup": "rbac.authorization.k8s.io"}]
    }
    assert (fixtures.NAMESPACE, "trainjob-magics-user") in bound
    assert (fixtures.QUEUED_NAMESPACE, "trainjob-magics-kueue") in bound
    assert (None, "trainjob-magics-runtimes-reader") in bound
    assert "alice" not in repr(objs) and "NAMESPACE" not in repr(objs)
