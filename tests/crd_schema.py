"""Validate objects against the real CRDs in ``<repo>/../shared`` with jsonschema.

The CRDs' ``openAPIV3Schema`` is a Kubernetes *structural* schema. jsonschema (Draft 7,
whose "integer" accepts 1.0 like kube-openapi does) understands most of it; this module adds
the Kubernetes extensions as extra keywords:

- ``nullable``: ``null`` passes the type check;
- ``x-kubernetes-int-or-string``: integer or string;
- ``x-kubernetes-list-type`` ``map`` / ``set``: unique map keys / unique items;
- ``x-kubernetes-validations``: a small CEL subset (the rule shapes used by the Trainer CRDs).
  Transition rules (``oldSelf``) are skipped (create semantics); rules outside the subset are
  skipped and recorded in ``UNSUPPORTED_RULES``;
- ``format: date-time`` is checked (RFC 3339), other formats are not (like the apiserver).

``prune(schema, obj)`` mirrors the apiserver's pruning of unknown fields and of ``null`` in
non-nullable fields, and returns the unknown paths worded like the server's warnings.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ENV_SHARED_DIR = "TRAINJOB_MAGICS_SHARED_DIR"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
UNSUPPORTED_RULES: set[str] = set()

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


def shared_dir() -> Path:
    """The shared data dir: ``$TRAINJOB_MAGICS_SHARED_DIR`` or the repo root's ``../shared``."""
    env = os.environ.get(ENV_SHARED_DIR)
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared"
    if not (path / "k8s").is_dir():
        raise FileNotFoundError(
            f"shared data dir {path} not found (expected {path}/k8s/*/crds); "
            f"put the shared/ checkout beside the repo or set {ENV_SHARED_DIR}"
        )
    return path


@functools.cache
def _crd_files() -> dict[str, Path]:
    """Map CRD plural -> file, for every ``k8s/**/crds/*.yaml`` under the shared dir."""
    found: dict[str, Path] = {}
    for path in sorted(shared_dir().glob("k8s/**/crds/*.yaml")):
        doc = yaml.load(path.read_text(), Loader=_LOADER)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            found[doc["spec"]["names"]["plural"]] = path
    return found


@functools.cache
def load_crd(name: str) -> dict:
    """The whole CRD whose plural is ``name`` (e.g. "trainjobs")."""
    files = _crd_files()
    if name not in files:
        raise KeyError(f"no CRD with plural {name!r} under {shared_dir()}; have {sorted(files)}")
    return yaml.load(files[name].read_text(), Loader=_LOADER)


def load_crd_schema(name: str, version: str | None = None) -> dict:
    """The ``openAPIV3Schema`` of the storage version (or ``version``) of CRD ``name``."""
    versions = load_crd(name)["spec"]["versions"]
    for ver in versions:
        if (version is None and ver.get("storage")) or ver["name"] == version:
            return copy.deepcopy(ver["schema"]["openAPIV3Schema"])
    raise KeyError(f"CRD {name} has no version {version!r}")


# --- CEL subset -------------------------------------------------------------------------

_MISSING = object()


def _select(obj: Any, dotted: str) -> Any:
    """Follow ``.a.b`` from obj; ``_MISSING`` when a step is absent."""
    for part in filter(None, dotted.split(".")):
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _cel_eval(rule: str, value: Any) -> bool | None:
    """Evaluate a CEL rule of a known shape; None when the shape is not supported."""
    rule = rule.strip()
    if "oldSelf" in rule:
        return None
    if " || " in rule:
        parts = [_cel_eval(p, value) for p in rule.split(" || ")]
        return None if None in parts else any(parts)
    if rule == "self == ''":
        return value == ""
    m = re.fullmatch(r"self((?:\.\w+)*)\.matches\('(.*)'\)", rule)
    if m:
        target = _select(value, m.group(1))
        return True if target is _MISSING else re.search(m.group(2), target) is not None
    m = re.fullmatch(r"size\(self((?:\.\w+)*)\) <= (\d+)", rule)
    if m:
        target = _select(value, m.group(1))
        return True if target is _MISSING else len(target) <= int(m.group(2))
    m = re.fullmatch(r"self in \[(.*)\]", rule)
    if m:
        return value in re.findall(r"'([^']*)'", m.group(1))
    m = re.fullmatch(r"self >= (-?\d+)", rule)
    if m:
        return value >= int(m.group(1))
    m = re.fullmatch(r"has\(self\.(\w+)\)", rule)
    if m:
        return m.group(1) in value
    m = re.fullmatch(r"\[(.*)\]\.filter\(x, ?x(?: == true)?\)\.size\(\) (<=|==) (\d+)", rule)
    if m:
        keys = re.findall(r"has\(self\.(\w+)\)", m.group(1))
        count = sum(k in value for k in keys)
        return count <= int(m.group(3)) if m.group(2) == "<=" else count == int(m.group(3))
    m = re.fullmatch(r"!self\.exists\((\w+), \1 == '([^']*)'\)", rule)
    if m:
        return m.group(2) not in value
    return None


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


def _validations(validator, rules, instance, schema) -> Iterator[jsonschema.ValidationError]:
    for rule in rules:
        try:
            ok = _cel_eval(rule["rule"], instance)
        except (TypeError, re.error):
            ok = None
        if ok is None:
            UNSUPPORTED_RULES.add(rule["rule"])
        elif not ok:
            yield jsonschema.ValidationError(rule.get("message") or f"failed rule: {rule['rule']}")


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    rfc3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or bool(rfc3339.match(value))

    return checker


K8sValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {
        "type": _type,
        "x-kubernetes-int-or-string": _int_or_string,
        "x-kubernetes-list-type": _list_type,
        "x-kubernetes-validations": _validations,
    },
)


@functools.cache
def _validator(name: str, version: str | None) -> jsonschema.protocols.Validator:
    return K8sValidator(load_crd_schema(name, version), format_checker=_format_checker())


def crd_validator(name: str, version: str | None = None) -> jsonschema.protocols.Validator:
    """A jsonschema validator for CRD ``name`` (plural), Kubernetes extensions included."""
    return _validator(name, version)


def field_path(error: jsonschema.ValidationError) -> str:
    """The apiserver-style field path of a jsonschema error ("<nil>" for the root).

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


def error_paths(name: str, obj: Any) -> set[str]:
    """Field paths of every error CRD ``name`` finds in ``obj`` (after pruning)."""
    pruned, _ = prune(load_crd_schema(name), obj)
    return {field_path(e) for e in crd_validator(name).iter_errors(pruned)}


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
