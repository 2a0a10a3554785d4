"""Which Kueue APIs the cluster serves, from discovery (``/apis/kueue.x-k8s.io`` and
``/apis/visibility.kueue.x-k8s.io``), read once per API client, and shared for
``SERVER_TTL`` seconds by the clients of one API server (same URL and CA: each ``connect()``
loads its own client, so without it every connect paid one discovery round trip; kubectl keeps
its discovery cache for hours).

Kueue 0.14 serves ``v1beta1`` only (both groups); 0.15 and later add ``v1beta2`` and still serve
``v1beta1`` (kubernetes-sigs/kueue ``apis/kueue``, ``apis/visibility`` at each tag). Only
discovery decides that an API is not served: a 404 for one LocalQueue's pending workloads
means the queue manager has not seen that queue yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client import ApiClient

from ..errors import NotFoundError, PermissionDeniedError, TrainJobError
from ..kube.requests import request
from ..kube.server_cache import ServerCache

KUEUE_GROUP = "kueue.x-k8s.io"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
PREFERENCE = ("v1beta2", "v1beta1")  # the versions this engine speaks, best first


@dataclass(frozen=True)
class KueueAPI:
    """The Kueue API versions to use; ``version`` None: Kueue is not installed."""

    version: str | None
    visibility: tuple[str, ...] = ()  # served visibility versions, best first
    known: bool = True  # False when discovery could not be read (defaults assumed)
    serves_v1beta1: bool = False  # Kueue 0.19 or older (0.20 stops serving v1beta1, kueue#14558)

    @property
    def installed(self) -> bool:
        return self.version is not None


ASSUMED = KueueAPI("v1beta2", PREFERENCE, known=False)

SERVER_TTL = 300.0
_CACHE: ServerCache[KueueAPI] = ServerCache(SERVER_TTL)


def _served(api: ApiClient, group: str) -> list[str] | None:
    """The versions of ``group`` the server lists (None: the group is not served)."""
    try:
        data = request(api, "GET", f"/apis/{group}", verb="get", resource="API discovery")
    except NotFoundError:
        return None
    return [str(v.get("version")) for v in data.get("versions") or [] if v.get("version")]


def _pick(served: list[str]) -> list[str]:
    return [v for v in PREFERENCE if v in served]


def kueue_api(api: ApiClient) -> KueueAPI:
    """The Kueue APIs ``api``'s cluster serves (cached; assumed v1beta2 when unreadable)."""
    found = _CACHE.get(api)
    if found is not None:
        return found
    try:
        core = _served(api, KUEUE_GROUP)
        visibility = _served(api, VISIBILITY_GROUP) if core is not None else None
    except (PermissionDeniedError, TrainJobError):
        return ASSUMED  # not cached: a later call may read it
    if core is None:
        found = KueueAPI(None)
    else:
        versions = _pick(core)
        found = KueueAPI(
            versions[0] if versions else (core[0] if core else "v1beta2"),
            tuple(_pick(visibility or [])),
            serves_v1beta1="v1beta1" in core,
        )
    _CACHE.put(api, found)
    return found


__all__ = ["ASSUMED", "KUEUE_GROUP", "VISIBILITY_GROUP", "KueueAPI", "kueue_api"]
