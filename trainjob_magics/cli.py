"""`trainjob-magics` console script: `trainjob-magics local-cluster [...]`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from .localcluster.controller.versions import DEFAULT_TRAINER_VERSION, TRAINER_VERSIONS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainjob-magics")
    sub = parser.add_subparsers(dest="command", required=True)
    lc = sub.add_parser(
        "local-cluster",
        help="run a local Kubernetes-API-compatible cluster for TrainJobs until Ctrl-C",
    )
    lc.add_argument("--kubeconfig", type=Path, help="where to write the kubeconfig")
    lc.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    lc.add_argument(
        "--runtime-file",
        type=Path,
        action="append",
        default=[],
        metavar="YAML",
        help="extra ClusterTrainingRuntime/TrainingRuntime YAML to load (repeatable)",
    )
    lc.add_argument("--root-dir", type=Path, help="where pod working directories live")
    lc.add_argument(
        "--ancestor-label-on-pods",
        action="store_true",
        help="also put trainer.kubeflow.org/trainjob-ancestor-step on the pods",
    )
    lc.add_argument(
        "--trainer-version",
        choices=TRAINER_VERSIONS,
        default=DEFAULT_TRAINER_VERSION,
        help="the Kubeflow Trainer release to imitate: its TrainJob schema, overrides or runtime "
        "patches, resourcesPerNode handling, v2.3 runtime snapshots (default: %(default)s)",
    )
    lc.add_argument(
        "--kueue",
        action="store_true",
        help="simulate Kueue: ResourceFlavors, ClusterQueues with quota, LocalQueues, Workloads",
    )
    lc.add_argument(
        "--kueue-version",
        # localcluster.kueue.simulation_config KUEUE_VERSION_CHOICES
        choices=("0.14.4", "0.14", "0.15", "0.16", "0.17", "0.18", "0.19", "0.20", "main"),
        default=None,
        help="the Kueue release imitated (implies --kueue; default main): served API versions, "
        "reasons, defaulting, how admission patches the TrainJob; 0.N is its newest patch "
        "release (0.14.4: the last 0.14 that writes podSpecOverrides)",
    )
    lc.add_argument(
        "--cpus",
        metavar="QUANTITY",
        help="the node's allocatable cpu, e.g. 4 or 2500m (default: 64)",
    )
    lc.add_argument(
        "--memory",
        metavar="QUANTITY",
        help="the node's allocatable memory, e.g. 16Gi (default: 256Gi)",
    )
    lc.add_argument(
        "--restart-downtime",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds the API server stays down when the process gets SIGUSR1 (a simulated "
        "API server restart; default: %(default)s)",
    )
    lc.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="the node's nvidia.com/gpu count (default: 8)",
    )
    lc.add_argument(
        "--auth",
        choices=("token", "client-cert", "exec"),  # localcluster.cluster AUTH_KINDS
        default="token",
        help="how the kubeconfig's user authenticates: a bearer token, a client certificate "
        "(as kind/kubeadm), or an exec credential plugin (as EKS/GKE) (default: %(default)s)",
    )
    lc.add_argument(
        "--token-ttl",
        type=float,
        default=900.0,
        metavar="S",
        help="with --auth exec: seconds the plugin's tokens are valid, then 401 "
        "(default: %(default)s, EKS's 15 minutes)",
    )
    return parser


def run_local_cluster(args: argparse.Namespace) -> int:
    from .localcluster import LocalCluster
    from .localcluster.kubelet.node import NODE_NAME

    if args.restart_downtime < 0:
        print("error: --restart-downtime must not be negative", file=sys.stderr)
        return 2
    for path in args.runtime_file:
        if not path.is_file():
            print(f"error: runtime file {path} does not exist", file=sys.stderr)
            return 2
    try:
        cluster = LocalCluster(
            kubeconfig_path=args.kubeconfig,
            port=args.port,
            root_dir=args.root_dir,
            ancestor_label_on_pods=args.ancestor_label_on_pods,
            kueue=args.kueue or args.kueue_version is not None,
            kueue_version=args.kueue_version,
            cpus=args.cpus,
            memory=args.memory,
            gpus=args.gpus,
            trainer_version=args.trainer_version,
            auth=args.auth,
            token_ttl=args.token_ttl,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cluster.start()
    except OSError as exc:
        print(f"error: cannot start the local cluster: {exc}", file=sys.stderr)
        return 1
    try:
        for path in args.runtime_file:
            loaded = cluster.load_runtime_yaml(path)
            names = ", ".join(r["metadata"]["name"] for r in loaded)
            print(f"loaded runtime(s) from {path}: {names}", flush=True)
    except Exception as exc:  # a bad runtime file: say which, then stop cleanly
        print(f"error: cannot load runtime file: {exc}", file=sys.stderr)
        cluster.stop()
        return 2
    print(
        f"local cluster listening on {cluster.url} (Kubeflow Trainer {cluster.trainer_version})",
        flush=True,
    )
    if cluster.auth != "token":
        ttl = f", tokens valid {cluster.token_ttl:g}s" if cluster.auth == "exec" else ""
        print(f"credentials: {cluster.auth}{ttl}", flush=True)
    print(f"node {NODE_NAME}: {cluster.node.describe()}", flush=True)
    if cluster.kueue is not None:
        cfg = cluster.kueue.config
        print(
            f"Kueue: LocalQueue {cfg.local_queue!r} in namespace {cfg.namespace!r} "
            f"-> ClusterQueue {cfg.cluster_queue!r} with quota {cfg.quota} (Kueue {cfg.version})",
            flush=True,
        )
    for line in cluster.version_warnings:
        print(f"warning: {line}", flush=True)
    print("point kubectl and trainjob_magics at it with:", flush=True)
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig_path))}", flush=True)
    print(
        f"kill -USR1 {os.getpid()} restarts the API server (down {args.restart_downtime:g}s)",
        flush=True,
    )
    print("press Ctrl-C to stop", flush=True)
    cluster.run_forever(restart_downtime=args.restart_downtime)
    print("local cluster stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "local-cluster":
        return run_local_cluster(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
