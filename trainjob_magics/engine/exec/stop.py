"""Stop a wrapped command's whole process tree from a second exec (SIGINT, SIGTERM, SIGKILL).

Closing the exec WebSocket does not stop the remote process, so :func:`stop_command` runs the
``remote.STOP`` script next to it; the script finds the command through its pid file.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import TrainJobError
from ..result import StopReport
from .scripts import stop_argv

log = logging.getLogger(__name__)


INT_GRACE = 1.0  # seconds after SIGINT before SIGTERM (IPython's %%script waits 2 s in total)


TERM_GRACE = 1.0  # seconds after SIGTERM before SIGKILL


STOP_TIMEOUT = 20.0
# After stopping a command: how long to wait for its last output (and its exit) before giving up
# and reporting what arrived so far. The one interrupt wait of the engine.
INTERRUPT_WAIT = 5.0


def stop_command(
    exec_client: Any,
    namespace: str,
    pod: str,
    container: str | None,
    exec_id: str,
    *,
    int_grace: float = INT_GRACE,
    term_grace: float = TERM_GRACE,
) -> StopReport:
    """Run the stopper for ``exec_id`` in ``pod``; never raises (errors are in the report)."""
    try:
        result = exec_client.run(
            namespace,
            pod,
            stop_argv(exec_id, int_grace, term_grace),
            container=container,
            timeout=STOP_TIMEOUT,
        )
    except TrainJobError as exc:
        log.warning("stopping the command in pod %s failed: %s", pod, exc)
        return StopReport(pod, exec_id, False, f"{type(exc).__name__}: {exc}")
    text = " ".join(result.stdout.split()) or " ".join(result.stderr.split())
    if result.returncode in (0, 3):
        return StopReport(pod, exec_id, True, text or "stopped")
    if result.returncode == 127:
        text = "the image has no POSIX sh"
    return StopReport(pod, exec_id, False, text or f"stopper exited {result.returncode}")


def stop_summary(where: str, reports: list[StopReport]) -> str:
    """What stopping did, for one command or several (one pod each); ``where`` is e.g.
    ``in pod p`` or ``on 3 pods``."""
    if not reports:
        return f"the command {where} had already ended"
    bad = [r for r in reports if not r.stopped]
    if len(reports) > 3 and not bad:
        return f"stopped the remote command on {len(reports)} pods"
    return "; ".join(r.line() for r in (bad or reports))
