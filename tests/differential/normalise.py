"""Normalise what must differ between two clusters (uids, times, resourceVersions, random
suffixes, node names, IPs, ports, hashes), flatten objects into ``path -> value`` and diff."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# metadata and status fields that differ by nature
DROP_KEYS = {
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "lastTransitionTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "startTime",
    "startedAt",
    "finishedAt",
    "completionTime",
    "containerID",
    "imageID",
    "time",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "observedGeneration",
    "requeueAt",
}
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_IP = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b")
_WORKLOAD = re.compile(r"trainjob-(<job\d*>)-[0-9a-f]{5}\b")
_POD_SUFFIX = re.compile(r"(<job\d*>-[a-z0-9-]*?-\d+-\d+)-[a-z0-9]{5}\b")
_SHA = re.compile(r"\b[0-9a-f]{40}\b")
_RAND_SUFFIX = re.compile(r"\b(kube-api-access)-[a-z0-9]{5}\b")
_COUNT = re.compile(r"\(x\d+ over [^)]*\)")
_CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\b")
_WAITED = re.compile(r"(wait time since \w+ was) \d+s")


@dataclass
class Normaliser:
    """String substitutions of one scenario run: its job names, nodes and so on."""

    names: dict[str, str] = field(default_factory=dict)  # actual -> placeholder
    exact: dict[str, str] = field(default_factory=dict)  # whole-string values (node names)

    def name(self, actual: str, placeholder: str) -> None:
        if actual:
            self.names[actual] = placeholder

    def node(self, actual: str) -> None:
        """A node name: replaced where a value is exactly it (it may be part of pod names)."""
        if actual:
            self.exact[actual] = "<node>"

    def text(self, s: str) -> str:
        if s in self.exact:
            return self.exact[s]
        for actual in sorted(self.names, key=len, reverse=True):
            s = s.replace(actual, self.names[actual])
        s = _TIME.sub("<time>", s)
        s = _UUID.sub("<uid>", s)
        s = _IP.sub("<ip>", s)
        s = _WORKLOAD.sub(r"trainjob-\1-<hash>", s)
        s = _POD_SUFFIX.sub(r"\1-<rand>", s)
        s = _SHA.sub("<sha>", s)
        s = _RAND_SUFFIX.sub(r"\1-<rand>", s)
        s = _COUNT.sub("", s)
        s = _CLOCK.sub("<clock>", s)
        s = _WAITED.sub(r"\1 <n>s", s)
        return s

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {self.text(k): self.value(x) for k, x in v.items() if k not in DROP_KEYS}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v


def _item_key(item: Any, index: int) -> str:
    if isinstance(item, dict):
        for k in ("name", "type", "key", "manager", "mountPath", "containerPort"):
            if isinstance(item.get(k), (str, int)):
                return f"{k}={item[k]}"
    return str(index)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": [ {"name": "x", "v": 1} ]}}`` -> ``{"a/b/name=x/v": 1}``."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = "{}"
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        if not obj and prefix:
            out[prefix] = "[]"
        if obj and all(not isinstance(x, (dict, list)) for x in obj):
            out[prefix] = ",".join(sorted(str(x) for x in obj))
            return out
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}/{_item_key(v, i)}"))
    else:
        out[prefix] = obj
    return out


@dataclass(frozen=True)
class Difference:
    key: str  # scenario/object/path
    local: Any
    real: Any

    def line(self) -> str:
        return f"{self.key}: local={_short(self.local)} real={_short(self.real)}"


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 160 else s[:157] + "..."


ABSENT = "<absent>"


def diff(scenario: str, local: dict[str, Any], real: dict[str, Any]) -> list[Difference]:
    """Differences between two recordings (object -> normalised data) of one scenario."""
    out: list[Difference] = []
    for obj in sorted(set(local) | set(real)):
        if obj not in local or obj not in real:
            out.append(
                Difference(
                    f"{scenario}/{obj}",
                    "<present>" if obj in local else ABSENT,
                    "<present>" if obj in real else ABSENT,
                )
            )
            continue
        a, b = flatten(local[obj]), flatten(real[obj])
        for path in sorted(set(a) | set(b)):
            va, vb = a.get(path, ABSENT), b.get(path, ABSENT)
            if va != vb:
                out.append(Difference(f"{scenario}/{obj}/{path}", va, vb))
    return out


__all__ = ["ABSENT", "Difference", "Normaliser", "diff", "flatten"]
