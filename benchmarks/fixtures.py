"""Lazily created, shared pods and sessions for the benchmarks (cleaned up by the runner)."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from benchmarks import k8s
from benchmarks.common import Context


class Unavailable(Exception):
    """A part of the project this row needs is not built yet."""


def engine_api() -> Any:
    """The engine's public module, or raise Unavailable."""
    try:
        import trainjob_magics as tm

        tm.connect  # noqa: B018
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"engine not built ({e})") from e
    return tm


def magics_available() -> None:
    """Raise Unavailable unless the IPython extension can be loaded."""
    try:
        import trainjob_magics as tm

        tm.load_ipython_extension  # noqa: B018
        import trainjob_magics.magics  # noqa: F401
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"magics not built ({e})") from e


def base_pod(ctx: Context, runtime: str = "torch-distributed") -> str:
    """A Running pod for the baselines, from a TrainJob created with the plain client."""
    key = f"base_pod:{runtime}"
    if key not in ctx.shared:
        name = k8s.new_name("base")
        k8s.create_trainjob(ctx.kubeconfig, ctx.namespace, name, runtime=runtime)
        ctx.shared.setdefault("jobs", []).append(name)
        ctx.shared[key] = k8s.wait_pods_running(ctx.kubeconfig, ctx.namespace, name)[0]
    return ctx.shared[key]


def session(ctx: Context, runtime: str = "torch-distributed", num_nodes: int = 1) -> Any:
    """Our engine's session (one per runtime/node count), or raise Unavailable."""
    key = f"session:{runtime}:{num_nodes}"
    if key not in ctx.shared:
        tm = engine_api()
        ctx.shared[key] = tm.connect(
            runtime,
            num_nodes=num_nodes,
            namespace=ctx.namespace,
            config_file=ctx.kubeconfig,
            timeout=120,
        )
        ctx.shared.setdefault("sessions", []).append(ctx.shared[key])
    return ctx.shared[key]


def supports_kwarg(fn: Any, name: str) -> bool:
    """True when fn accepts keyword `name`."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def cleanup(ctx: Context) -> None:
    """Close sessions and delete the baseline TrainJobs."""
    for s in ctx.shared.pop("sessions", []):
        with contextlib.suppress(Exception):
            s.close(timeout=30)
    for name in ctx.shared.pop("jobs", []):
        with contextlib.suppress(Exception):
            k8s.delete_trainjob(ctx.kubeconfig, ctx.namespace, name)
