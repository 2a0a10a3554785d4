"""The detached run of a TrainJob named from anywhere (``%trainjob_close NAME`` of a job this
kernel has no session of asks for ``--force`` when its run lives)."""

from __future__ import annotations

from ..exec.client import ExecClient
from ..kube import kubeconfig
from ..kube.objects import is_running, pod_name
from ..trainjob.body import runtime_ref
from ..trainjob.lifecycle import fetch_trainjob
from ..trainjob.runtime import fetch_runtime, trainer_target
from ..validation import validate_name, validate_namespace
from .control import keepalive_pods, read_detached
from .state import DetachedState


def detached_run_of(
    name: str,
    namespace: str | None = None,
    *,
    context: str | None = None,
    config_file: str | None = None,
    lines: int = 0,
) -> DetachedState | None:
    """The newest detached run of TrainJob ``name``, None when it has none (or its pods ended
    without one). Raises NotFoundError when there is no such TrainJob."""
    validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    job = fetch_trainjob(api, ns, name)
    runtime, _kind = runtime_ref(job)
    info = fetch_runtime(api, ns, runtime) if runtime else None
    target = trainer_target(api, ns, name, info.obj if info is not None else None)
    rjob = target.replicated_job
    running = [pod_name(p) for p in keepalive_pods(api, ns, name, rjob) if is_running(p)]
    if not running:
        return None
    return read_detached(
        ExecClient(api),
        api,
        ns,
        name,
        replicated_job=rjob,
        trainer_pod=running[0],
        container=None,
        lines=lines,
    )


__all__ = ["detached_run_of"]
