"""The pinned versions of every component, and the Trainer/Kueue pairs upstream builds together.

Each pair follows the go.mod of the newer project: Kueue v0.19.2 requires Trainer v2.2.1 and
Kueue v0.14.8 requires Trainer v2.1.0; JobSet is the version that Trainer's go.mod requires.
Kueue 0.20 needs Trainer 2.3 (kueue#14504); no 0.20 tag, release candidate or main pseudo-version
is served by the Go module proxy here (403 "This module version is not available"), so that pair
is not buildable. The closest buildable Trainer 2.3 pair is Trainer v2.3.0 (JobSet v0.12.0) with
Kueue v0.19.2, which people run; its known upstream bugs are kueue#15161 (the flavor's
tolerations replace the runtime's) and trainer#3888 (Kueue's full-object admission update is
refused for runtimePatches carrying CEL-immutable pod fields), both fixed only with Kueue 0.20.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"  # the etcd 3.6 line that Kubernetes 1.36's go.mod uses (client v3.6.8)
# the real node: containerd 2.2 (kubelet 1.36 warns that 1.x loses support in 1.37), the CoreDNS
# that kubeadm v1.36.3 installs (cmd/kubeadm/app/constants/constants.go CoreDNSVersion)
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

# python -m devtools.realstack matrix: (trainer, kueue, note)
MATRIX: tuple[tuple[str, str | None, str], ...] = (
    ("v2.1.0", "v0.14.8", "Kueue v0.14.8's go.mod requires Trainer v2.1.0"),
    ("v2.2.1", "v0.17.0", "Kueue v0.17 is built against Trainer v2.2"),
    ("v2.2.1", "v0.19.2", "Kueue v0.19.2's go.mod requires Trainer v2.2.1 (the CI pair)"),
    ("v2.3.0", "v0.19.2", "the closest buildable Trainer 2.3 pair (Kueue 0.20 is not served)"),
    ("v2.3.0", "v0.20.0", "Kueue 0.20 requires Trainer 2.3 (kueue#14504)"),
)
# Kueue versions of the matrix that the Go module proxy does not serve here: the matrix asks for
# them anyway and puts the proxy's answer in the table
NOT_SERVED = ("v0.20.0",)


def normalise(version: str) -> str:
    """``2.2.1`` -> ``v2.2.1``; leaves ``v...`` alone."""
    return version if version.startswith("v") else f"v{version}"
