"""The pinned versions of every component, and the Trainer/Kueue pairs upstream builds together.

Each pair follows the go.mod of the newer project: Kueue v0.19.2 requires Trainer v2.2.1 and
Kueue v0.14.8 requires Trainer v2.1.0; JobSet is the version that Trainer's go.mod requires.
Kueue 0.20 needs Trainer 2.3 (kueue#14504); no 0.20 tag, release candidate or main pseudo-version
is served by the Go module proxy here (403 "This module version is not available"), so that pair
is not buildable. The closest buildable Trainer 2.3 pair is Trainer v2.3.0 (JobSet v0.12.0) with
Kueue v0.19.2, which people run; its known upstream bugs are kueue#15161 (the flavor's
tolerations replace the runtime's) and trainer#3888 (Kueue's full-object admission update is
refused for runtimePatches carrying CEL-immutable pod fields), both fixed only with Kueue 0.20.

The Kubernetes axis: the newest patch of each minor that builds here (KUBERNETES_NEWEST), control
plane and kubelet of the same version, each with the pairs upstream tests on it (``pairs_on``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# CI's Kubernetes: the newest patch of the newest minor that builds here (KUBERNETES_NEWEST)
KUBERNETES = "v1.37.2"
# etcd 3.6: Kubernetes 1.36's go.mod line (client v3.6.8); 1.37's kubeadm installs 3.7.0 but
# kube-apiserver 1.37 runs on 3.6 (whole tests/realcluster, 2026-12-07), and the earlier minors
# of the matrix need 3.6
ETCD = "v3.6.16"
# the real node: containerd 2.2 (kubelet 1.36 warned that 1.x loses support in 1.37), the CoreDNS
# that kubeadm v1.36.3 installs (cmd/kubeadm/app/constants/constants.go CoreDNSVersion; v1.37.2's
# says v1.14.6: v1.14.2 serves the stack's one zone alike)
CONTAINERD = "v2.2.10"
COREDNS = "v1.14.2"

# Trainer version -> the JobSet version its go.mod requires
JOBSET_FOR_TRAINER = {
    "v2.0.1": "v0.8.2",
    "v2.1.0": "v0.10.1",
    "v2.2.1": "v0.11.1",
    "v2.3.0": "v0.12.0",
}


@dataclass(frozen=True)
class Versions:
    kubernetes: str = KUBERNETES
    etcd: str = ETCD
    containerd: str = CONTAINERD
    coredns: str = COREDNS
    trainer: str = "v2.2.1"
    jobset: str = ""
    kueue: str | None = "v0.19.2"

    def resolved(self) -> Versions:
        """Fill JobSet from Trainer's go.mod when not given."""
        if self.jobset:
            return self
        return replace(self, jobset=JOBSET_FOR_TRAINER.get(self.trainer, "v0.12.0"))

    def label(self) -> str:
        kueue = f" + Kueue {self.kueue}" if self.kueue else ""
        return f"Kubernetes {self.kubernetes}, JobSet {self.jobset}, Trainer {self.trainer}{kueue}"


DEFAULT = Versions().resolved()

# the Trainer/Kueue pairs of `python -m devtools.realstack matrix`: (trainer, kueue, note)
MATRIX: tuple[tuple[str, str | None, str], ...] = (
    ("v2.1.0", "v0.14.8", "Kueue v0.14.8's go.mod requires Trainer v2.1.0"),
    ("v2.2.1", "v0.17.0", "Kueue v0.17 is built against Trainer v2.2"),
    ("v2.2.1", "v0.19.2", "Kueue v0.19.2's go.mod requires Trainer v2.2.1 (the CI pair)"),
    ("v2.3.0", "v0.19.2", "the closest buildable Trainer 2.3 pair (Kueue 0.20 is not served)"),
    ("v2.3.0", "v0.20.0", "Kueue 0.20 requires Trainer 2.3 (kueue#14504)"),
)
# Kueue versions of the matrix that the Go module proxy does not serve here: the matrix asks for
# them anyway and puts the proxy's answer in the table. Asked again 2026-12-07: 403 "This module
# version is not available" for sigs.k8s.io/kueue v0.20.0-v0.20.3, v0.20.0-rc.0/rc.1 and
# v0.19.3-v0.19.5 (v0.19.2 is the newest 0.19 served; also served: v0.14.8, v0.15.2, v0.16.2,
# v0.17.1, v0.18.4). Trainer: v2.0.1, v2.1.0, v2.2.1, v2.3.0 served, v2.1.1, v2.2.2, v2.3.1 not.
NOT_SERVED = ("v0.20.0",)
PROXY_CHECKED = "2026-12-07"

# The newest patch of each Kubernetes minor that builds here: the newest the Go module proxy
# serves (`go list -m -versions k8s.io/kubernetes` and each version's .info, 2026-12-07: the next
# patch of each, and v1.38.0, answer 403; v1.38.0-beta.0 is listed), unless its build needs a
# module the proxy refuses (NOT_BUILDING; then the newest listed patch that builds).
KUBERNETES_NEWEST = {
    "1.31": "v1.31.0",  # v1.31.14 does not build here (NOT_BUILDING); v1.31.0 built 2026-12-07
    "1.32": "v1.32.13",  # served; not built yet
    "1.33": "v1.33.13",  # built 2026-12-07
    "1.34": "v1.34.4",  # served; not built yet
    "1.35": "v1.35.4",
    "1.36": "v1.36.3",
    "1.37": "v1.37.2",  # built 2026-12-07
}
# served patches that do not build here, and why (the matrix gives each the row that says so)
NOT_BUILDING = {
    "v1.31.14": "2026-12-07: the Go module proxy refuses k8s.io/endpointslice@v0.31.14 and "
    "k8s.io/kube-scheduler@v0.31.14 (403), which go mod tidy needs",
}
# `python -m devtools.realstack matrix` without --kubernetes: these versions (CI runs KUBERNETES
# only)
MATRIX_KUBERNETES = ("v1.31.0", "v1.33.13", "v1.35.4", "v1.36.3", "v1.37.2")

# Which pairs upstream supports on a Kubernetes minor. Trainer: "Kubernetes >= 1.31"
# (kubeflow.org, Trainer installation), its e2e on one kind version (Makefile K8S_VERSION: 1.32.0
# at v2.0.1, 1.34.0 at v2.1.0, 1.35.0 at v2.2.1 and v2.3.0). JobSet: "the latest 3 Kubernetes
# minor versions" (README; e2e 1.32-1.34 at v0.11.1 and v0.12.0). Kueue: "Requires Kubernetes
# 1.29 or newer" (README 0.14-0.19), and its e2e runs a window of minors per release
# (E2E_K8S_VERSIONS in Makefile-test.mk, hack/make/test.mk from 0.19): that window decides.
KUEUE_E2E = {  # read at the first patch of each minor the matrix uses
    "v0.14": (31, 34),  # v0.14.0: 1.31.12 1.32.8 1.33.4 1.34.0
    "v0.17": (33, 35),  # v0.17.0: 1.33.7 1.34.3 1.35.0
    "v0.19": (34, 36),  # v0.19.2: 1.34.8 1.35.5 1.36.1
}
# the k8s.io/* modules each is built against (go.mod): Trainer v2.0.1 0.32.2, v2.1.0 0.34.1,
# v2.2.1 0.36.0, v2.3.0 0.36.2; Kueue v0.14.8 0.34.1, v0.17.0 0.35.x, v0.19.2 0.36.2; JobSet
# v0.8.2 0.32.2, v0.10.1 0.34.1, v0.11.1 0.35.0, v0.12.0 0.36.0


def minor(version: str) -> int:
    """``v1.35.4`` -> 35; ``v0.19.2`` -> 19."""
    return int(version.lstrip("v").split(".")[1])


def kubernetes_version(spec: str) -> str:
    """``1.35`` or ``v1.35`` -> the newest patch that builds here; a full ``v1.35.4`` stays."""
    version = normalise(spec.strip())
    return KUBERNETES_NEWEST.get(version[1:], version)


# the Kubernetes the pair table was first made on (CI's until 2026-12-07): every pair ran there
EVERY_PAIR_ON = "v1.36.3"


def pairs_on(kubernetes: str) -> tuple[tuple[str, str | None, str], ...]:
    """The pairs of MATRIX the matrix runs on ``kubernetes``: every pair on EVERY_PAIR_ON (the
    rows the table had before the Kubernetes axis); elsewhere the pairs whose Kueue release's
    e2e ran that minor; on a minor newer than any served Kueue tested, the newest Kueue's pairs
    (untested upstream, the note says so)."""
    if kubernetes == EVERY_PAIR_ON:
        return MATRIX
    m = minor(kubernetes)

    def window(kueue: str | None) -> tuple[int, int] | None:
        return KUEUE_E2E.get(kueue.rsplit(".", 1)[0]) if kueue else None

    tested = tuple(p for p in MATRIX if (w := window(p[1])) and w[0] <= m <= w[1])
    if tested:
        return tested
    newest = max(w[1] for w in KUEUE_E2E.values())
    if m > newest:
        last = max(minor(k) for _, k, _ in MATRIX if k and k not in NOT_SERVED)
        untested = f"1.{m} is newer than any served Kueue's e2e (0.{last}: up to 1.{newest})"
        return tuple(
            (t, k, f"{note}; {untested}") for t, k, note in MATRIX if k and minor(k) >= last
        )
    return ()


# python -m devtools.realstack matrix: (kubernetes, trainer, kueue, note)
ROWS: tuple[tuple[str, str, str | None, str], ...] = tuple(
    (k8s, t, k, note) for k8s in MATRIX_KUBERNETES for t, k, note in pairs_on(k8s)
)


def normalise(version: str) -> str:
    """``2.2.1`` -> ``v2.2.1``; leaves ``v...`` alone."""
    return version if version.startswith("v") else f"v{version}"
