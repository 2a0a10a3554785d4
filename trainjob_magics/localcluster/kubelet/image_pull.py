"""The kubelet's image manager, without images: reference parsing, the node's image cache,
pulls that fail, the pull back-off, and the container states and Events they cause.

No image is ever downloaded. A pull succeeds unless the image is one the cluster was told
cannot be pulled (:meth:`ImageService.fail_pulls`) or its registry host is under ``.invalid``
(RFC 2606: such a name never resolves). Sources, Kubernetes 1.32:

- ``pkg/kubelet/images/image_manager.go`` (``EnsureImageExists``, ``pullImage``,
  ``evalCRIPullErr``, ``applyDefaultImageTag``) and ``pkg/util/parsers/parsers.go``
  (``ParseImageName``): the messages below, the back-off key ``<pod uid>_<image>``, and, since
  1.32 (kubernetes/kubernetes#127918), the last pull error in the ImagePullBackOff message;
- ``pkg/kubelet/kuberuntime/kuberuntime_container.go`` (``startContainer``): the
  ``Failed`` ``Error: <reason>`` Event after every failed ``EnsureImageExists``, then
  ``Created container <name>`` and ``Started container <name>``;
- ``pkg/kubelet/events/event.go``: the reasons ``Pulling``, ``Pulled``, ``Failed``,
  ``InspectFailed``, ``ErrImageNeverPull``, ``BackOff``;
- ``pkg/kubelet/images/types.go``: ``ErrImagePull``, ``ImagePullBackOff``,
  ``InvalidImageName``, ``ErrImageNeverPull``;
- ``k8s.io/client-go/util/flowcontrol/backoff.go``: the back-off doubles from its initial
  value to its maximum and restarts after 2x the maximum without a failure (the kubelet uses
  10s and 300s; the local cluster defaults to 0.5s and 8s, see ``LocalCluster``);
- ``github.com/distribution/reference`` v0.6.0 (``normalize.go``, ``reference.go``,
  ``regexp.go``) and ``github.com/opencontainers/go-digest`` (``digest.go``,
  ``algorithm.go``): the reference grammar and its error texts;
- containerd 1.7 (``core/remotes/docker/resolver.go``, ``pkg/cri/server/image_pull.go``):
  the texts of a pull that fails, as the CRI returns them (``rpc error: code = ...``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.events import record_event
from ..core.store import Store

KUBELET = "kubelet"

# -- the reference grammar (distribution/reference regexp.go) ------------------------------
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PORT = r"(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_NAME = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*"
_HOST = "(?:" + _DOMAIN_NAME + "|" + _IPV6 + ")"
_DOMAIN_AND_PORT = _HOST + _PORT
_PATH_COMPONENT = _ALNUM + "(?:" + _SEPARATOR + _ALNUM + ")*"
_REMOTE_NAME = _PATH_COMPONENT + "(?:/" + _PATH_COMPONENT + ")*"
_NAME = "(?:" + _DOMAIN_AND_PORT + "/)?" + _REMOTE_NAME
_REFERENCE = re.compile("^(" + _NAME + ")(?::(" + _TAG + "))?(?:@(" + _DIGEST + "))?$", re.ASCII)
_ANCHORED_NAME = re.compile("^(?:(" + _DOMAIN_AND_PORT + ")/)?(" + _REMOTE_NAME + ")$", re.ASCII)
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}$")
_DIGEST_ANCHORED = re.compile("^" + _DIGEST + "$", re.ASCII)
_DIGEST_SIZES = {"sha256": 32, "sha384": 48, "sha512": 64}  # crypto/sha256, crypto/sha512
NAME_TOTAL_LENGTH_MAX = 255


class InvalidReference(ValueError):
    """The image reference does not parse; ``str()`` is distribution/reference's error."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed, normalized reference: ``busybox`` -> docker.io / library/busybox : latest."""

    domain: str
    path: str
    tag: str
    digest: str

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}"

    def __str__(self) -> str:
        """The fully qualified reference containerd resolves (the default tag applied)."""
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        if not tag and not digest:
            tag = ":latest"
        return f"{self.repository}{tag}{digest}"


def _split_docker_domain(name: str) -> tuple[str, str]:
    """normalize.go ``splitDockerDomain``."""
    maybe_domain, sep, maybe_remote = name.partition("/")
    if not sep:
        return "docker.io", "library/" + name
    if maybe_domain == "localhost":
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == "index.docker.io":
        domain, remote = "docker.io", maybe_remote
    elif any(ch in maybe_domain for ch in ".:") or maybe_domain.lower() != maybe_domain:
        # a "." or ":" (a host name, an IP, a port), or uppercase: not a Docker Hub namespace
        domain, remote = maybe_domain, maybe_remote
    else:
        domain, remote = "docker.io", name
    if domain == "docker.io" and "/" not in remote:
        remote = "library/" + remote
    return domain, remote


def _validate_digest(digest: str) -> None:
    """go-digest ``Digest.Validate``."""
    i = digest.find(":")
    if i <= 0 or i + 1 == len(digest):
        raise InvalidReference("invalid checksum digest format")
    algorithm, encoded = digest[:i], digest[i + 1 :]
    size = _DIGEST_SIZES.get(algorithm)
    if size is None:
        if not _DIGEST_ANCHORED.match(digest):
            raise InvalidReference("invalid checksum digest format")
        raise InvalidReference("unsupported digest algorithm")
    if len(encoded) != size * 2:
        raise InvalidReference("invalid checksum digest length")
    if not re.fullmatch(r"[a-f0-9]+", encoded):
        raise InvalidReference("invalid checksum digest format")


def _parse(s: str) -> ImageRef:
    """reference.go ``Parse`` (on a name that already has its domain)."""
    if not s:
        raise InvalidReference("repository name must have at least one component")
    m = _REFERENCE.match(s)
    if m is None:
        lower = s.lower()
        if lower != s and _REFERENCE.match(lower):
            raise InvalidReference("repository name must be lowercase")
        raise InvalidReference("invalid reference format")
    name, tag, digest = m.group(1), m.group(2) or "", m.group(3) or ""
    nm = _ANCHORED_NAME.match(name)
    domain, path = (nm.group(1) or "", nm.group(2)) if nm else ("", name)
    if len(path) > NAME_TOTAL_LENGTH_MAX:
        raise InvalidReference(
            f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters"
        )
    if digest:
        _validate_digest(digest)
    return ImageRef(domain, path, tag, digest)


def parse_normalized_named(image: str) -> ImageRef:
    """normalize.go ``ParseNormalizedNamed``: raises InvalidReference with its message."""
    if _IDENTIFIER.match(image):
        raise InvalidReference(
            f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"
        )
    domain, remainder = _split_docker_domain(image)
    remote = remainder.split(":", 1)[0] if ":" in remainder else remainder
    if remote.lower() != remote:
        raise InvalidReference(
            f"invalid reference format: repository name ({remote}) must be lowercase"
        )
    return _parse(f"{domain}/{remainder}")


def invalid_image_message(image: str) -> str | None:
    """The kubelet's InvalidImageName message for ``image``, or None when it parses:
    ``Failed to apply default image tag "<image>": couldn't parse image name "<image>": ...``."""
    try:
        parse_normalized_named(image)
    except InvalidReference as exc:
        return (
            f"Failed to apply default image tag {_q(image)}: "
            f"couldn't parse image name {_q(image)}: {exc}"
        )
    return None


def _q(s: str) -> str:
    """Go's ``%q`` for the strings that occur here."""
    out = s.replace("\\", "\\\\").replace('"', '\\"')
    out = out.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{out}"'


def default_pull_policy(image: str) -> str:
    """pkg/apis/core/v1/defaults.go: ``Always`` for ``:latest`` or no tag, else IfNotPresent."""
    try:
        ref = parse_normalized_named(image)
    except InvalidReference:
        return "IfNotPresent"
    if ref.digest:
        return "IfNotPresent"
    return "Always" if ref.tag in ("", "latest") else "IfNotPresent"


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String`` of a duration truncated to milliseconds."""
    ms = int(seconds * 1000)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if minutes == 0:
        return f"{secs}s"
    hours, minutes = divmod(minutes, 60)
    head = f"{hours}h{minutes}m" if hours else f"{minutes}m"
    return f"{head}{secs}s"


# -- why a pull fails (containerd's texts) -------------------------------------------------

PULL_ERRORS = ("not-found", "unauthorized", "unreachable")


def pull_error(ref: ImageRef, kind: str) -> str:
    """The CRI error of a failed pull of ``ref``, as containerd 1.7 reports it."""
    full = str(ref)
    head = f'failed to pull and unpack image "{full}": failed to resolve reference "{full}"'
    if kind == "not-found":
        return f"rpc error: code = NotFound desc = {head}: {full}: not found"
    if kind == "unauthorized":
        return (
            f"rpc error: code = Unknown desc = {head}: pull access denied, repository does not "
            "exist or may require authorization: server message: insufficient_scope: "
            "authorization failed"
        )
    host = "registry-1.docker.io" if ref.domain == "docker.io" else ref.domain
    bare = host.rsplit(":", 1)[0] if not host.startswith("[") else host
    reference = ref.digest or ref.tag or "latest"
    return (
        f'rpc error: code = Unknown desc = {head}: failed to do request: Head "https://{host}'
        f'/v2/{ref.path}/manifests/{reference}": dial tcp: lookup {bare} on 127.0.0.53:53: '
        "no such host"
    )


@dataclass
class _PullRule:
    pattern: str
    kind: str

    def matches(self, image: str, ref: ImageRef) -> bool:
        return any(fnmatch.fnmatchcase(s, self.pattern) for s in (image, str(ref), ref.repository))


@dataclass
class _Backoff:
    delay: float
    last: float


@dataclass(frozen=True)
class PullOutcome:
    """What ``EnsureImageExists`` gave: ok, or the waiting reason and message, and when the
    kubelet syncs the pod again."""

    ok: bool
    reason: str = ""
    message: str = ""
    retry_after: float = 0.0


class ImageService:
    """The node's images and the kubelet's image manager; thread-safe (tests call
    :meth:`fail_pulls` from their thread)."""

    def __init__(
        self,
        store: Store,
        *,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if backoff <= 0 or max_backoff < backoff:
            raise ValueError("image pull back-off: need 0 < backoff <= max_backoff")
        self.store = store
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._clock = clock
        self._lock = threading.Lock()
        self._present: set[str] = set()
        self._rules: list[_PullRule] = []
        self._backoffs: dict[str, _Backoff] = {}
        self._prev_error: dict[str, str] = {}
        self._sync_errors: dict[str, int] = {}

    # -- controls --------------------------------------------------------------------------

    def fail_pulls(self, pattern: str, error: str = "not-found") -> None:
        """Make pulls of images matching the glob ``pattern`` fail (matched against the image
        as written, its full reference and its repository). ``error`` picks the registry's
        answer: ``"not-found"``, ``"unauthorized"`` or ``"unreachable"``."""
        if error not in PULL_ERRORS:
            raise ValueError(f"error must be one of {PULL_ERRORS}, not {error!r}")
        with self._lock:
            self._rules.append(_PullRule(pattern, error))

    def allow_pulls(self, pattern: str | None = None) -> None:
        """Undo :meth:`fail_pulls` for ``pattern`` (every pattern when None)."""
        with self._lock:
            self._rules = [r for r in self._rules if pattern is not None and r.pattern != pattern]

    def preload(self, *images: str) -> None:
        """Put images on the node (as ``kind load`` or a pre-pulled node image would)."""
        with self._lock:
            for image in images:
                self._present.add(str(parse_normalized_named(image)))

    def present(self, image: str) -> bool:
        try:
            ref = str(parse_normalized_named(image))
        except InvalidReference:
            return False
        with self._lock:
            return ref in self._present

    def forget_pod(self, uid: str) -> None:
        """Drop the back-off entries of a pod that is gone (the back-off's GC)."""
        with self._lock:
            for key in [k for k in self._backoffs if k.startswith(f"{uid}_")]:
                self._backoffs.pop(key, None)
                self._prev_error.pop(key, None)
            self._sync_errors.pop(uid, None)

    # -- EnsureImageExists + startContainer's error event ---------------------------------

    def ensure(self, pod: dict[str, Any], container: dict[str, Any]) -> PullOutcome:
        """Make the container's image present, recording the kubelet's Events on ``pod``."""
        image = str(container.get("image") or "")
        uid = (pod.get("metadata") or {}).get("uid", "")
        invalid = invalid_image_message(image)
        if invalid is not None:
            self._event(pod, "InspectFailed", invalid, warning=True)
            return self._fail(pod, uid, "InvalidImageName", invalid)
        ref = parse_normalized_named(image)
        full = str(ref)
        policy = container.get("imagePullPolicy") or default_pull_policy(image)
        with self._lock:
            present = full in self._present
        if policy != "Always" and present:
            self._event(pod, "Pulled", f"Container image {_q(image)} already present on machine")
            self._ok(uid)
            return PullOutcome(True)
        if policy == "Never":
            msg = f"Container image {_q(image)} is not present with pull policy of Never"
            self._event(pod, "ErrImageNeverPull", msg, warning=True)
            return self._fail(pod, uid, "ErrImageNeverPull", msg)
        key = f"{uid}_{image}"
        now = self._clock()
        with self._lock:
            entry = self._backoffs.get(key)
            in_backoff = entry is not None and now - entry.last < entry.delay
            prev = self._prev_error.get(key)
        if in_backoff:
            msg = f"Back-off pulling image {_q(image)}"
            self._event(pod, "BackOff", msg)
            if prev:
                msg = f"{msg}: {prev}"
            return self._fail(pod, uid, "ImagePullBackOff", msg, retry=self._retry(key))
        self._event(pod, "Pulling", f"Pulling image {_q(image)}")
        started = self._clock()
        error = self._pull_error(image, ref)
        if error is not None:
            self._event(pod, "Failed", f"Failed to pull image {_q(image)}: {error}", warning=True)
            with self._lock:
                self._next_backoff(key, self._clock())
                self._prev_error[key] = f"ErrImagePull: {error}"
            return self._fail(pod, uid, "ErrImagePull", error, retry=self._retry(key))
        took = go_duration(self._clock() - started)
        size = 10_000_000 + int(hashlib.sha256(full.encode()).hexdigest()[:8], 16) % 2_000_000_000
        self._event(
            pod,
            "Pulled",
            f"Successfully pulled image {_q(image)} in {took} ({took} including waiting). "
            f"Image size: {size} bytes.",
        )
        with self._lock:
            self._present.add(full)
            self._backoffs.pop(key, None)
            self._prev_error.pop(key, None)
        self._ok(uid)
        return PullOutcome(True)

    # -- helpers ---------------------------------------------------------------------------

    def _pull_error(self, image: str, ref: ImageRef) -> str | None:
        host = ref.domain.rsplit(":", 1)[0].lower()
        if host == "invalid" or host.endswith(".invalid"):  # RFC 2606: never resolves
            return pull_error(ref, "unreachable")
        if ":" not in ref.domain and "." not in host and host != "localhost":
            # an uppercase first element ("MyOrg/app") is taken for a host name without a
            # domain, which does not resolve either
            return pull_error(ref, "unreachable")
        with self._lock:
            rule = next((r for r in self._rules if r.matches(image, ref)), None)
        return pull_error(ref, rule.kind) if rule is not None else None

    def _next_backoff(self, key: str, now: float) -> None:
        """flowcontrol.Backoff.Next (call with the lock held)."""
        entry = self._backoffs.get(key)
        if entry is None or now - entry.last > 2 * self.max_backoff:
            self._backoffs[key] = _Backoff(self.backoff, now)
        else:
            entry.delay = min(entry.delay * 2, self.max_backoff)
            entry.last = now

    def _retry(self, key: str) -> float:
        """When the kubelet syncs a pod in image back-off again: twice per back-off period,
        so that the status shows ImagePullBackOff between the pulls."""
        with self._lock:
            entry = self._backoffs.get(key)
        return max(0.05, (entry.delay if entry else self.backoff) / 2)

    def _fail(
        self, pod: dict[str, Any], uid: str, reason: str, message: str, retry: float = 0.0
    ) -> PullOutcome:
        """startContainer: ``Failed`` ``Error: <reason>``; the next sync after ``retry`` (for
        errors without a back-off of their own, doubling up to the maximum)."""
        self._event(pod, "Failed", f"Error: {reason}", warning=True)
        if not retry:
            with self._lock:
                n = self._sync_errors.get(uid, 0)
                self._sync_errors[uid] = n + 1
            retry = min(self.backoff * 2**n, self.max_backoff) / 2
        return PullOutcome(False, reason, message, retry)

    def _ok(self, uid: str) -> None:
        with self._lock:
            self._sync_errors.pop(uid, None)

    def _event(self, pod: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        record_event(
            self.store,
            pod,
            reason=reason,
            message=message,
            type="Warning" if warning else "Normal",
            component=KUBELET,
        )


__all__ = [
    "PULL_ERRORS",
    "ImageRef",
    "ImageService",
    "InvalidReference",
    "PullOutcome",
    "default_pull_policy",
    "go_duration",
    "invalid_image_message",
    "parse_normalized_named",
    "pull_error",
]
