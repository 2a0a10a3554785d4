"""Quota bookkeeping and flavor assignment for one ClusterQueue (nominal quota, no borrowing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..core.quantity import format_quantity, parse_quantity
from .workload_conditions import EXCEEDS_MAX_QUOTA, NO_MATCHING_FLAVOR, WAITING_FOR_QUOTA
from .workloads import pod_set_requests

Usage = dict[tuple[str, str], Fraction]  # (flavor, resource) -> amount


@dataclass
class Assignment:
    """The outcome of trying to fit a workload: podSetAssignments, or a reason and message."""

    ok: bool
    pod_sets: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=dict)
    reason: str = ""
    message: str = ""


def nominal(cq: dict[str, Any]) -> Usage:
    """(flavor, resource) -> nominalQuota of a ClusterQueue."""
    out: Usage = {}
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            for res in fl.get("resources") or []:
                out[(fl["name"], res["name"])] = parse_quantity(res.get("nominalQuota", 0))
    return out


def covering_group(cq: dict[str, Any], resource: str) -> dict[str, Any] | None:
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        if resource in (rg.get("coveredResources") or []):
            return rg
    return None


def flavor_names(cq: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            if fl["name"] not in names:
                names.append(fl["name"])
    return names


def usage_of(admission: dict[str, Any]) -> Usage:
    """Usage recorded in a workload's status.admission."""
    out: Usage = {}
    for psa in admission.get("podSetAssignments") or []:
        flavors = psa.get("flavors") or {}
        for res, qty in (psa.get("resourceUsage") or {}).items():
            if res in flavors:
                key = (flavors[res], res)
                out[key] = out.get(key, Fraction(0)) + parse_quantity(qty)
    return out


def add(a: Usage, b: Usage) -> Usage:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + v
    return out


def fit(workload: dict[str, Any], cq: dict[str, Any], used: Usage) -> Assignment:
    """Assign a flavor per pod set and resource group (first flavor that fits, in order)."""
    quota = nominal(cq)
    taken: Usage = {}
    pod_sets: list[dict[str, Any]] = []
    for ps in (workload.get("spec") or {}).get("podSets") or []:
        ps_name = ps.get("name", "main")
        requests = pod_set_requests(ps)
        flavors: dict[str, str] = {}
        groups: list[tuple[dict[str, Any], list[str]]] = []
        for res, amount in sorted(requests.items()):
            rg = covering_group(cq, res)
            if rg is None:
                if res == "pods" or not amount:
                    continue
                return Assignment(
                    False,
                    reason=NO_MATCHING_FLAVOR,
                    message=f"couldn't assign flavors to pod set {ps_name}: resource {res} "
                    "unavailable in ClusterQueue",
                )
            for g, members in groups:
                if g is rg:
                    members.append(res)
                    break
            else:
                groups.append((rg, [res]))
        for rg, members in groups:
            problems: list[str] = []
            exceeds = True
            chosen = None
            for fl in rg.get("flavors") or []:
                fname = fl["name"]
                short: list[str] = []
                for res in members:
                    have = quota.get((fname, res), Fraction(0))
                    in_use = used.get((fname, res), Fraction(0)) + taken.get((fname, res), 0)
                    need = requests[res]
                    if need > have:
                        short.append(
                            f"insufficient quota for {res} in flavor {fname}, request > "
                            f"maximum capacity ({format_quantity(need, res)} > "
                            f"{format_quantity(have, res)})"
                        )
                    elif need > have - in_use:
                        exceeds = False
                        missing = need - (have - in_use)
                        short.append(
                            f"insufficient unused quota for {res} in flavor {fname}, "
                            f"{format_quantity(missing, res)} more needed"
                        )
                if not short:
                    chosen = fname
                    break
                problems += short
            if chosen is None:
                return Assignment(
                    False,
                    reason=EXCEEDS_MAX_QUOTA if exceeds else WAITING_FOR_QUOTA,
                    message=f"couldn't assign flavors to pod set {ps_name}: " + "; ".join(problems),
                )
            for res in members:
                flavors[res] = chosen
                taken[(chosen, res)] = taken.get((chosen, res), Fraction(0)) + requests[res]
        usage = {
            res: format_quantity(v, res) for res, v in sorted(requests.items()) if res in flavors
        }
        pod_sets.append(
            {
                "name": ps_name,
                "flavors": flavors,
                "resourceUsage": usage,
                "count": int(ps.get("count", 1)),
            }
        )
    return Assignment(True, pod_sets=pod_sets, usage=taken)
