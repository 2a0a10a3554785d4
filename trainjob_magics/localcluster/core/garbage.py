"""The garbage collector's deletion modes (``DeleteOptions.propagationPolicy``), for the kinds
that own others here: TrainJob -> JobSet, runtime-snapshot ConfigMap, Workload; JobSet -> its
pods (through Jobs, which this cluster does not store: a pod counts as its JobSet's dependent).

As kube-apiserver and kube-controller-manager's garbage collector do (apiserver
``registry/generic/registry/store.go`` deletionFinalizersForGarbageCollection,
``pkg/controller/garbagecollector/garbagecollector.go``):

- ``Background`` (a custom resource's default): the owner goes at once, its dependents after
  (the controllers' cascade on the DELETED event);
- ``Foreground``: the owner gets ``deletionTimestamp`` and the ``foregroundDeletion``
  finalizer, its dependents are deleted, and it goes once the blocking ones
  (``blockOwnerDeletion``) are gone;
- ``Orphan``: the dependents lose their ownerReference, then the owner goes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .apierror import ApiError
from .resources import CONFIGMAPS, JOBSETS, PODS, TRAINJOBS, Kind
from .store import Event, Store, now_rfc3339

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
OWNERS = {"TrainJob": TRAINJOBS, "JobSet": JOBSETS}


def policy_of(options: Any, query: Any) -> str:
    """The propagation policy a DELETE asks for (Background when it names none)."""
    opts = options if isinstance(options, dict) else {}
    policy = opts.get("propagationPolicy") or query.get("propagationPolicy")
    if policy is None and str(opts.get("orphanDependents", "")).lower() == "true":
        policy = "Orphan"
    return str(policy or "Background")


class GarbageCollector:
    """Deletes with a policy (``delete``) and finishes them from the store's events."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.kinds = (JOBSETS, CONFIGMAPS)  # what a TrainJob owns (its Workload: Kueue's part)

    def dependents(self, owner: dict[str, Any]) -> list[tuple[Kind, dict[str, Any]]]:
        meta = owner["metadata"]
        if owner.get("kind") == "JobSet":
            pods = self.store.list(PODS, meta["namespace"])[0]
            return [(PODS, p) for p in pods if _labels(p).get(JOBSET_NAME_LABEL) == meta["name"]]
        found = []
        for kind in self.kinds:
            for obj in self.store.list(kind, meta.get("namespace"))[0]:
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == meta["uid"] for r in refs):
                    found.append((kind, obj))
        return found

    def delete(self, kind: Kind, namespace: str | None, name: str, policy: str) -> dict[str, Any]:
        """Foreground/Orphan with dependents: mark the owner and let ``handle`` finish; else
        remove it now."""
        obj = self.store.get(kind, namespace, name)
        finalizer = {"Foreground": FOREGROUND, "Orphan": ORPHAN}.get(policy)
        if finalizer is None or not self.dependents(obj):
            return self.store.remove(kind, namespace, name)

        def mark(o: dict[str, Any]) -> None:
            meta = o["metadata"]
            meta.setdefault("deletionTimestamp", now_rfc3339())
            meta.setdefault("deletionGracePeriodSeconds", 0)
            meta["finalizers"] = [*(meta.get("finalizers") or []), finalizer]

        return self.store.mutate(kind, namespace, name, mark)

    def handle(self, ev: Event) -> None:
        """One store event: start a marked deletion, or finish an owner whose dependents left."""
        meta = ev.obj.get("metadata") or {}
        kind = OWNERS.get(str(ev.obj.get("kind")))
        if ev.type != "DELETED" and kind is not None and meta.get("deletionTimestamp"):
            finalizers = meta.get("finalizers") or []
            if ORPHAN in finalizers:
                self._orphan(kind, ev.obj)
            elif FOREGROUND in finalizers:
                for dep_kind, dep in self.dependents(ev.obj):
                    self._delete_dependent(dep_kind, dep)
                self._finish(kind, ev.obj)
        if ev.type == "DELETED":
            for owner_kind, owner in self._owners(ev.obj):
                self._finish(owner_kind, owner)

    def _orphan(self, kind: Kind, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]

        def drop(o: dict[str, Any]) -> None:
            refs = o["metadata"].get("ownerReferences") or []
            o["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]

        for dep_kind, dep in self.dependents(owner):
            if dep_kind is not PODS:
                with contextlib.suppress(ApiError):
                    self.store.mutate(dep_kind, dep["metadata"].get("namespace"), _name(dep), drop)
        with contextlib.suppress(ApiError):
            self.store.remove(kind, owner["metadata"].get("namespace"), _name(owner))

    def _delete_dependent(self, kind: Kind, obj: dict[str, Any]) -> None:
        ns, name = obj["metadata"].get("namespace"), _name(obj)
        with contextlib.suppress(ApiError):
            if kind is PODS:
                self.store.mark_deleting(PODS, ns, name, 30)  # the kubelet ends it, then removes it
            elif kind is JOBSETS:
                self.delete(kind, ns, name, "Foreground")  # it has blocking dependents: pods
            else:
                self.store.remove(kind, ns, name)

    def _owners(self, obj: dict[str, Any]) -> list[tuple[Kind, dict[str, Any]]]:
        meta = obj["metadata"]
        ns = meta.get("namespace")
        found = []
        for ref in meta.get("ownerReferences") or []:
            kind = OWNERS.get(str(ref.get("kind")))
            owner = self.store.try_get(kind, ns, str(ref.get("name"))) if kind else None
            if kind and owner and owner["metadata"].get("uid") == ref.get("uid"):
                found.append((kind, owner))
        jobset = _labels(obj).get(JOBSET_NAME_LABEL)
        if obj.get("kind") == "Pod" and jobset:
            owner = self.store.try_get(JOBSETS, ns, jobset)
            if owner is not None:
                found.append((JOBSETS, owner))
        return found

    def _finish(self, kind: Kind, owner: dict[str, Any]) -> None:
        """Remove a foreground-deleted owner once no blocking dependent is left."""
        if FOREGROUND not in (owner["metadata"].get("finalizers") or []):
            return
        blocking = [
            d
            for k, d in self.dependents(owner)
            if k is PODS
            or any(r.get("blockOwnerDeletion") for r in d["metadata"].get("ownerReferences") or [])
        ]
        if not blocking:
            with contextlib.suppress(ApiError):
                self.store.remove(kind, owner["metadata"].get("namespace"), _name(owner))


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}
