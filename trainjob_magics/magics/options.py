"""Shared magic_arguments groups and parsing helpers of the magics.

The groups play the part of ipyparallel's ``exec_args``: each magic stacks the ones it needs, so
an option has the same name, meaning and help text everywhere.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, parse_argstring

from ..engine import TRANSFER_RETRIES
from .failures import TrainJobUsageError

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


SESSION_HELP = "Session of this kernel (default: the last connected)."


def _apply(f: Callable[..., Any], decorators: list[Decorator]) -> Callable[..., Any]:
    for d in reversed(decorators):
        f = d(f)
    return f


def session_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """[ALIAS] and --session ALIAS: the session to use (either form; the default: the last)."""
    return _apply(
        f,
        [
            argument(
                "alias", nargs="?", metavar="ALIAS", help=f"{SESSION_HELP} Same as --session."
            ),
            session_option,
        ],
    )


def session_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--session ALIAS, or --as ALIAS as %trainjob_connect names it (for magics whose
    positional arguments are something else)."""
    return argument(
        "--session", "--as", dest="session", metavar="ALIAS", help=f"{SESSION_HELP} Same as --as."
    )(f)


def cluster_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--namespace, --context, --kubeconfig."""
    return _apply(
        f,
        [
            argument(
                "--namespace", help="Namespace (default: TrainJobMagics.namespace or kubeconfig)."
            ),
            argument("--context", help="Kubeconfig context (default: the current one)."),
            argument(
                "--kubeconfig",
                metavar="PATH",
                help="Kubeconfig file (default: TrainJobMagics.kubeconfig, $KUBECONFIG or "
                "~/.kube/config).",
            ),
        ],
    )


def exec_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--container, --timeout of a command in the trainer pod."""
    return _apply(
        f,
        [
            argument("--container", help="Container of the trainer pod (default: the trainer's)."),
            argument("--timeout", type=float, help="Seconds before the command is abandoned."),
        ],
    )


def output_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--out, --err, --result, --no-raise-error, --quiet: where a command's result goes."""
    stores = [
        argument(f"--{opt}", metavar="VAR", help=f"Store the {what} in the Python variable VAR.")
        for opt, what in (("out", "stdout text"), ("err", "stderr text"), ("result", "ExecResult"))
    ]
    return _apply(
        f,
        [
            *stores,
            argument(
                "--no-raise-error",
                action="store_true",
                help="A non-zero exit code does not fail the cell (TrainJobMagics.raise_on_error).",
            ),
            argument("--quiet", action="store_true", help="Do not show the output (still stored)."),
        ],
    )


def connect_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``%trainjob_connect``: what to create, where, and under which alias."""
    return _apply(
        f,
        [
            argument(
                "runtime",
                nargs="?",
                metavar="RUNTIME",
                help="Runtime name (default: TrainJobMagics.default_runtime).",
            ),
            argument("--nodes", type=int, help="Number of nodes (default: the runtime's)."),
            argument("--image", help="Container image of the trainer (default: the runtime's)."),
            argument("--cpu", help="CPU per node, a Kubernetes quantity (e.g. 2, 500m)."),
            argument("--memory", help="Memory per node, a Kubernetes quantity (e.g. 8Gi)."),
            argument("--gpu", type=int, help="GPUs (nvidia.com/gpu) per node."),
            argument(
                "--env",
                nargs="+",
                action="append",
                metavar="K=V",
                help="Environment variables (repeatable).",
            ),
            argument("--name", help="TrainJob name (DNS-1035); default: a random one."),
            argument(
                "--queue", metavar="LQ", help="Kueue LocalQueue (label kueue.x-k8s.io/queue-name)."
            ),
            argument(
                "--priority",
                metavar="PC",
                help="Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class).",
            ),
            argument(
                "--idle-stop",
                dest="idle_stop",
                metavar="DURATION",
                help="Close the session after this long without a command (30m, 2h); "
                "default TrainJobMagics.idle_stop (off).",
            ),
            argument(
                "--max-runtime",
                dest="max_runtime",
                metavar="DURATION",
                help="Maximum run time, e.g. 8h, 90m, 3600 (see docs/kueue.md).",
            ),
            cluster_args,
            argument(
                "--timeout",
                type=float,
                help="Seconds to wait for the trainer pod "
                "(default: TrainJobMagics.connect_timeout).",
            ),
            argument(
                "--as",
                "--session",
                dest="alias",
                metavar="ALIAS",
                help="Session name in this kernel (default: the --attach/--name, else 'default').",
            ),
            argument(
                "--attach", metavar="NAME", help="Attach to the existing TrainJob NAME instead."
            ),
            argument(
                "--replace",
                action="store_true",
                help="Close a live session with the same alias but other settings, then connect.",
            ),
            shaping_args,
            argument(
                "--dry-run",
                dest="dry_run",
                action="store_true",
                help="Print the TrainJob YAML a server-side dry run accepts; create nothing.",
            ),
        ],
    )


def _repeatable(flag: str, metavar: str, text: str) -> Decorator:
    dest = flag.lstrip("-").replace("-", "_")
    return argument(flag, dest=dest, action="append", metavar=metavar, help=f"{text} (repeatable).")


def shaping_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """What the pods get beyond the runtime (docs/magics.md, "Shaping the pods")."""
    return _apply(
        f,
        [
            _repeatable(
                "--volume",
                "SPEC",
                "Mount pvc:NAME:/path[:ro], configmap:NAME:/path, secret:NAME:/path or "
                "emptydir:/path[:SIZE] in the trainer container",
            ),
            argument("--shm-size", dest="shm_size", metavar="SIZE", help="/dev/shm size (8Gi)."),
            argument("--service-account", dest="service_account", metavar="SA", help="Pods' SA."),
            _repeatable("--node-selector", "K=V", "Node selector"),
            _repeatable("--toleration", "K[=V]:EFFECT", "Toleration"),
            _repeatable("--image-pull-secret", "NAME", "Image pull secret"),
            _repeatable("--label", "K=V", "Label on the TrainJob and its pods"),
            _repeatable("--annotation", "K=V", "Annotation on the TrainJob and its pods"),
            _repeatable("--env-from", "KIND:NAME", "Env from secret:NAME or configmap:NAME"),
            argument(
                "--pod-patch",
                dest="pod_patch",
                metavar="FILE",
                help="A pod-template YAML fragment applied to every pod of the job.",
            ),
        ],
    )


POD_HELP = "Target: trainer, all, node, node-2, a pod name."


PYTHON_HELP = (
    "The body is Python, run in a persistent interpreter in each target pod "
    "(TrainJobMagics.python); the last expression's value is shown."
)


def no_verify(f: Callable[..., Any]) -> Callable[..., Any]:
    """--no-verify of the file transfers."""
    return argument("--no-verify", action="store_true", help="Skip the size/sha256 check.")(f)


def retries_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--retries N of the file transfers."""
    return argument(
        "--retries",
        type=int,
        default=TRANSFER_RETRIES,
        metavar="N",
        help="Resume a stream that ended early (dropped connection) up to N times "
        f"(default {TRANSFER_RETRIES}; 0: fail at once).",
    )(f)


def parse(fn: Callable[..., Any], line: str) -> Any:
    """``parse_argstring`` with errors turned into one line naming the magic and its help."""
    try:
        return parse_argstring(fn, line)
    except UsageError as exc:
        msg = " ".join(str(exc).split())
        hint = _did_you_mean(fn, msg)
        name = fn.__name__
        raise TrainJobUsageError(f"%{name}: {msg}{hint}; see %{name}? for every option") from None


def _did_you_mean(fn: Callable[..., Any], msg: str) -> str:
    """`` (did you mean --gpu?)`` for a mistyped option in an argparse message."""
    parser = getattr(fn, "parser", None)
    if parser is None or "unrecognized arguments:" not in msg:
        return ""
    known = [o for o in parser._option_string_actions if o.startswith("--")]
    unknown = [w for w in msg.split("unrecognized arguments:", 1)[1].split() if w.startswith("--")]
    # compared without the dashes every option shares: with them, "--bogus" is "close" to "--out"
    names = {o[2:]: o for o in known}
    for word in unknown:
        typed = word.split("=", 1)[0][2:]
        close = difflib.get_close_matches(typed, list(names), n=1, cutoff=0.6)
        if close:
            return f" (did you mean {names[close[0]]}?)"
    return ""


def chosen_session(args: Any) -> str | None:
    """The session named by ``ALIAS`` or ``--session`` (None: the default one)."""
    positional = getattr(args, "alias", None)
    option = getattr(args, "session", None)
    if positional and option and positional != option:
        raise TrainJobUsageError(
            f"two sessions given ({positional!r} and --session {option}): give one of them"
        )
    return option or positional


def cluster_settings(args: Any, config: Any) -> dict[str, str | None]:
    """``namespace``, ``context``, ``config_file`` from the options, else the configuration."""
    return {
        "namespace": args.namespace or config.namespace or None,
        "context": args.context or config.context or None,
        "config_file": args.kubeconfig or config.kubeconfig or None,
    }


def parse_env(items: list[list[str]] | None) -> dict[str, str] | None:
    """``[['A=1', 'B=2'], ['C=3']]`` -> ``{'A': '1', ...}``; a bad item is a one-line error."""
    if not items:
        return None
    env: dict[str, str] = {}
    for group in items:
        for item in group:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise TrainJobUsageError(f"--env expects KEY=VALUE, got {item!r}")
            env[key] = value
    return env


def check_var(name: str | None, option: str) -> None:
    """Variable names of --out/--err/--result must be Python identifiers."""
    if name is not None and not name.isidentifier():
        raise TrainJobUsageError(f"{option} expects a Python variable name, got {name!r}")


def check_positive(value: float | None, option: str) -> None:
    """Timeouts and the like must be > 0 when given."""
    if value is not None and value <= 0:
        raise TrainJobUsageError(f"{option} must be positive, got {value:g}")
