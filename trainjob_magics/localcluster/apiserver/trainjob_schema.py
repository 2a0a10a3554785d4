"""Compact TrainJob validator: what the apiserver does with the TrainJob CRD of Trainer v2.0.1,
v2.1.0, v2.2.1 or v2.3.0 (kubeflow/trainer manifests/base/crds at those tags).

One schema per Trainer version (``TRAINJOB_SCHEMAS``, keys "2.0" ... "2.3"): v2.0 has
``spec.podSpecOverrides``, ``spec.labels`` and ``spec.annotations`` and no metadata.name CEL
rules; v2.1 has ``spec.podTemplateOverrides`` instead of ``podSpecOverrides``; v2.2 removed all
of them and added ``spec.runtimePatches``, ``spec.activeDeadlineSeconds``, length limits and
five ``self == oldSelf`` rules (v2.0/v2.1 have two: runtimeRef and managedBy); v2.3 raised the
command/args item limit and added the storageUri rule. ``validate_trainjob`` serves the
version in ``SERVED_VERSION`` (a ContextVar the local cluster sets in its server thread)
unless one is passed.

Steps, in the apiserver's order: type meta check; prune unknown fields (warnings worded like
the server's) and ``null`` values; apply schema defaults; ObjectMeta checks (DNS subdomain name,
label and annotation syntax); structural-schema validation; the CRD's CEL rules (skipped, with
the server's "some validation rules were not checked" cause, after a type or enum error).
Causes are worded like ``field.Error`` / kube-openapi.

Where the CRD is looser than one might expect, this mirrors the CRD: ``spec.trainer.numNodes``
has no minimum, ``spec.runtimeRef.kind`` has no enum. The volumes, affinity and security
contexts inside v2.0/v2.1 overrides and v2.2+ ``spec.runtimePatches[].trainingRuntimeSpec``
(only a volume's ``name`` is checked), and ``status``, are kept as-is (not pruned nor
validated); the rest of a runtime patch is pruned to the CRD's PodSpecPatch/ContainerPatch.
"""

from __future__ import annotations

import contextvars
import copy
import json
import re
from collections.abc import Callable
from typing import Any

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "TrainJob"

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1035_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = rf"({_QUALIFIED_NAME})?"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_OBJECT_META_FIELDS = frozenset(
    [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ]
)
_ANNOTATIONS_MAX_BYTES = 256 * 1024

_TYPE_INVALID = "FieldValueTypeInvalid"
_NOT_SUPPORTED = "FieldValueNotSupported"
_ERROR_WORDS = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    _TYPE_INVALID: "Invalid value",
    _NOT_SUPPORTED: "Unsupported value",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueForbidden": "Forbidden",
}
_NO_VALUE = ("FieldValueRequired", "FieldValueTooLong", "FieldValueForbidden")


class SchemaError(Exception):
    """The body is invalid; ``causes`` are metav1.StatusCause dicts (reason, message, field)."""

    def __init__(self, causes: list[dict]) -> None:
        self.causes = causes
        super().__init__("; ".join(f"{c['field']}: {c['message']}" for c in causes))

    def status_message(self, name: str, kind: str = f"{KIND}.{GROUP}") -> str:
        """The apiserver's Status message: 'TrainJob.trainer.kubeflow.org "x" is invalid: ...'."""
        parts = [f"{c['field']}: {c['message']}" for c in self.causes]
        body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        return f'{kind} "{name}" is invalid: {body}'


# --- Go-style value formatting and causes -----------------------------------------------


def _go_value(value: Any) -> str:
    """Format a value the way field.Error.ErrorBody does (%q strings, %v scalars)."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)}:{_go_value(v)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + inner + "}"
    return "[]interface {}{" + ", ".join(_go_value(v) for v in value) + "}"


def _cause(reason: str, field: str, value: Any = None, detail: str = "") -> dict:
    message = _ERROR_WORDS[reason]
    if reason not in _NO_VALUE:
        message += f": {_go_value(value)}"
    if detail:
        message += f": {detail}"
    return {"reason": reason, "message": message, "field": field or "<nil>"}


def _type_name(value: Any) -> str:
    """kube-openapi's name for a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --- the compact schema -----------------------------------------------------------------

Rule = tuple[Callable[[Any], bool], str]


def _s(type_: str | None = None, **kw: Any) -> dict:
    """A schema node: type plus keywords (properties, required, items, additional, ...)."""
    node = dict(kw)
    if type_:
        node["type"] = type_
    return node


def _obj(props: dict, required: tuple[str, ...] = (), **kw: Any) -> dict:
    return _s("object", properties=props, required=required, **kw)


_STR = _s("string")
_INT32 = _s("integer")
_BOOL = _s("boolean")
_STR_MAP = _s("object", additional=_STR)
_QUANTITY = _s(None, int_or_string=True, pattern=QUANTITY_PATTERN)
_STORAGE_URI_RULE: Rule = (
    lambda v: v == "" or re.search(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$", v) is not None,
    "storageUri may be empty, or it must be a valid URI (scheme://...)",
)
_KEY_REF = _obj({"key": _STR, "name": _s("string", default=""), "optional": _BOOL}, ("key",))
_MANAGED_BY_VALUES = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
_MANAGED_BY_RULE: Rule = (
    lambda v: v in _MANAGED_BY_VALUES,
    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue "
    "if set",
)


def _v(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _env_schema(version: str) -> dict:
    """``[]corev1.EnvVar`` as the CRD of ``version`` embeds it (v2.2 added maxItems 128; the
    core/v1 ``fileKeyRef`` source appears from the v2.1 CRDs)."""
    sources = {
        "configMapKeyRef": _KEY_REF,
        "secretKeyRef": _KEY_REF,
        "fieldRef": _obj({"apiVersion": _STR, "fieldPath": _STR}, ("fieldPath",)),
        "resourceFieldRef": _obj(
            {"containerName": _STR, "divisor": _QUANTITY, "resource": _STR},
            ("resource",),
        ),
    }
    if _v(version) >= (2, 1):
        sources["fileKeyRef"] = _obj(
            {
                "key": _STR,
                "optional": _s("boolean", default=False),
                "path": _STR,
                "volumeName": _STR,
            },
            ("key", "path", "volumeName"),
        )
    item = _obj({"name": _STR, "value": _STR, "valueFrom": _obj(sources)}, ("name",))
    if _v(version) >= (2, 2):
        return _s("array", items=item, maxItems=128, map_keys=("name",))
    return _s("array", items=item, map_keys=("name",))


def _override_schemas(version: str) -> dict:
    """The pieces of a v2.0 ``PodSpecOverride`` / v2.1 ``PodTemplateOverride``: containers are
    ``ContainerOverride{name, env, volumeMounts}``; volumes and affinity are full core/v1
    types, kept as sent here (only a volume's ``name`` is checked)."""
    name = _s("string", minLength=1) if _v(version) >= (2, 1) else _STR
    mount = _obj(
        {
            "mountPath": _STR,
            "mountPropagation": _STR,
            "name": _STR,
            "readOnly": _BOOL,
            "recursiveReadOnly": _STR,
            "subPath": _STR,
            "subPathExpr": _STR,
        },
        ("mountPath", "name"),
    )
    container = _obj(
        {
            "env": _env_schema(version),
            "name": name,
            "volumeMounts": _s("array", items=mount, map_keys=("name",)),
        },
        ("name",),
    )
    toleration = _obj(
        {
            "effect": _STR,
            "key": _STR,
            "operator": _STR,
            "tolerationSeconds": _s("integer"),
            "value": _STR,
        }
    )
    return {
        "targetJobs": _s("array", items=_obj({"name": name}, ("name",))),
        "containers": _s("array", items=container, map_keys=("name",)),
        "initContainers": _s("array", items=container, map_keys=("name",)),
        "nodeSelector": _STR_MAP,
        "schedulingGates": _s("array", items=_obj({"name": _STR}, ("name",)), map_keys=("name",)),
        "serviceAccountName": _STR,
        "tolerations": _s("array", items=toleration),
        "volumes": _s(
            "array", items=_obj({"name": _STR}, ("name",), loose=True), map_keys=("name",)
        ),
    }


def _training_runtime_spec_patch(version: str) -> dict:
    """v2.2+ ``RuntimePatch.trainingRuntimeSpec`` (pkg/apis/trainer/v1alpha1/trainjob_types.go
    TrainingRuntimeSpecPatch ... PodSpecPatch, ContainerPatch at v2.2.1 / v2.3.0): what the API
    server keeps of a patch. Fields outside it are pruned with the server's warning, e.g. a
    container's ``envFrom``, ``command`` or ``resources`` (a ContainerPatch has only ``name``,
    ``env``, ``volumeMounts`` and ``securityContext``); volumes, affinity, tolerations'
    values and security contexts are full core/v1 types, kept as sent here."""
    parts = _override_schemas(version)
    name = _s("string", minLength=1, maxLength=253)
    container = copy.deepcopy(parts["containers"]["items"])
    container["properties"]["name"] = name
    container["properties"]["securityContext"] = _s("object", preserve=True)
    containers = _s("array", items=container, map_keys=("name",))
    meta = _obj(
        {
            "annotations": _STR_MAP,
            "finalizers": _s("array", items=_STR),
            "labels": _STR_MAP,
            "name": _STR,
            "namespace": _STR,
        }
    )
    pod_spec = {
        "affinity": _s("object", preserve=True),
        "containers": containers,
        "imagePullSecrets": _s(
            "array", items=_obj({"name": _s("string", default="")}), map_keys=("name",)
        ),
        "initContainers": containers,
        "nodeSelector": _STR_MAP,
        "schedulingGates": parts["schedulingGates"],
        "securityContext": _s("object", preserve=True),
        "serviceAccountName": _s("string", maxLength=253),
        "tolerations": parts["tolerations"],
        "volumes": parts["volumes"],
    }
    if _v(version) >= (2, 3):
        pod_spec["terminationGracePeriodSeconds"] = _s("integer")
    pod_template = _obj({"metadata": meta, "spec": _obj(pod_spec)})
    job_template = _obj({"metadata": meta, "spec": _obj({"template": pod_template})})
    rjob = _obj({"name": name, "template": job_template}, ("name",))
    return _obj(
        {
            "template": _obj(
                {
                    "metadata": meta,
                    "spec": _obj({"replicatedJobs": _s("array", items=rjob, map_keys=("name",))}),
                }
            )
        }
    )


def _pod_spec_overrides(version: str) -> dict:
    """v2.0 ``spec.podSpecOverrides[]`` (pkg/apis/trainer/v1alpha1/trainjob_types.go, v2.0.1)."""
    parts = _override_schemas(version)
    return _s("array", items=_obj(parts, ("targetJobs",)))


def _pod_template_overrides(version: str) -> dict:
    """v2.1 ``spec.podTemplateOverrides[]`` (trainjob_types.go, v2.1.0)."""
    parts = _override_schemas(version)
    spec = {k: v for k, v in parts.items() if k != "targetJobs"}
    spec["affinity"] = _s("object", preserve=True)
    spec["imagePullSecrets"] = _s(
        "array", items=_obj({"name": _s("string", default="")}), map_keys=("name",)
    )
    metadata = _obj(
        {
            "annotations": _STR_MAP,
            "finalizers": _s("array", items=_STR),
            "labels": _STR_MAP,
            "name": _STR,
            "namespace": _STR,
        }
    )
    return _s(
        "array",
        items=_obj(
            {"targetJobs": parts["targetJobs"], "metadata": metadata, "spec": _obj(spec)},
            ("targetJobs",),
        ),
    )


def _limited(version: str, floor: tuple[int, int], node: dict, **limits: Any) -> dict:
    """``node`` with ``limits`` (maxLength, minLength, maxItems) from Trainer ``floor`` on."""
    return {**node, **limits} if _v(version) >= floor else node


def _spec_schema(version: str) -> dict:
    """``spec`` of the TrainJob CRD of Trainer ``version`` (manifests/base/crds at its tag)."""
    v22 = (2, 2)
    immutable = "field is immutable"
    env = _env_schema(version)
    arg_len = 1048576 if _v(version) >= (2, 3) else 65536
    strings = _limited(
        version,
        v22,
        _s("array", items=_limited(version, v22, _STR, maxLength=arg_len)),
        maxItems=128,
    )
    storage_uri = _limited(version, v22, _STR, maxLength=2048)
    if _v(version) >= (2, 3):
        storage_uri = {**storage_uri, "rules": [_STORAGE_URI_RULE]}
    model_or_dataset = _obj(
        {
            "env": env,
            "secretRef": _obj({"name": _s("string", default="")}),
            "storageUri": storage_uri,
        }
    )
    managed_by = _limited(
        version,
        v22,
        _s("string", default="trainer.kubeflow.org/trainjob-controller", rules=[_MANAGED_BY_RULE]),
        maxLength=253,
    )
    runtime_ref_name = _s("string", minLength=1) if _v(version) >= (2, 1) else _STR
    props: dict[str, dict] = {
        "initializer": _obj({"dataset": model_or_dataset, "model": model_or_dataset}),
        "managedBy": managed_by,
        "runtimeRef": _obj(
            {
                "apiGroup": _limited(version, v22, _s("string", default=GROUP), maxLength=253),
                "kind": _limited(
                    version, v22, _s("string", default="ClusterTrainingRuntime"), maxLength=253
                ),
                "name": _limited(version, v22, runtime_ref_name, maxLength=253),
            },
            ("name",),
        ),
        "suspend": _s("boolean", default=False),
        "trainer": _obj(
            {
                "args": strings,
                "command": strings,
                "env": env,
                "image": _limited(version, v22, _STR, maxLength=500),
                "numNodes": _INT32,
                # int-or-string ("auto", "cpu", "gpu") before v2.2
                "numProcPerNode": _INT32 if _v(version) >= v22 else _s(None, int_or_string=True),
                "resourcesPerNode": _obj(
                    {
                        "claims": _s(
                            "array",
                            map_keys=("name",),
                            items=_obj({"name": _STR, "request": _STR}, ("name",)),
                        ),
                        "limits": _s("object", additional=_QUANTITY),
                        "requests": _s("object", additional=_QUANTITY),
                    }
                ),
            }
        ),
    }
    if _v(version) >= v22:
        props["activeDeadlineSeconds"] = _s("integer", minimum=1)
        props["runtimePatches"] = _s(
            "array",
            maxItems=16,
            map_keys=("manager",),
            items=_obj(
                {
                    "manager": _s("string", minLength=1, maxLength=253),
                    "time": _s("string", format="date-time"),
                    "trainingRuntimeSpec": _training_runtime_spec_patch(version),
                },
                ("manager",),
            ),
        )
        for field in ("runtimeRef", "initializer", "trainer", "activeDeadlineSeconds", "managedBy"):
            props[field] = {**props[field], "immutable": immutable}
    else:  # v2.0 / v2.1: removed in v2.2 (reference.md section 1)
        props["labels"] = _STR_MAP
        props["annotations"] = _STR_MAP
        if _v(version) >= (2, 1):
            props["podTemplateOverrides"] = _pod_template_overrides(version)
        else:
            props["podSpecOverrides"] = _pod_spec_overrides(version)
        props["runtimeRef"] = {**props["runtimeRef"], "immutable": "runtimeRef is immutable"}
        props["managedBy"] = {**props["managedBy"], "immutable": "ManagedBy value is immutable"}
    return _obj(dict(sorted(props.items())), ("runtimeRef",))


_ROOT_RULES: list[Rule] = [
    (
        lambda v: re.search(DNS1035_PATTERN, v["metadata"]["name"]) is not None,
        "metadata.name must match RFC 1035 DNS label format",
    ),
    (
        lambda v: len(v["metadata"]["name"]) <= 63,
        "metadata.name must be no more than 63 characters",
    ),
]


def _trainjob_schema(version: str) -> dict:
    """The whole TrainJob schema of Trainer ``version``; the metadata.name CEL rules came with
    v2.1."""
    root = _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _s("object", object_meta=True),
            "spec": _spec_schema(version),
            "status": _s("object", preserve=True),
        },
    )
    if _v(version) >= (2, 1):
        root["rules"] = _ROOT_RULES
    return root


SCHEMA_VERSIONS = ("2.0", "2.1", "2.2", "2.3")
DEFAULT_VERSION = "2.3"
TRAINJOB_SCHEMAS = {version: _trainjob_schema(version) for version in SCHEMA_VERSIONS}
TRAINJOB_SCHEMA = TRAINJOB_SCHEMAS[DEFAULT_VERSION]
# The Trainer version whose schema validate_trainjob serves when none is passed: the local
# cluster sets it in its server thread (LocalCluster(trainer_version=...)).
SERVED_VERSION: contextvars.ContextVar[str] = contextvars.ContextVar(
    "trainjob_schema_version", default=DEFAULT_VERSION
)


def immutable_fields(version: str) -> dict[str, str]:
    """spec field -> the message of its ``self == oldSelf`` rule in the CRD of ``version``."""
    spec = TRAINJOB_SCHEMAS[version]["properties"]["spec"]["properties"]
    return {k: node["immutable"] for k, node in spec.items() if "immutable" in node}


def schema_for(version: str | None = None) -> dict:
    """The compact TrainJob schema of Trainer ``version`` (default: the served one)."""
    version = version or SERVED_VERSION.get()
    if version not in TRAINJOB_SCHEMAS:
        raise ValueError(f"no TrainJob schema for Trainer {version!r}; have {SCHEMA_VERSIONS}")
    return TRAINJOB_SCHEMAS[version]


# --- passes: prune, default, validate, CEL ----------------------------------------------


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _prune(node: dict, value: Any, path: str, warnings: list[str]) -> Any:
    """Drop unknown fields (adding a warning each) and nulls, in place; return value.

    Integral floats in integer fields become ints (JSON 2.0 is stored as 2).
    """
    integral = isinstance(value, float) and value.is_integer()
    if integral and (node.get("type") == "integer" or node.get("int_or_string")):
        return int(value)
    if node.get("preserve"):
        return value
    if isinstance(value, list) and "items" in node:
        return [_prune(node["items"], v, _join(path, i), warnings) for i, v in enumerate(value)]
    if not isinstance(value, dict) or node.get("type") != "object":
        return value
    props = node.get("properties", {})
    for key in list(value):
        child = props.get(key, node.get("additional"))
        child_path = _join(path, key)
        if node.get("object_meta"):
            if key not in _OBJECT_META_FIELDS:
                warnings.append(f'unknown field "{child_path}"')
                del value[key]
        elif child is None:
            if node.get("loose"):
                continue  # kept as sent (see _override_schemas)
            warnings.append(f'unknown field "{child_path}"')
            del value[key]
        elif value[key] is None:
            del value[key]
        else:
            value[key] = _prune(child, value[key], child_path, warnings)
    return value


def _default(node: dict, value: Any) -> None:
    """Apply schema defaults in place (only under objects that exist)."""
    if isinstance(value, list) and "items" in node:
        for item in value:
            _default(node["items"], item)
        return
    if not isinstance(value, dict) or node.get("preserve"):
        return
    for key, child in node.get("properties", {}).items():
        if key not in value and "default" in child:
            value[key] = copy.deepcopy(child["default"])
        if key in value:
            _default(child, value[key])
    if "additional" in node:
        for item in value.values():
            _default(node["additional"], item)


def _type_ok(expected: str, value: Any) -> bool:
    actual = _type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _validate(node: dict, value: Any, path: str, causes: list[dict]) -> None:
    """Structural-schema validation (kube-openapi wording) of one node, recursively."""
    expected = node.get("type")
    if node.get("int_or_string"):
        if _type_name(value) not in ("integer", "string"):
            detail = (
                f"{path} in body must be of type integer,string: {json.dumps(_type_name(value))}"
            )
            causes.append(_cause(_TYPE_INVALID, path, _type_name(value), detail))
            return
    elif expected and not _type_ok(expected, value):
        detail = f"{path} in body must be of type {expected}: {json.dumps(_type_name(value))}"
        causes.append(_cause(_TYPE_INVALID, path, _type_name(value), detail))
        return
    if isinstance(value, str):
        _validate_string(node, value, path, causes)
    elif _type_name(value) == "integer" and "minimum" in node and value < node["minimum"]:
        detail = f"{path} in body should be greater than or equal to {node['minimum']}"
        causes.append(_cause("FieldValueInvalid", path, value, detail))
    elif isinstance(value, list):
        _validate_list(node, value, path, causes)
    elif isinstance(value, dict) and not node.get("preserve") and not node.get("object_meta"):
        for key in node.get("required", ()):
            if key not in value:
                causes.append(_cause("FieldValueRequired", _join(path, key)))
        props = node.get("properties", {})
        for key, item in value.items():
            child = props.get(key, node.get("additional"))
            if child is not None:
                _validate(child, item, _join(path, key), causes)


def _validate_string(node: dict, value: str, path: str, causes: list[dict]) -> None:
    if "maxLength" in node and len(value) > node["maxLength"]:
        detail = f"may not be more than {node['maxLength']} bytes"
        causes.append(_cause("FieldValueTooLong", path, value, detail))
    if "minLength" in node and len(value) < node["minLength"]:
        detail = f"{path} in body should be at least {node['minLength']} chars long"
        causes.append(_cause("FieldValueInvalid", path, value, detail))
    if "pattern" in node and not re.search(node["pattern"], value):
        detail = f"{path} in body should match '{node['pattern']}'"
        causes.append(_cause("FieldValueInvalid", path, value, detail))
    if node.get("format") == "date-time" and not _RFC3339.match(value):
        detail = f"{path} in body must be of type date-time: {json.dumps(value)}"
        causes.append(_cause(_TYPE_INVALID, path, value, detail))


def _validate_list(node: dict, value: list, path: str, causes: list[dict]) -> None:
    if "maxItems" in node and len(value) > node["maxItems"]:
        detail = f"must have at most {node['maxItems']} items"
        causes.append(_cause("FieldValueTooMany", path, len(value), detail))
    seen: list[dict] = []
    for index, item in enumerate(value):
        item_path = _join(path, index)
        _validate(node["items"], item, item_path, causes)
        if node.get("map_keys") and isinstance(item, dict):
            key = {k: item.get(k) for k in node["map_keys"]}
            if key in seen:
                causes.append(_cause("FieldValueDuplicate", item_path, key))
            seen.append(key)


def _cel(node: dict, value: Any, path: str, causes: list[dict]) -> None:
    """Evaluate the node's CEL-equivalent rules (``Invalid value: "<type>": message``)."""
    for check, message in node.get("rules", ()):
        try:
            ok = check(value)
        except (KeyError, TypeError):
            ok = True  # the rule does not apply to a shape the schema already rejected
        if not ok:
            causes.append(_cause("FieldValueInvalid", path, _type_name(value), message))
    if isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            _cel(node["items"], item, _join(path, index), causes)
    elif isinstance(value, dict) and not node.get("preserve"):
        props = node.get("properties", {})
        for key, item in value.items():
            child = props.get(key, node.get("additional"))
            if child is not None:
                _cel(child, item, _join(path, key), causes)


# --- ObjectMeta and TypeMeta (apiserver built-ins, not in the CRD) ----------------------


def _check_type_meta(body: dict) -> list[dict]:
    causes = []
    if body.get("kind") != KIND:
        causes.append(_cause("FieldValueInvalid", "kind", body.get("kind", ""), f"must be {KIND}"))
    if body.get("apiVersion") != API_VERSION:
        detail = f"must be {API_VERSION}"
        causes.append(_cause("FieldValueInvalid", "apiVersion", body.get("apiVersion", ""), detail))
    return causes


def _qualified_name_errors(key: str) -> list[str]:
    """apimachinery IsQualifiedName messages for a label or annotation key."""
    prefix, _, name = key.rpartition("/")
    errs = []
    if key.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            f"'123-abc', regex used for validation is '{_QUALIFIED_NAME}') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if "/" in key:
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in _subdomain_errors(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not re.fullmatch(_QUALIFIED_NAME, name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            f"'123-abc', regex used for validation is '{_QUALIFIED_NAME}')"
        )
    return errs


def _subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not re.fullmatch(_DNS1123_SUBDOMAIN, value):
        errs.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character (e.g. "
            f"'example.com', regex used for validation is '{_DNS1123_SUBDOMAIN}')"
        )
    return errs


def _check_string_map(meta: dict, key: str, causes: list[dict]) -> bool:
    """Type-check metadata.labels / annotations (map of string to string)."""
    value = meta.get(key)
    if value is None:
        return False
    path = f"metadata.{key}"
    if not isinstance(value, dict):
        detail = f"{path} in body must be of type object: {json.dumps(_type_name(value))}"
        causes.append(_cause(_TYPE_INVALID, path, _type_name(value), detail))
        return False
    ok = True
    for k, v in value.items():
        if not isinstance(v, str):
            p = f"{path}.{k}"
            detail = f"{p} in body must be of type string: {json.dumps(_type_name(v))}"
            causes.append(_cause(_TYPE_INVALID, p, _type_name(v), detail))
            ok = False
    return ok


def _check_object_meta(meta: Any) -> list[dict]:
    """apimachinery ValidateObjectMeta for a namespaced custom resource (create)."""
    if not isinstance(meta, dict):
        detail = f"metadata in body must be of type object: {json.dumps(_type_name(meta))}"
        return [_cause(_TYPE_INVALID, "metadata", _type_name(meta), detail)]
    causes: list[dict] = []
    name, generate = meta.get("name"), meta.get("generateName")
    if not name and not generate:
        causes.append(
            _cause("FieldValueRequired", "metadata.name", detail="name or generateName is required")
        )
    for field in ("name", "generateName"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            detail = (
                f"metadata.{field} in body must be of type string: {json.dumps(_type_name(value))}"
            )
            causes.append(_cause(_TYPE_INVALID, f"metadata.{field}", _type_name(value), detail))
        elif value:
            check = value + "x" if field == "generateName" else value
            for msg in _subdomain_errors(check):
                causes.append(_cause("FieldValueInvalid", f"metadata.{field}", value, msg))
    if _check_string_map(meta, "labels", causes):
        for key, value in meta["labels"].items():
            for msg in _qualified_name_errors(key):
                causes.append(_cause("FieldValueInvalid", "metadata.labels", key, msg))
            if len(value) > 63:
                msg = "must be no more than 63 characters"
                causes.append(_cause("FieldValueInvalid", "metadata.labels", value, msg))
            if not re.fullmatch(_LABEL_VALUE, value):
                msg = (
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                    "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                    f"'{_LABEL_VALUE}')"
                )
                causes.append(_cause("FieldValueInvalid", "metadata.labels", value, msg))
    if _check_string_map(meta, "annotations", causes):
        total = 0
        for key, value in meta["annotations"].items():
            for msg in _qualified_name_errors(key.lower()):
                causes.append(_cause("FieldValueInvalid", "metadata.annotations", key, msg))
            total += len(key) + len(value)
        if total > _ANNOTATIONS_MAX_BYTES:
            detail = f"may not be more than {_ANNOTATIONS_MAX_BYTES} bytes"
            causes.append(_cause("FieldValueTooLong", "metadata.annotations", "", detail))
    return causes


def _effective_name(meta: dict) -> dict:
    """The object as CEL sees it: a generateName-only object gets a generated-looking name."""
    if (
        isinstance(meta, dict)
        and not meta.get("name")
        and isinstance(meta.get("generateName"), str)
    ):
        return {**meta, "name": meta["generateName"] + "x0000"}
    return meta


# --- public API -------------------------------------------------------------------------


def validate_trainjob(body: dict, version: str | None = None) -> tuple[dict, list[str]]:
    """Validate a TrainJob for create against the CRD of Trainer ``version`` (default: the
    served one, SERVED_VERSION); return (pruned + defaulted copy, warnings).

    Raises SchemaError with the causes a real apiserver would give (422 Invalid).
    """
    schema = schema_for(version)
    if not isinstance(body, dict):
        raise SchemaError([_cause(_TYPE_INVALID, "", _type_name(body), "must be an object")])
    causes = _check_type_meta(body)
    if causes:
        raise SchemaError(causes)
    warnings: list[str] = []
    obj = _prune(schema, copy.deepcopy(body), "", warnings)
    _default(schema, obj)
    causes = _check_object_meta(obj.get("metadata", {}))
    _validate(schema, obj, "", causes)
    if any(c["reason"] in (_TYPE_INVALID, _NOT_SUPPORTED) for c in causes):
        detail = (
            "some validation rules were not checked because the object was invalid; "
            "correct the existing errors to complete validation"
        )
        causes.append(_cause("FieldValueInvalid", "", None, detail))
    else:
        view = {**obj, "metadata": _effective_name(obj.get("metadata", {}))}
        if view["metadata"].get("name"):
            _cel(schema, view, "", causes)
    if causes:
        raise SchemaError(causes)
    return obj, warnings


def validate_trainjob_update(
    old: dict, new: dict, version: str | None = None
) -> tuple[dict, list[str]]:
    """Validate an update: ``new`` as on create, plus the CRD's immutable-field rules (those of
    Trainer ``version``, default the served one).

    ``old`` is the stored (already defaulted) object. Returns (pruned copy of new, warnings).
    """
    version = version or SERVED_VERSION.get()
    causes: list[dict] = []
    try:
        obj, warnings = validate_trainjob(new, version)
    except SchemaError as err:
        causes, obj, warnings = err.causes, None, []
    if obj is not None:
        old_spec = old.get("spec") or {}
        new_spec = obj.get("spec") or {}
        for field, message in immutable_fields(version).items():
            # Transition rules (self == oldSelf) run only when both old and new have the field.
            if field in old_spec and field in new_spec and old_spec[field] != new_spec[field]:
                path = f"spec.{field}"
                causes.append(
                    _cause("FieldValueInvalid", path, _type_name(new_spec[field]), message)
                )
        causes += _patched_pod_spec_changes(old_spec, new_spec, version)
    if causes:
        raise SchemaError(causes)
    return obj, warnings


# The CRD's `self == oldSelf` rules on a runtimePatch's pod spec (Trainer 2.2+,
# pkg/apis/trainer/v1alpha1/trainjob_types.go RuntimePatch PodSpecPatch markers); runtimePatches
# are a list map keyed by manager and replicatedJobs by name, so only items present in both the
# old and the new object line up for the transition rules.
PATCHED_POD_IMMUTABLE = (
    "containers",
    "initContainers",
    "imagePullSecrets",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "volumes",
)


def _replicated_jobs(patch: dict) -> list[dict]:
    spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("replicatedJobs") or [])


def _pod_spec_of(rjob: dict) -> dict:
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    return ((job_spec.get("template") or {}).get("spec")) or {}


def _patched_pod_spec_changes(old_spec: dict, new_spec: dict, version: str) -> list[dict]:
    if version not in ("2.2", "2.3"):
        return []
    old_patches = {p.get("manager"): p for p in old_spec.get("runtimePatches") or []}
    causes = []
    for i, patch in enumerate(new_spec.get("runtimePatches") or []):
        before = old_patches.get(patch.get("manager"))
        if before is None:
            continue
        old_jobs = {r.get("name"): r for r in _replicated_jobs(before)}
        for j, rjob in enumerate(_replicated_jobs(patch)):
            if rjob.get("name") not in old_jobs:
                continue
            new_pod, old_pod = _pod_spec_of(rjob), _pod_spec_of(old_jobs[rjob.get("name")])
            for field in PATCHED_POD_IMMUTABLE:
                if field in new_pod and field in old_pod and new_pod[field] != old_pod[field]:
                    path = (
                        f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec."
                        f"replicatedJobs[{j}].template.spec.template.spec.{field}"
                    )
                    causes.append(
                        _cause(
                            "FieldValueInvalid",
                            path,
                            _type_name(new_pod[field]),
                            "field is immutable",
                        )
                    )
    return causes
