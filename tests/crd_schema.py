"""Validate objects against the real upstream CRDs, as a Kubernetes apiserver would.

The CRDs come from the k8s data dir (``tests/helpers/k8s_data.py``: ``$TRAINJOB_MAGICS_K8S_DATA``
or ``<repo>/../shared/k8s``), one folder per release (``trainer-v2.0.1`` ... ``trainer-v2.3.0``,
``kueue-v0.14.0`` ... ``kueue-main``). Every loader calls ``require_k8s_data()``, so a test
that reaches one skips (or, under CI, fails) with one clear line when the data is missing.

``CrdValidator`` follows the apiserver's order for a custom resource
(k8s.io/apiextensions-apiserver pkg/registry/customresource/strategy.go):

1. defaults from the schema are applied (``default(schema, obj)``);
2. the structural schema is checked with jsonschema (Draft 7, whose "integer" accepts 1.0
   like kube-openapi), plus the Kubernetes extensions: ``nullable``,
   ``x-kubernetes-int-or-string``, ``x-kubernetes-list-type`` map/set, ``format: date-time``;
3. when a type, enum or format error was found, the CEL rules are not run and one error
   "some validation rules were not checked ..." is added at the root, as the server does;
4. otherwise every ``x-kubernetes-validations`` rule is run by a real CEL runtime
   (``tests/helpers/cel.py``). Transition rules (``oldSelf``) run only for an update
   (``iter_errors(new, old=...)``) and where the old value correlates. A rule that cannot be
   compiled raises ``CelCompileError``: never skipped.

``prune(schema, obj)`` mirrors the apiserver's pruning of unknown fields and of ``null`` in
non-nullable fields, and returns the unknown paths worded like the server's warnings.
``problems(plural, obj, old, release=...)`` does all of it for the CRD version the object's
apiVersion names (converting Kueue v1beta2 to v1beta1 for a release that serves only v1beta1).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.helpers.cel import CelEvalError, compile_rule
from tests.helpers.k8s_data import k8s_data_dir, release_key, require_k8s_data

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

OBJECT_META_FIELDS = frozenset(
    {
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
    }
)
BLOCKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)

# --- the CRDs ---------------------------------------------------------------------------


@functools.cache
def _index(root: Path) -> dict[str, dict[str, Path]]:
    """release -> {CRD plural -> file}, for every ``<release>/crds/*.yaml`` under root."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(root.glob("*/crds/*.yaml")):
        doc = yaml.load(path.read_text(), Loader=_LOADER)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            found.setdefault(path.parent.parent.name, {})[doc["spec"]["names"]["plural"]] = path
    return dict(sorted(found.items(), key=lambda item: release_key(item[0])))


def crd_index() -> dict[str, dict[str, Path]]:
    """release -> {plural -> CRD file}; skips the test when the data is missing."""
    return _index(require_k8s_data())


def newest_release(plural: str) -> str:
    """The newest release that has CRD ``plural`` (trainer-v2.3.0, kueue-main)."""
    have = [release for release, crds in crd_index().items() if plural in crds]
    if not have:
        raise KeyError(f"no CRD with plural {plural!r} under {k8s_data_dir()}")
    return have[-1]


@functools.cache
def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_LOADER)


def load_crd(name: str, release: str | None = None) -> dict:
    """The whole CRD whose plural is ``name`` (e.g. "trainjobs"), of ``release`` or the newest."""
    release = release or newest_release(name)
    crds = crd_index().get(release, {})
    if name not in crds:
        raise KeyError(f"release {release} has no CRD {name!r}; has {sorted(crds)}")
    return _load(crds[name])


def served_versions(name: str, release: str | None = None) -> list[str]:
    return [v["name"] for v in load_crd(name, release)["spec"]["versions"] if v.get("served")]


def load_crd_schema(name: str, version: str | None = None, release: str | None = None) -> dict:
    """The ``openAPIV3Schema`` of the storage version (or ``version``) of CRD ``name``."""
    for ver in load_crd(name, release)["spec"]["versions"]:
        if (version is None and ver.get("storage")) or ver["name"] == version:
            return copy.deepcopy(ver["schema"]["openAPIV3Schema"])
    raise KeyError(f"CRD {name} of {release or 'the newest release'} has no version {version!r}")


# --- jsonschema keywords for the Kubernetes extensions ----------------------------------

_DRAFT7_TYPE = jsonschema.Draft7Validator.VALIDATORS["type"]


def _type(validator, types, instance, schema) -> Iterator[jsonschema.ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    yield from _DRAFT7_TYPE(validator, types, instance, schema)


def _int_or_string(validator, flag, instance, schema) -> Iterator[jsonschema.ValidationError]:
    if flag and "anyOf" not in schema:
        ok = isinstance(instance, str) or validator.is_type(instance, "integer")
        if not ok and not (instance is None and schema.get("nullable")):
            yield jsonschema.ValidationError(f"{instance!r} is not an integer or string")


def _list_type(validator, kind, instance, schema) -> Iterator[jsonschema.ValidationError]:
    if not isinstance(instance, list):
        return
    seen: list[Any] = []
    for index, item in enumerate(instance):
        if kind == "map":
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in schema.get("x-kubernetes-list-map-keys", []))
        elif kind == "set":
            key = item
        else:
            return
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key!r}", path=[index])
        seen.append(key)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    rfc3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or bool(rfc3339.match(value))

    return checker


# x-kubernetes-validations is not a jsonschema keyword here: CrdValidator runs the CEL rules
# itself, after the schema passes, with the old object at hand for transition rules.
K8sSchemaValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {
        "type": _type,
        "x-kubernetes-int-or-string": _int_or_string,
        "x-kubernetes-list-type": _list_type,
    },
)


def _blocking(error: jsonschema.ValidationError) -> bool:
    """kube-openapi's TypeInvalid (type, format) and NotSupported (enum) block the CEL rules.
    A value that fits no branch of an int-or-string ``anyOf`` by type is a type error too."""
    if error.validator in ("type", "enum", "format", "x-kubernetes-int-or-string"):
        return True
    if error.validator == "anyOf":
        return bool(error.context) and all(e.validator == "type" for e in error.context)
    return False


# --- defaulting -------------------------------------------------------------------------


def default(schema: dict, obj: Any) -> Any:
    """A copy of ``obj`` with the schema's defaults filled in, as the apiserver stores it."""
    return _default(schema, copy.deepcopy(obj))


def _default(schema: dict, obj: Any) -> Any:
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                obj[key] = _default(sub, value)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [_default(schema["items"], item) for item in obj]
    elif isinstance(obj, float) and schema.get("type") == "integer" and obj.is_integer():
        return int(obj)  # the apiserver decodes an integral JSON number into an int64
    return obj


# --- CEL rules --------------------------------------------------------------------------

_ABSENT = object()


def _cel_view(obj: Any) -> Any:
    """The root object as CEL sees it: ``metadata`` exposes only name and generateName."""
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "generateName")}
        return {**obj, "metadata": meta}
    return obj


def cel_errors(schema: dict, obj: Any, old: Any = _ABSENT) -> list[jsonschema.ValidationError]:
    """Every CEL rule of ``schema`` that ``obj`` breaks (``old``: the stored object, for an
    update). Both are taken as already defaulted."""
    out: list[jsonschema.ValidationError] = []
    _walk_rules(schema, _cel_view(obj), _ABSENT if old is _ABSENT else _cel_view(old), [], out)
    return out


def _walk_rules(schema: dict, value: Any, old: Any, path: list, out: list) -> None:
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        compiled = compile_rule(rule)  # raises CelCompileError: never skipped
        if compiled.transition and old is _ABSENT:
            continue  # a transition rule runs only on an update, with a correlated old value
        old_value = old if compiled.transition else None
        try:
            ok = compiled.evaluate(value, old_value)
        except CelEvalError as err:
            message = f"{err} evaluating rule: {compiled.text}"
        else:
            if ok:
                continue
            message = compiled.failure_message(value, old_value)
        out.append(
            jsonschema.ValidationError(
                message,
                path=list(path),
                validator="x-kubernetes-validations",
                validator_value=rule,
                instance=value,
            )
        )
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                old_child = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
                _walk_rules(sub, child, old_child, [*path, key], out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        old_items = _correlate(schema, old)
        for index, item in enumerate(value):
            old_item = old_items.get(_map_key(schema, item), _ABSENT) if old_items else _ABSENT
            _walk_rules(schema["items"], item, old_item, [*path, index], out)


def _map_key(schema: dict, item: Any) -> tuple | None:
    if not isinstance(item, dict):
        return None
    return tuple(item.get(k) for k in schema.get("x-kubernetes-list-map-keys", []))


def _correlate(schema: dict, old: Any) -> dict[tuple | None, Any]:
    """Old items by map key: only ``x-kubernetes-list-type: map`` lists correlate."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return {}
    return {_map_key(schema, item): item for item in old}


# --- the validator ----------------------------------------------------------------------


class CrdValidator:
    """Schema plus CEL rules of one CRD version, in the apiserver's order."""

    def __init__(self, schema: dict) -> None:
        self.schema = schema
        self._schema = K8sSchemaValidator(schema, format_checker=_format_checker())

    def iter_errors(self, obj: Any, old: Any = None) -> Iterator[jsonschema.ValidationError]:
        """Errors for a create (``old`` None) or an update of ``old`` (the stored object)."""
        obj = default(self.schema, obj)
        errors = list(self._schema.iter_errors(obj))
        yield from errors
        if any(_blocking(e) for e in errors):
            yield jsonschema.ValidationError(BLOCKED, validator="blocked", instance=obj)
            return
        stored = _ABSENT if old is None else default(self.schema, old)
        yield from cel_errors(self.schema, obj, stored)

    def is_valid(self, obj: Any, old: Any = None) -> bool:
        return next(self.iter_errors(obj, old), None) is None


@functools.cache
def _validator(name: str, version: str | None, release: str | None) -> CrdValidator:
    return CrdValidator(load_crd_schema(name, version, release))


def crd_validator(
    name: str, version: str | None = None, release: str | None = None
) -> CrdValidator:
    """The validator of CRD ``name`` (plural): ``version`` (default storage) of ``release``
    (default newest)."""
    return _validator(name, version, release or newest_release(name))


def field_path(error: jsonschema.ValidationError) -> str:
    """The apiserver-style field path of an error ("<nil>" for the root).

    A ``required`` error points at the missing child, as the apiserver's does.
    """
    parts = list(error.absolute_path)
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in (error.instance or {})]
        parts.append(missing[0] if missing else "?")
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<nil>"


def error_paths(name: str, obj: Any, old: Any = None, release: str | None = None) -> set[str]:
    """Field paths of every error CRD ``name`` finds in ``obj`` (after pruning)."""
    pruned, _ = prune(load_crd_schema(name, release=release), obj)
    return {field_path(e) for e in crd_validator(name, release=release).iter_errors(pruned, old)}


# --- one object against one release -----------------------------------------------------


def kueue_v1beta2_to_v1beta1(plural: str, obj: dict) -> dict:
    """Kueue's own v1beta2 -> v1beta1 conversion: field renames only
    (apis/kueue/v1beta1/{workload,clusterqueue,localqueue}_conversion.go, Kueue main)."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    spec, status = out.get("spec") or {}, out.get("status") or {}
    if plural == "workloads":
        ref = spec.pop("priorityClassRef", None)
        if ref:
            source = {
                ("kueue.x-k8s.io", "WorkloadPriorityClass"): "kueue.x-k8s.io/workloadpriorityclass",
                ("scheduling.k8s.io", "PriorityClass"): "scheduling.k8s.io/priorityclass",
            }.get((ref.get("group"), ref.get("kind")))
            if source:
                spec["priorityClassSource"] = source
                spec["priorityClassName"] = ref.get("name")
        if "accumulatedPastExecutionTimeSeconds" in status:
            past = status.pop("accumulatedPastExecutionTimeSeconds")
            status["accumulatedPastExexcutionTimeSeconds"] = past  # sic, v1beta1's spelling
    elif plural == "clusterqueues" and "cohortName" in spec:
        spec["cohort"] = spec.pop("cohortName")
    elif plural == "localqueues" and "flavorsUsage" in status:
        status["flavorUsage"] = status.pop("flavorsUsage")
    return out


def as_served(plural: str, obj: dict, release: str) -> tuple[dict, str]:
    """``obj`` in a version that ``release`` serves, and that version: the one its apiVersion
    names, or Kueue's v1beta1 for a v1beta2 object on a release without v1beta2 (v0.14)."""
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    served = served_versions(plural, release)
    if version in served:
        return obj, version
    if version == "v1beta2" and "v1beta1" in served and plural in _KUEUE_PLURALS:
        return kueue_v1beta2_to_v1beta1(plural, obj), "v1beta1"
    raise KeyError(f"{release} serves {plural} in {served}, not {version!r}")


_KUEUE_PLURALS = ("workloads", "clusterqueues", "localqueues", "resourceflavors")


def check(
    plural: str, obj: dict, old: dict | None = None, release: str | None = None
) -> tuple[str, list[str], list[tuple[str, str]]]:
    """``obj`` (an update of ``old`` when given) on the apiserver of ``release``: the version
    it is validated in, the fields the server would drop, and the errors as (path, message)."""
    release = release or newest_release(plural)
    obj, version = as_served(plural, obj, release)
    if old is not None:
        old, _ = as_served(plural, old, release)
    schema = load_crd_schema(plural, version, release)
    pruned, warnings = prune(schema, obj)
    old_pruned = prune(schema, old)[0] if old is not None else None
    validator = crd_validator(plural, version, release)
    errors = [(field_path(e), e.message) for e in validator.iter_errors(pruned, old_pruned)]
    return version, warnings, errors


def problems(
    plural: str, obj: dict, old: dict | None = None, release: str | None = None
) -> list[str]:
    """What the apiserver of ``release`` would object to in ``obj`` (an update of ``old``
    when given): fields it would drop, and validation errors as ``path: message``."""
    release = release or newest_release(plural)
    version, warnings, errors = check(plural, obj, old, release)
    return [f"{release} {version}: {w}" for w in warnings + [f"{p}: {m}" for p, m in errors]]


def releases_with(plural: str) -> list[str]:
    """Every release (oldest first) that has CRD ``plural``."""
    return [release for release, crds in crd_index().items() if plural in crds]


def matrix_problems(
    plural: str, obj: dict, old: dict | None = None, releases: list[str] | None = None
) -> list[str]:
    """``problems`` of ``obj`` on every release that has CRD ``plural`` (or on ``releases``)."""
    out: list[str] = []
    for release in releases if releases is not None else releases_with(plural):
        out += problems(plural, obj, old, release)
    return out


# --- every rule -------------------------------------------------------------------------


def rules_of(schema: dict, path: str = "") -> Iterator[tuple[str, dict, dict]]:
    """(path, schema node, rule) for every ``x-kubernetes-validations`` rule under ``schema``."""
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, schema, rule
    for key, sub in (schema.get("properties") or {}).items():
        yield from rules_of(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from rules_of(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rules_of(schema["additionalProperties"], f"{path}{{}}")


# --- pruning ----------------------------------------------------------------------------


def prune(schema: dict, obj: Any) -> tuple[Any, list[str]]:
    """Drop unknown fields and non-nullable nulls like the apiserver; return (copy, warnings)."""
    warnings: list[str] = []
    return _prune(schema, copy.deepcopy(obj), "", warnings, root=True), warnings


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(schema: dict, obj: Any, path: str, warnings: list[str], root: bool = False) -> Any:
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return obj
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [
            _prune(schema["items"], item, f"{path}[{i}]", warnings) for i, item in enumerate(obj)
        ]
    if not isinstance(obj, dict) or schema.get("type") not in ("object", None):
        return obj
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    embedded = root or schema.get("x-kubernetes-embedded-resource")
    for key in list(obj):
        child_path = _join(path, key)
        if embedded and key in ("apiVersion", "kind"):
            continue
        if embedded and key == "metadata" and isinstance(obj[key], dict):
            for meta_key in list(obj[key]):
                if meta_key not in OBJECT_META_FIELDS:
                    warnings.append(f'unknown field "{child_path}.{meta_key}"')
                    del obj[key][meta_key]
            continue
        sub = props.get(key, extra if isinstance(extra, dict) else None)
        if sub is None:
            if extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            warnings.append(f'unknown field "{child_path}"')
            del obj[key]
        elif obj[key] is None and not sub.get("nullable"):
            del obj[key]
        else:
            obj[key] = _prune(sub, obj[key], child_path, warnings)
    return obj
