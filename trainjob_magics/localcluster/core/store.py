"""In-memory object store: global resourceVersion, per-kind objects, event history, watchers."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import secrets
import string
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .apierror import ApiError, already_exists, conflict, not_found
from .resources import NAMESPACES, Kind
from .selectors import Requirement, fields_match, labels_match

_SUFFIX_CHARS = string.ascii_lowercase + string.digits


def random_suffix() -> str:
    """Five random characters, as generateName and the Job controller's pod names add."""
    return "".join(secrets.choice(_SUFFIX_CHARS) for _ in range(5))


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Event:
    """One change: type ADDED | MODIFIED | DELETED, the object after it and before it."""

    type: str
    kind_key: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    rv: int


@dataclass
class Subscription:
    """A watcher's inbox; filled under the store lock, drained on the watcher's event loop."""

    kind_key: str | None
    loop: asyncio.AbstractEventLoop
    pending: deque[Event] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def drain(self) -> list[Event]:
        out = list(self.pending)
        self.pending.clear()
        return out


class ExpiredError(Exception):
    """The requested resourceVersion is older than the retained history: the watch cache's
    ``errors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)",
    resourceVersion, oldest-1))`` (k8s.io/apiserver pkg/storage/cacher/watch_cache.go), a
    Status 410 ``Expired``."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.setdefault("metadata", {})


class Store:
    """Thread-safe object store. Objects are dicts; reads and writes copy."""

    def __init__(self, history_limit: int = 5000) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._rv = 0
        self._history: deque[Event] = deque()
        self._history_limit = history_limit
        self._compacted = 0
        self._subs: list[Subscription] = []
        # kind key -> the apiVersion objects are stored in, where it is not the Kind's own
        # (a Kueue 0.14 cluster stores kueue.x-k8s.io objects as v1beta1)
        self.storage_versions: dict[str, str] = {}

    # -- helpers ---------------------------------------------------------------------------

    def api_version(self, kind: Kind) -> str:
        """The apiVersion ``kind``'s objects are stored with."""
        group_version = self.storage_versions.get(kind.key)
        return group_version or kind.api_version

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _bucket(self, kind: Kind) -> dict[tuple[str, str], dict[str, Any]]:
        return self._objects.setdefault(kind.key, {})

    def _emit(
        self, type_: str, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        ev = Event(type_, kind.key, copy.deepcopy(obj), old, self._rv)
        self._history.append(ev)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        for sub in list(self._subs):
            if sub.closed or (sub.kind_key is not None and sub.kind_key != kind.key):
                continue
            sub.pending.append(ev)
            try:
                sub.loop.call_soon_threadsafe(sub.wakeup.set)
            except RuntimeError:  # loop closed
                sub.closed = True

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def compact(self) -> int:
        """Forget all history (like an etcd compaction): older watch RVs then get 410."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv
            return self._rv

    # -- reads -----------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._bucket(kind).get((namespace or "", name))
            if obj is None:
                raise not_found(kind.plural, kind.group, name)
            return copy.deepcopy(obj)

    def try_get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.get(kind, namespace, name)
        except ApiError:
            return None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        labels: list[Requirement] | None = None,
        fields: list[Requirement] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Matching objects sorted by namespace/name, and the list resourceVersion."""
        with self._lock:
            items = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self._bucket(kind).items())
                if (namespace is None or ns == namespace)
                and labels_match(labels or [], o)
                and fields_match(fields or [], o)
            ]
            return items, str(self._rv)

    def list_at(
        self, kind: Kind, rv: int | None, namespace: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """The objects of `kind` as they were at resourceVersion `rv` (None: now), and that RV.

        What an etcd range read at a revision gives the apiserver for a paged list that
        continues a snapshot (storage/etcd3/store.go GetList `withRev`): the current objects
        with the retained history after `rv` undone. Raises ExpiredError when `rv` is older
        than that history (etcd's ErrCompacted).
        """
        with self._lock:
            objs = dict(self._bucket(kind))
            if rv is not None and rv < self._rv:
                if rv < self._compacted:
                    raise ExpiredError(rv, self._compacted)
                for ev in reversed(self._history):
                    if ev.rv <= rv:
                        break
                    if ev.kind_key != kind.key:
                        continue
                    meta = ev.obj.get("metadata") or {}
                    key = (
                        meta.get("namespace", "") if kind.namespaced else "",
                        meta.get("name", ""),
                    )
                    if ev.type == "ADDED" or ev.old is None:
                        objs.pop(key, None)
                    else:
                        objs[key] = ev.old
            items = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(objs.items())
                if namespace is None or ns == namespace
            ]
            return items, self._rv if rv is None else rv

    # -- writes ----------------------------------------------------------------------------

    def create(
        self, kind: Kind, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Store a new object, filling uid, creationTimestamp, resourceVersion, generation."""
        obj = copy.deepcopy(obj)
        meta = _meta(obj)
        with self._lock:
            key = self._new_key(kind, meta, namespace)
            obj["apiVersion"] = self.api_version(kind)
            obj["kind"] = kind.kind
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.pop("deletionTimestamp", None)
            if kind.has_generation:
                meta["generation"] = 1
            meta["resourceVersion"] = self._next_rv()
            self._bucket(kind)[key] = obj
            self._emit("ADDED", kind, obj, None)
            return copy.deepcopy(obj)

    def _new_key(self, kind: Kind, meta: dict[str, Any], namespace: str | None) -> tuple[str, str]:
        """The key of a new object; sets or drops its namespace. 404 when the namespace does
        not exist, 409 when the name is taken. Call with the lock held."""
        if kind.namespaced:
            namespace = namespace or meta.get("namespace") or "default"
            if kind.key != NAMESPACES.key and ("", namespace) not in self._bucket(NAMESPACES):
                raise not_found("namespaces", "", namespace)
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
            namespace = ""
        name = meta.get("name", "")
        key = (namespace, name)
        if key in self._bucket(kind):
            raise already_exists(kind.plural, kind.group, name)
        return key

    def replace(self, kind: Kind, obj: dict[str, Any], *, check_rv: bool = True) -> dict[str, Any]:
        """Replace a stored object (PUT semantics for the whole object)."""
        return self._replace(kind, copy.deepcopy(obj), check_rv)

    def _replace(self, kind: Kind, obj: dict[str, Any], check_rv: bool) -> dict[str, Any]:
        """replace() with an object the store may keep as it is (nobody else holds it)."""
        meta = _meta(obj)
        name = meta.get("name", "")
        with self._lock:
            key = (meta.get("namespace", "") if kind.namespaced else "", name)
            old = self._bucket(kind).get(key)
            if old is None:
                raise not_found(kind.plural, kind.group, name)
            old_meta = old["metadata"]
            sent_rv = meta.get("resourceVersion")
            if check_rv and sent_rv and sent_rv != old_meta["resourceVersion"]:
                raise conflict(kind.plural, kind.group, name)
            for keep in ("uid", "creationTimestamp", "deletionTimestamp", "namespace"):
                if keep in old_meta:
                    meta[keep] = old_meta[keep]
            if "deletionGracePeriodSeconds" in old_meta:
                meta["deletionGracePeriodSeconds"] = old_meta["deletionGracePeriodSeconds"]
            obj["apiVersion"], obj["kind"] = self.api_version(kind), kind.kind
            if kind.has_generation:
                gen = old_meta.get("generation", 1)
                if obj.get("spec") != old.get("spec"):
                    gen += 1
                meta["generation"] = gen
            meta["resourceVersion"] = old_meta["resourceVersion"]
            if obj == old:
                return copy.deepcopy(old)  # a no-op update keeps the resourceVersion
            meta["resourceVersion"] = self._next_rv()
            self._bucket(kind)[key] = obj
            self._emit("MODIFIED", kind, obj, old)  # `old` left the store: no copy needed
            return copy.deepcopy(obj)

    def dry_run_create(
        self, kind: Kind, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """What create() would return, storing nothing (`?dryRun=All`): same 404/409 checks,
        uid and creationTimestamp filled, no resourceVersion (as the apiserver answers)."""
        obj = copy.deepcopy(obj)
        meta = _meta(obj)
        with self._lock:
            self._new_key(kind, meta, namespace)
        obj["apiVersion"], obj["kind"] = self.api_version(kind), kind.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if kind.has_generation:
            meta["generation"] = 1
        return obj

    def dry_run_replace(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """What replace() would return, storing nothing (`?dryRun=All`)."""
        meta = _meta(obj)
        with self._lock:
            key = (meta.get("namespace", "") if kind.namespaced else "", meta.get("name", ""))
            old = self._bucket(kind).get(key)
            if old is None:
                raise not_found(kind.plural, kind.group, meta.get("name", ""))
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise conflict(kind.plural, kind.group, meta.get("name", ""))
            out = copy.deepcopy(obj)
            for keep in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                if keep in old["metadata"]:
                    out["metadata"][keep] = old["metadata"][keep]
            out["apiVersion"], out["kind"] = self.api_version(kind), kind.kind
            return out

    def mutate(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        fn: Callable[[dict[str, Any]], None],
    ) -> dict[str, Any]:
        """Apply fn to a copy of the stored object and store the result atomically.

        The copy fn changed is stored as it is (one copy, not two): what fn puts into it must
        not be changed by the caller afterwards.
        """
        with self._lock:
            obj = self.get(kind, namespace, name)
            fn(obj)
            return self._replace(kind, obj, check_rv=False)

    def mark_deleting(
        self, kind: Kind, namespace: str | None, name: str, grace_seconds: int = 30
    ) -> dict[str, Any]:
        """Set deletionTimestamp (graceful delete); the owner removes it later."""
        with self._lock:
            obj = self.get(kind, namespace, name)
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            old = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._bucket(kind)[(namespace or "" if kind.namespaced else "", name)] = obj
            self._emit("MODIFIED", kind, obj, old)
            return copy.deepcopy(obj)

    def remove(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        """Delete now: a DELETED event carrying a new resourceVersion."""
        with self._lock:
            key = (namespace or "" if kind.namespaced else "", name)
            obj = self._bucket(kind).pop(key, None)
            if obj is None:
                raise not_found(kind.plural, kind.group, name)
            old = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("DELETED", kind, obj, old)
            return copy.deepcopy(obj)

    # -- watching --------------------------------------------------------------------------

    def subscribe(
        self,
        kind: Kind | None,
        since: int | None,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[list[Event], int, Subscription]:
        """Events after `since` (None: synthetic ADDED for current objects), start RV, inbox.

        Raises ExpiredError when `since` is older than the retained history.
        """
        with self._lock:
            sub = Subscription(kind.key if kind else None, loop)
            if since is None:
                initial = []
                if kind is not None:
                    for (_, _), o in sorted(self._bucket(kind).items()):
                        initial.append(Event("ADDED", kind.key, copy.deepcopy(o), None, self._rv))
            else:
                if since < self._compacted:
                    raise ExpiredError(since, self._compacted)
                initial = [
                    e
                    for e in self._history
                    if e.rv > since and (kind is None or e.kind_key == kind.key)
                ]
            self._subs.append(sub)
            return initial, self._rv, sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            sub.closed = True
            if sub in self._subs:
                self._subs.remove(sub)

    def idle_rv(self, sub: Subscription) -> int | None:
        """Current RV if the subscription has nothing pending (safe bookmark point)."""
        with self._lock:
            return None if sub.pending else self._rv

    def close_all(self) -> None:
        with self._lock:
            for sub in self._subs:
                sub.closed = True
                with contextlib.suppress(RuntimeError):
                    sub.loop.call_soon_threadsafe(sub.wakeup.set)
            self._subs.clear()
