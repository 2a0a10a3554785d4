"""A small kustomize: builds a module's own kustomization (read-only, in the Go module cache) into
plain objects, with only the features the JobSet, Trainer and Kueue release kustomizations use.

Nothing upstream is copied into this repository: the stack reads ``config/default`` (JobSet,
Kueue) and ``manifests/overlays/...`` (Trainer) at run time and transforms them here.

Supported, in kustomize's own order within one kustomization (api/internal/target/kusttarget.go
``configureBuiltinTransformers``): resources (files and folders, recursively; remote URLs are
skipped and reported), ``patches`` (strategic-merge documents merged by name, and JSON 6902
operation lists, with ``target``), ``namespace``, ``namePrefix``, ``labels``/``commonLabels``
(metadata only), ``images``, ``replacements`` (``[name=x]`` paths, ``create``), and the custom
``transformers`` the Kueue kustomization uses (``PatchTransformer``, ``PrefixSuffixTransformer``).
Name references (Service, ServiceAccount, (Cluster)Role, webhook configurations) follow renames,
as kustomize's nameReference table does. Generators (ConfigMaps, Secrets) are left out: the stack
does not deploy the managers as Deployments.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

# kustomize's PrefixSuffixTransformer skips these
# (api/filters/prefixsuffix, prefixSuffixFieldSpecsToSkip)
_NO_PREFIX = {"CustomResourceDefinition", "APIService", "Namespace"}

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
    "PriorityClass",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "StorageClass",
    "ClusterTrainingRuntime",
    "ClusterQueue",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "Cohort",
    "Topology",
    "AdmissionCheck",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass
class Build:
    objects: list[Obj] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # what was not built, and why

    def of_kind(self, *kinds: str) -> list[Obj]:
        return [o for o in self.objects if o.get("kind") in kinds]

    def get(self, kind: str, name: str) -> Obj | None:
        for o in self.objects:
            if o.get("kind") == kind and o.get("metadata", {}).get("name") == name:
                return o
        return None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are megabytes
_CACHE: dict[Path, tuple[float, list[Obj]]] = {}


def load_yaml(path: Path) -> list[Obj]:
    """The documents of a (read-only, module cache) YAML file, parsed once per process."""
    mtime = path.stat().st_mtime
    hit = _CACHE.get(path)
    if hit is None or hit[0] != mtime:
        hit = (
            mtime,
            [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if isinstance(d, dict)],
        )
        _CACHE[path] = hit
    return copy.deepcopy(hit[1])


def _kustomization_file(directory: Path) -> Path | None:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        if (directory / name).is_file():
            return directory / name
    return None


def build(directory: Path) -> Build:
    """Build the kustomization in ``directory`` (a folder of a module in the module cache)."""
    out = Build()
    out.objects = _build(Path(directory), out)
    return out


def _build(directory: Path, out: Build) -> list[Obj]:
    kfile = _kustomization_file(directory)
    if kfile is None:
        raise FileNotFoundError(f"no kustomization in {directory}")
    k = yaml.safe_load(kfile.read_text()) or {}
    objs: list[Obj] = []
    for res in k.get("resources", []) or []:
        if "://" in res:
            out.skipped.append(f"{directory}: remote resource {res}")
            continue
        path = (directory / res).resolve()
        if path.is_dir():
            objs += _build(path, out)
        else:
            objs += load_yaml(path)
    for gen in ("configMapGenerator", "secretGenerator"):
        for g in k.get(gen, []) or []:
            out.skipped.append(f"{directory}: {gen} {g.get('name')}")

    for patch in k.get("patches", []) or []:
        body = patch.get("patch")
        if body is None:
            body = (directory / patch["path"]).read_text()
        _apply_patch(objs, yaml.safe_load(body), patch.get("target"))
    for p in k.get("patchesStrategicMerge", []) or []:
        _apply_patch(
            objs,
            yaml.safe_load((directory / p).read_text()) if "\n" not in p else yaml.safe_load(p),
            None,
        )
    for p in k.get("patchesJson6902", []) or []:
        _apply_patch(objs, yaml.safe_load((directory / p["path"]).read_text()), p.get("target"))

    configs = [
        yaml.safe_load((directory / c).read_text()) or {} for c in k.get("configurations", []) or []
    ]
    if k.get("namespace"):
        _set_namespace(objs, k["namespace"], configs)
    if k.get("namePrefix"):
        _prefix(objs, k["namePrefix"])
    labels: dict[str, str] = dict(k.get("commonLabels") or {})
    for entry in k.get("labels", []) or []:
        labels.update(entry.get("pairs") or {})
    if labels:
        for o in objs:
            o.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    for image in k.get("images", []) or []:
        _image(objs, image)
    for rep in k.get("replacements", []) or []:
        _replacement(objs, rep)
    for t in k.get("transformers", []) or []:
        for doc in load_yaml(directory / t):
            _custom_transformer(objs, doc)
    return objs


# --- selection -----------------------------------------------------------------------------------


def _matches(o: Obj, target: Obj | None) -> bool:
    if not target:
        return True
    group, _, version = o.get("apiVersion", "").rpartition("/")
    if "kind" in target and target["kind"] != o.get("kind"):
        return False
    if "group" in target and target["group"] != group:
        return False
    if "version" in target and target["version"] != version:
        return False
    meta = o.get("metadata", {})
    names = {meta.get("name"), *meta.get("x-previous-names", [])}
    if "name" in target and not any(re.fullmatch(target["name"], n or "") for n in names):
        return False
    return not ("namespace" in target and target["namespace"] != meta.get("namespace"))


# --- patches -------------------------------------------------------------------------------------


def _apply_patch(objs: list[Obj], patch: Any, target: Obj | None) -> None:
    if isinstance(patch, list):  # JSON 6902
        for o in objs:
            if _matches(o, target):
                for op in patch:
                    _json6902(o, op)
        return
    sel = dict(target or {})
    if not target:
        sel = {"kind": patch.get("kind"), "name": patch.get("metadata", {}).get("name")}
    for o in objs:
        if _matches(o, sel):
            _merge(o, {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")})


def _merge(dst: Obj, src: Obj) -> None:
    """Strategic merge, enough for these manifests: lists of named items merge by name."""
    for key, value in src.items():
        if value is None:
            dst.pop(key, None)
        elif isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value)
        elif (
            isinstance(value, list)
            and isinstance(dst.get(key), list)
            and all(isinstance(v, dict) and "name" in v for v in value + dst[key])
        ):
            by_name = {item["name"]: item for item in dst[key]}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    dst[key].append(copy.deepcopy(item))
        else:
            dst[key] = copy.deepcopy(value)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _json6902(doc: Obj, op: Obj) -> None:
    parts = _pointer(op["path"])
    parent: Any = doc
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
    last = parts[-1]
    kind = op["op"]
    if isinstance(parent, list):
        idx = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(idx, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[idx] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del parent[idx]
        else:
            raise ValueError(f"unsupported JSON patch op {kind}")
    else:
        if kind in ("add", "replace"):
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            parent.pop(last, None)
        else:
            raise ValueError(f"unsupported JSON patch op {kind}")


# --- namespace, prefix, name references ----------------------------------------------------------


def _set_namespace(objs: list[Obj], ns: str, configs: list[Obj]) -> None:
    for o in objs:
        kind = o.get("kind")
        meta = o.setdefault("metadata", {})
        if kind not in CLUSTER_SCOPED:
            meta["namespace"] = ns
        elif kind == "Namespace":  # kustomize's NamespaceTransformer renames Namespace objects
            meta["name"] = ns
        # built-in namespace fieldSpecs (api/konfig/builtinpluginconsts/namespace.go) and the
        # modules' kustomizeconfig.yaml ones: webhook and APIService service references
        if kind in WEBHOOK_KINDS:
            for wh in o.get("webhooks", []) or []:
                svc = wh.get("clientConfig", {}).get("service")
                if svc is not None:
                    svc["namespace"] = ns
        elif kind == "APIService" and o.get("spec", {}).get("service"):
            o["spec"]["service"]["namespace"] = ns
        elif kind == "CustomResourceDefinition":
            svc = (
                o.get("spec", {})
                .get("conversion", {})
                .get("webhook", {})
                .get("clientConfig", {})
                .get("service")
            )
            if svc is not None:
                svc["namespace"] = ns
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            for s in o.get("subjects", []) or []:
                if s.get("kind") == "ServiceAccount":
                    s["namespace"] = ns


def _rename(objs: list[Obj], o: Obj, new: str) -> None:
    meta = o["metadata"]
    old = meta["name"]
    if old == new:
        return
    meta.setdefault("x-previous-names", []).append(old)
    meta["name"] = new
    kind = o["kind"]
    for other in objs:
        okind = other.get("kind")
        if kind == "Service":
            refs = []
            if okind in WEBHOOK_KINDS:
                refs = [
                    wh.get("clientConfig", {}).get("service")
                    for wh in other.get("webhooks", []) or []
                ]
            elif okind == "APIService":
                refs = [other.get("spec", {}).get("service")]
            elif okind == "CustomResourceDefinition":
                refs = [
                    other.get("spec", {})
                    .get("conversion", {})
                    .get("webhook", {})
                    .get("clientConfig", {})
                    .get("service")
                ]
            for ref in refs:
                if ref and ref.get("name") == old:
                    ref["name"] = new
        elif kind == "ServiceAccount" and okind in ("RoleBinding", "ClusterRoleBinding"):
            for s in other.get("subjects", []) or []:
                if s.get("kind") == "ServiceAccount" and s.get("name") == old:
                    s["name"] = new
        elif kind in ("ClusterRole", "Role") and okind in ("RoleBinding", "ClusterRoleBinding"):
            ref = other.get("roleRef", {})
            if ref.get("kind") == kind and ref.get("name") == old:
                ref["name"] = new
        elif (
            kind in WEBHOOK_KINDS and okind == "ClusterRole"
        ):  # Kueue's webhook_name_reference.yaml
            for rule in other.get("rules", []) or []:
                names = rule.get("resourceNames")
                if names:
                    rule["resourceNames"] = [new if n == old else n for n in names]


def _prefix(objs: list[Obj], prefix: str) -> None:
    for o in list(objs):
        if o.get("kind") in _NO_PREFIX:
            continue
        _rename(objs, o, prefix + o["metadata"]["name"])


def _image(objs: list[Obj], image: Obj) -> None:
    def fix(containers: list[Obj]) -> None:
        for c in containers or []:
            name, _, tag = c.get("image", "").partition(":")
            if name == image["name"]:
                c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag or 'latest')}"

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                if isinstance(node.get(key), list):
                    fix(node[key])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(objs)


# --- replacements --------------------------------------------------------------------------------

_SEG = re.compile(r"\[(\w[\w.-]*)=([^\]]*)\]")


def _path_segments(path: str) -> list[str]:
    out, buf, depth = [], "", 0
    for ch in path:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "." and depth == 0:
            out.append(buf)
            buf = ""
        else:
            buf += ch
    out.append(buf)
    return out


def _lookup(node: Any, path: str, create: bool = False) -> tuple[Any, str | int] | None:
    segs = _path_segments(path)
    for seg in segs[:-1]:
        m = _SEG.fullmatch(seg)
        if m:
            found = [i for i in node if isinstance(i, dict) and str(i.get(m[1])) == m[2]]
            if not found:
                return None
            node = found[0]
        elif isinstance(node, list):
            node = node[int(seg)]
        else:
            if seg not in node:
                if not create:
                    return None
                node[seg] = {}
            node = node[seg]
    return node, segs[-1]


def _replacement(objs: list[Obj], rep: Obj) -> None:
    src = rep["source"]
    source = next(
        (
            o
            for o in objs
            if _matches(
                o, {k: v for k, v in src.items() if k in ("kind", "name", "group", "version")}
            )
        ),
        None,
    )
    if source is None:
        return
    found = _lookup(source, src.get("fieldPath", "metadata.name"))
    if found is None or found[1] not in found[0]:
        return
    value = found[0][found[1]]
    for target in rep.get("targets", []):
        create = bool((target.get("options") or {}).get("create"))
        for o in objs:
            if not _matches(o, target.get("select")):
                continue
            for fp in target.get("fieldPaths", []):
                spot = _lookup(o, fp, create)
                if spot is not None and (create or spot[1] in spot[0]):
                    spot[0][spot[1]] = copy.deepcopy(value)


def _custom_transformer(objs: list[Obj], doc: Obj) -> None:
    kind = doc.get("kind")
    if kind == "PatchTransformer":
        patch = doc["patch"]
        _apply_patch(
            objs,
            json.loads(patch) if patch.lstrip().startswith("[") else yaml.safe_load(patch),
            doc.get("target"),
        )
    elif kind == "PrefixSuffixTransformer":
        for spec in doc.get("fieldSpecs", []):
            for o in objs:
                if spec.get("kind") and o.get("kind") != spec["kind"]:
                    continue
                head, _, leaf = spec["path"].partition("/")
                items = o.get(head) if leaf else [o]
                for item in items or []:
                    key = leaf or head
                    if isinstance(item, dict) and key in item:
                        item[key] = doc.get("prefix", "") + item[key] + doc.get("suffix", "")
    else:
        raise ValueError(f"unsupported transformer kind {kind}")


def clean(o: Obj) -> Obj:
    """The object without this module's bookkeeping (previous names)."""
    o = copy.deepcopy(o)
    o.get("metadata", {}).pop("x-previous-names", None)
    return o
