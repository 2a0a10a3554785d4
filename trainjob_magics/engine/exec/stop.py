"""Stop a wrapped command's whole process tree from a second exec (SIGINT, SIGTERM, SIGKILL).

Closing the exec WebSocket does not stop the remote process, so :func:`stop_command` runs the
``remote.STOP`` script next to it; the script finds the command through its pid file.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from ..errors import TrainJobError
from ..result import StopReport
from .scripts import stop_argv

log = logging.getLogger(__name__)


INT_GRACE = 1.0  # seconds after SIGINT before SIGTERM (IPython's %%script waits 2 s in total)


TERM_GRACE = 1.0  # seconds after SIGTERM before SIGKILL


STOP_TIMEOUT = 20.0


# A node that does not answer for now (its kubelet restarting): the stopper is tried again
# for this long. Through a stream translator the kubelet's refusal comes after the 101
# (``error sending request: Post "https://NODE:10250/exec/...": dial tcp ...: connection
# refused``), and a kubelet that just started answers ``pod does not exist`` until it has
# read its pods (both seen on the real stack's v1.31.0 node).
NODE_WAIT = 20.0


_NODE_DOWN = re.compile(
    r"error sending request|error dialing backend|connection refused|pod does not exist",
    re.IGNORECASE,
)


# The line each of the stopper's ends prints (scripts.STOP), exits 0 and 3
_STOPPER_SAID = re.compile(
    r"stopped \d+ process\(es\) with SIG(INT|TERM|KILL)|stopped pid \d+ without /proc|"
    r"nothing to stop: (the command already ended|unusable pid file)"
)


_URL_QUERY = re.compile(r"(https?://[^\s\"?]+)\?[^\s\"]*")


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
    """Run the stopper for ``exec_id`` in ``pod``, again while its node does not answer (up to
    :data:`NODE_WAIT`; the stopper is safe to repeat); never raises (errors are in the
    report)."""
    give_up = time.monotonic() + NODE_WAIT
    delay = 0.5
    while True:
        try:
            result = exec_client.run(
                namespace,
                pod,
                stop_argv(exec_id, int_grace, term_grace),
                container=container,
                timeout=STOP_TIMEOUT,
            )
            break
        except TrainJobError as exc:
            if _NODE_DOWN.search(str(exc)) and time.monotonic() + delay < give_up:
                time.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            log.warning("stopping the command in pod %s failed: %s", pod, exc)
            # a URL's query is the stopper's script, percent-encoded: not worth a line
            why = _URL_QUERY.sub(r"\1?…", str(exc))
            return StopReport(pod, exec_id, False, f"{type(exc).__name__}: {why}")
    text = " ".join(result.stdout.split()) or " ".join(result.stderr.split())
    if result.returncode in (0, 3) and not _STOPPER_SAID.fullmatch(text):
        # its one line did not come whole: a "Success" that a stream cut behind the API server
        # reads as (client.cut_short), not the stopper's own end
        return StopReport(pod, exec_id, False, "the stopper's answer was cut short")
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
