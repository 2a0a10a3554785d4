"""`trainjob-magics` console script: `trainjob-magics local-cluster [...]`."""

from __future__ import annotations

import argparse
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
    return parser


def run_local_cluster(args: argparse.Namespace) -> int:
    from .localcluster import LocalCluster

    for path in args.runtime_file:
        if not path.is_file():
            print(f"error: runtime file {path} does not exist", file=sys.stderr)
            return 2
    cluster = LocalCluster(
        kubeconfig_path=args.kubeconfig,
        port=args.port,
        root_dir=args.root_dir,
        ancestor_label_on_pods=args.ancestor_label_on_pods,
        kueue=args.kueue,
        trainer_version=args.trainer_version,
    )
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
    if cluster.kueue is not None:
        cfg = cluster.kueue.config
        print(
            f"Kueue: LocalQueue {cfg.local_queue!r} in namespace {cfg.namespace!r} "
            f"-> ClusterQueue {cfg.cluster_queue!r} with quota {cfg.quota}",
            flush=True,
        )
    print("point kubectl and trainjob_magics at it with:", flush=True)
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig_path))}", flush=True)
    print("press Ctrl-C to stop", flush=True)
    cluster.run_forever()
    print("local cluster stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "local-cluster":
        return run_local_cluster(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
