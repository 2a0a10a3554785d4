"""What every component of a running stack needs to know: where it lives, its versions, the
PKI, the admin kubeconfig and the ports it was given."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from devtools.realstack.pki import Pki
from devtools.realstack.versions import Versions


@dataclass
class NodeShape:
    """The stack's node: one real node, whose cpu, memory and pods the kubelet measures at
    start (``realnode.measure``), and the GPU stand-in it advertises."""

    count: int = 2
    cpus: str = "32"
    memory: str = "128Gi"
    gpus: int = 4
    pods: int = 110


_SHAPE_FIELDS = ("count", "cpus", "memory", "gpus", "pods")


@dataclass
class StackContext:
    run: Path
    versions: Versions
    nodes: NodeShape = field(default_factory=NodeShape)
    ports: dict[str, int] = field(default_factory=dict)
    # component (kube-apiserver, kubelet) -> the feature gates it runs with beyond its
    # version's defaults (gates.py)
    feature_gates: dict[str, dict[str, bool]] = field(default_factory=dict)

    @property
    def pki(self) -> Pki:
        return Pki(self.run / "pki")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.run / "admin.kubeconfig"

    @property
    def restricted_kubeconfig(self) -> Path:
        return self.run / "restricted.kubeconfig"

    @property
    def node_slot(self) -> int:
        """The real node's slot on this host (its network namespace and addresses)."""
        return self.ports.get("node-slot", 0)

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def port(self, name: str) -> int:
        """A free loopback port for ``name``, kept for the stack's life (state.json)."""
        if name not in self.ports:
            taken = set(self.ports.values())
            while True:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    candidate = s.getsockname()[1]
                if candidate not in taken:
                    break
            self.ports[name] = candidate
            self.save()
        return self.ports[name]

    def save(self) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        data = {
            "versions": asdict(self.versions),
            "nodes": asdict(self.nodes),
            "ports": self.ports,
            "feature_gates": self.feature_gates,
        }
        (self.run / "state.json").write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, run: Path) -> StackContext:
        data = json.loads((run / "state.json").read_text())
        return cls(
            run=run,
            versions=Versions(
                **{k: v for k, v in data["versions"].items() if k in Versions.__dataclass_fields__}
            ),
            nodes=NodeShape(**{k: v for k, v in data["nodes"].items() if k in _SHAPE_FIELDS}),
            ports=data["ports"],
            feature_gates=data.get("feature_gates", {}),
        )
