"""OpenAPI schemas of the Kueue kinds, enough for `kubectl explain <kind>.spec` to list the
fields a real Kueue's CRDs have (kubernetes-sigs/kueue apis/kueue/v1beta2, v1beta1: the first
level of each spec, with short descriptions; nested objects stay open). The local cluster
validates none of these fields (the CRD schemas themselves live in ../shared for the tests).
"""

from __future__ import annotations

from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"


def _f(type_: str, description: str, **extra: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": type_, "description": description, **extra}
    if type_ == "object" and "properties" not in extra:
        node["x-kubernetes-preserve-unknown-fields"] = True
    if type_ == "array" and "items" not in extra:
        node["items"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return node


_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

SPECS: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "description": "ClusterQueue is the Schema for the clusterQueue API.",
        "spec": {
            "admissionChecksStrategy": _f(
                "object", "admissionChecksStrategy lists the admission checks a workload needs."
            ),
            "admissionScope": _f("object", "admissionScope selects Admission Fair Sharing."),
            "cohortName": _f("string", "cohortName is the cohort this ClusterQueue belongs to."),
            "fairSharing": _f("object", "fairSharing: the weight of this ClusterQueue."),
            "flavorFungibility": _f(
                "object", "flavorFungibility: whether to try the next flavor or preempt."
            ),
            "namespaceSelector": _f(
                "object", "namespaceSelector: the namespaces that may submit workloads."
            ),
            "preemption": _f("object", "preemption defines the preemption policies."),
            "queueingStrategy": _f(
                "string",
                "queueingStrategy: StrictFIFO or BestEffortFIFO.",
                enum=["StrictFIFO", "BestEffortFIFO"],
            ),
            "resourceGroups": _f("array", "resourceGroups: the flavors and quotas by resource."),
            "stopPolicy": _f(
                "string",
                "stopPolicy: None, Hold or HoldAndDrain.",
                enum=["None", "Hold", "HoldAndDrain"],
            ),
        },
    },
    "LocalQueue": {
        "description": "LocalQueue is the Schema for the localQueues API",
        "spec": {
            "clusterQueue": _f("string", "clusterQueue is the ClusterQueue behind this queue."),
            "fairSharing": _f("object", "fairSharing: the weight of this LocalQueue."),
            "stopPolicy": _f(
                "string",
                "stopPolicy: None, Hold or HoldAndDrain.",
                enum=["None", "Hold", "HoldAndDrain"],
            ),
        },
    },
    "ResourceFlavor": {
        "description": "ResourceFlavor is the Schema for the resourceflavors API.",
        "spec": {
            "nodeLabels": _f("object", "nodeLabels associate the flavor with nodes."),
            "nodeTaints": _f("array", "nodeTaints are the taints of the flavor's nodes."),
            "tolerations": _f("array", "tolerations added to the pods admitted in this flavor."),
            "topologyName": _f("string", "topologyName: the Topology for TAS."),
        },
    },
    "Workload": {
        "description": "Workload is the Schema for the workloads API",
        "spec": {
            "active": _f("boolean", "active: whether the workload can be admitted."),
            "maximumExecutionTimeSeconds": _f(
                "integer", "maximumExecutionTimeSeconds: the time limit once admitted."
            ),
            "podSets": _f("array", "podSets: the sets of homogeneous pods of the workload."),
            "priority": _f("integer", "priority: the order of access to the resources."),
            "priorityClassRef": _f("object", "priorityClassRef: the priority class used."),
            "queueName": _f("string", "queueName: the LocalQueue of the workload."),
        },
    },
    "AdmissionCheck": {
        "description": "AdmissionCheck is the Schema for the admissionchecks API",
        "spec": {
            "controllerName": _f(
                "string", "controllerName identifies the controller that processes the check."
            ),
            "parameters": _f(
                "object",
                "parameters: a configuration object with parameters for the check.",
                properties={
                    "apiGroup": _f("string", "apiGroup of the referenced resource."),
                    "kind": _f("string", "kind of the referenced resource."),
                    "name": _f("string", "name of the referenced resource."),
                },
                required=["apiGroup", "kind", "name"],
            ),
            "retryDelayMinutes": _f(
                "integer", "retryDelayMinutes (deprecated): wait after a failed check."
            ),
        },
        "required": ["controllerName"],
    },
}

# WorkloadPriorityClass has no spec: `value` and `description` sit at the top level.
TOP_LEVEL = {
    "WorkloadPriorityClass": {
        "description": "WorkloadPriorityClass is the Schema for the workloadPriorityClass API",
        "properties": {
            "value": _f("integer", "value: the priority of workloads with this class."),
            "description": _f("string", "description: what this priority class is for."),
        },
        "required": ["value"],
    }
}


def kueue_schema(kind: str, meta_ref: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of the Kueue kind `kind` (None for a kind not listed here)."""
    base = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"allOf": [meta_ref], "default": {}},
    }
    if kind in TOP_LEVEL:
        top = TOP_LEVEL[kind]
        return {
            "type": "object",
            "description": top["description"],
            "properties": {**base, **top["properties"]},
            "required": list(top["required"]),
        }
    if kind not in SPECS:
        return None
    entry = SPECS[kind]
    spec: dict[str, Any] = {
        "type": "object",
        "description": f"{kind}Spec defines the desired state of {kind}",
        "properties": entry["spec"],
    }
    if entry.get("required"):
        spec["required"] = list(entry["required"])
    return {
        "type": "object",
        "description": entry["description"],
        "properties": {**base, "spec": spec, "status": dict(_OPEN)},
    }
