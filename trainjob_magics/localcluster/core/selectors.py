"""Label and field selectors, parsed the way the apiserver accepts them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .apierror import ApiError

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`; 400 BadRequest when malformed."""
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split(text):
        m = _CMP_RE.match(part)
        if m:
            op = "!=" if m.group(3) == "!=" else "="
            reqs.append(Requirement(m.group(1), op, (m.group(4),)))
            continue
        m = _SET_RE.match(part)
        if m:
            neg, key, setop, vals = m.group(1), m.group(2), m.group(4), m.group(5)
            if setop:
                if neg:
                    break
                values = tuple(v.strip() for v in vals.split(",") if v.strip())
                reqs.append(Requirement(key, setop, values))
            else:
                reqs.append(Requirement(key, "!" if neg else "exists"))
            continue
        raise ApiError(400, f"unable to parse requirement: found '{part.strip()}'")
    else:
        return reqs
    raise ApiError(400, f"unable to parse requirement: {text}")


def labels_match(reqs: list[Requirement], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


FIELD_SELECTABLE = {
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.podIP",
}


# The fields kube-apiserver lets you select core/v1 Events by (pkg/registry/core/event/strategy.go).
EVENT_FIELD_SELECTABLE = {
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}


def parse_field_selector(text: str | None, allowed: set[str] | None = None) -> list[Requirement]:
    """Parse `metadata.name=x,status.phase!=Failed`."""
    if not text:
        return []
    allowed = allowed or {"metadata.name", "metadata.namespace"}
    reqs: list[Requirement] = []
    for part in _split(text):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        if m.group(1) not in allowed:
            raise ApiError(400, f"field label not supported: {m.group(1)}")
        op = "!=" if m.group(2) == "!=" else "="
        reqs.append(Requirement(m.group(1), op, (m.group(3),)))
    return reqs


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def fields_match(reqs: list[Requirement], obj: dict[str, Any]) -> bool:
    for r in reqs:
        value = _field(obj, r.key)
        if (r.op == "=") != (value == r.values[0]):
            return False
    return True
