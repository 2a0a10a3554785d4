"""``python -m devtools.realstack up|gates|status|logs|down|env|build|matrix|bench|openmpi5``:
the real stack."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from devtools.realstack import gates, stack
from devtools.realstack.context import NodeShape, StackContext
from devtools.realstack.paths import run_dir
from devtools.realstack.procs import StackError, log_path
from devtools.realstack.versions import DEFAULT, Versions, normalise


def _versions(args: argparse.Namespace) -> Versions:
    kueue = args.kueue
    return Versions(
        kubernetes=normalise(args.kubernetes),
        trainer=normalise(args.trainer),
        jobset=normalise(args.jobset) if args.jobset else "",
        kueue=None if kueue in ("none", "") else normalise(kueue),
    ).resolved()


def _gate_options(p: argparse.ArgumentParser, apiserver: str, kubelet: str) -> None:
    p.add_argument(apiserver, dest="apiserver_gates", default="", help="e.g. A=false,B=true")
    p.add_argument(kubelet, dest="kubelet_gates", default="", help="e.g. A=false,B=true")


def _gates(args: argparse.Namespace) -> dict[str, dict[str, bool]]:
    return {
        gates.APISERVER: gates.parse(args.apiserver_gates),
        gates.KUBELET: gates.parse(args.kubelet_gates),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m devtools.realstack", description=__doc__)
    p.add_argument("--run", type=Path, default=None, help="state folder (default: the cache's)")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("up", "build"):
        s = sub.add_parser(name, help="start a cluster" if name == "up" else "only build")
        s.add_argument("--kubernetes", default=DEFAULT.kubernetes)
        s.add_argument("--jobset", default="", help="default: the version Trainer's go.mod needs")
        s.add_argument("--trainer", default=DEFAULT.trainer)
        s.add_argument("--kueue", default=DEFAULT.kueue, help="a version, or none")
        s.add_argument(
            "--gpus",
            type=int,
            default=NodeShape.gpus,
            help="nvidia.com/gpu the node advertises (a stand-in: there is no GPU)",
        )
        if name == "up":
            s.add_argument(
                "--jupyterhub",
                action="store_true",
                help="also JupyterHub spawning each user's server as a pod (docs/jupyterhub.md)",
            )
            _gate_options(s, "--apiserver-feature-gates", "--kubelet-feature-gates")
    g = sub.add_parser(
        "gates",
        help="restart the running stack's kube-apiserver and kubelet with these feature gates "
        "(none given: the version's defaults), waiting until they serve again",
    )
    _gate_options(g, "--apiserver", "--kubelet")
    g.add_argument(
        "--websocket-fallbacks",
        action="store_true",
        help="the gates that turn WebSocket streaming off on this version (exec then speaks "
        "v4.channel.k8s.io, port-forward a v4 WebSocket per connection; docs/real-cluster.md)",
    )
    sub.add_parser(
        "openmpi5",
        help="add the Open MPI 5 image (Debian trixie) and its runtime deepspeed-openmpi5 to the "
        "running stack (kubeflow/trainer#4028)",
    )
    sub.add_parser("status", help="what runs, and the kubeconfigs")
    logs = sub.add_parser("logs", help="a component's log")
    logs.add_argument("component", help=", ".join(stack.COMPONENTS))
    logs.add_argument("-n", "--lines", type=int, default=100)
    sub.add_parser("down", help="stop everything and remove the state")
    sub.add_parser("env", help="shell exports that point tests/realcluster at the stack")
    m = sub.add_parser(
        "matrix", help="tests/realcluster for every Kubernetes version and Trainer/Kueue pair"
    )
    m.add_argument(
        "--kubernetes",
        default="",
        help="e.g. v1.31.0,v1.33.13 or 1.35 (its newest patch that builds): these versions, each "
        "with the pairs upstream supports on it (or --pairs); default: every row of versions.ROWS",
    )
    m.add_argument(
        "--pairs",
        default="",
        help="e.g. v2.2.1:v0.19.2,v2.1.0:v0.14.8 (without --kubernetes: on CI's Kubernetes)",
    )
    m.add_argument(
        "--suites",
        default="realcluster,differential",
        help="comma list of realcluster (always run) and differential",
    )
    m.add_argument("pytest_args", nargs="*")
    b = sub.add_parser(
        "bench",
        help="exec round trip and 256 MB forward, ours vs the kubectl of the same version, on a "
        "stack of each Kubernetes version in turn -> benchmarks/results.md",
    )
    b.add_argument(
        "--kubernetes",
        default="",
        help="e.g. 1.31,1.33,v1.36.3 (1.35: its newest patch that builds); "
        "default: every version of versions.MATRIX_KUBERNETES",
    )
    b.add_argument(
        "--pair",
        default="",
        help="TRAINER:KUEUE for every stack (KUEUE none: without Kueue); default: CI's pair "
        "where upstream supports it on the version, else the newest pair it supports",
    )
    b.add_argument("--exec-n", type=_positive, default=40, help="exec round trips per client")
    b.add_argument("--rounds", type=_positive, default=7, help="256 MB forwards per client")
    b.add_argument("--size-mb", type=_positive, default=256, help="the forwarded file's size")
    b.add_argument("--output", type=Path, default=None, help="default: benchmarks/results.md")
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run = args.run or run_dir()
    try:
        if args.command == "up":
            shape = NodeShape(gpus=args.gpus)
            ctx = stack.up(
                run, _versions(args), shape, jupyterhub=args.jupyterhub, feature_gates=_gates(args)
            )
            print(ctx.admin_kubeconfig)
            line = stack.hub_line(ctx)
            if line:
                print(line)
        elif args.command == "build":
            took = stack.build_all(_versions(args), run / "logs" / "build.log")
            print(json.dumps(took, indent=2))
        elif args.command == "openmpi5":
            from devtools.realstack import openmpi5

            print(json.dumps(openmpi5.add(StackContext.load(run)), indent=2))
        elif args.command == "gates":
            ctx = StackContext.load(run)
            wanted = _gates(args)
            if args.websocket_fallbacks:
                for component, off in gates.websocket_fallback_gates(ctx).items():
                    wanted[component] = {**off, **wanted[component]}
            gates.apply(ctx, wanted)
            now = {c: gates.render(gates.running_gates(ctx, c)) for c in gates.COMPONENTS}
            print(json.dumps(now, indent=2))
        elif args.command == "status":
            info = stack.status(run)
            print(json.dumps(info, indent=2))
            if info.get("jupyterhub"):
                print(info["jupyterhub"])
            return 0 if info.get("ready") else 1
        elif args.command == "logs":
            path = log_path(run, args.component)
            if not path.exists():
                print(f"no log for {args.component} in {run / 'logs'}", file=sys.stderr)
                return 1
            print("\n".join(path.read_text(errors="replace").splitlines()[-args.lines :]))
        elif args.command == "down":
            stack.down(run)
            print(f"stopped; removed {run}")
        elif args.command == "env":
            for key, value in stack.test_env(StackContext.load(run)).items():
                print(f"export {key}={value}")
        elif args.command == "matrix":
            from devtools.realstack import matrix

            suites = tuple({"realcluster", *args.suites.split(",")} - {""})
            return matrix.run(run.parent, args.pairs, args.pytest_args, suites, args.kubernetes)
        elif args.command == "bench":
            from devtools.realstack import bench

            try:
                plans = bench.plan(args.kubernetes, args.pair)
            except ValueError as exc:
                print(f"realstack: {exc}", file=sys.stderr)
                return 2
            command = "python -m devtools.realstack " + shlex.join(
                sys.argv[1:] if argv is None else argv
            )
            sizes = {"exec_n": args.exec_n, "rounds": args.rounds, "size": args.size_mb << 20}
            return bench.run(run.parent, plans, command, args.output or bench.OUTPUT, sizes)
    except StackError as exc:
        print(f"realstack: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
