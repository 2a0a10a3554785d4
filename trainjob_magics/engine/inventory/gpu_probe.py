"""The pod-side script of a GPU sample, and reading its answer.

One exec per pod, not wrapped (it leaves no pid file and touches no heartbeat: sampling never
keeps a job alive). It first looks for one of our commands running in the pod: the command
wrapper's ``<exec-id>.pid`` files in the state directory (``exec/scripts.py``), whose pid
still lives. If one runs it answers ``busy`` and runs nothing else; a cell is never sampled.
Else, with ``sample``, it runs ``nvidia-smi`` (at most 8 s where ``timeout`` exists: a GPU that
hangs it must not hang the exec); with ``check`` it only answers ``idle`` (the trainer pod of a
job whose GPUs are elsewhere, e.g. an MPI launcher: while a cell runs there, its ranks run in
the other pods).
"""

from __future__ import annotations

import time

from ..exec.scripts import ARGV0, STATE_DIR
from ..result import ExecResult, PodGpus
from .gpu_smi import QUERY_ARGS, parse_query_gpu

SMI_TIMEOUT = 8  # seconds nvidia-smi may take in the pod

PROBE = f"""d={STATE_DIR}
for f in "$d"/*.pid; do
  [ -e "$f" ] || continue
  p=; read -r p 2>/dev/null <"$f"
  case $p in ''|*[!0-9]*) echo busy; exit 0;; esac
  if kill -0 "$p" 2>/dev/null || [ -d "/proc/$p" ]; then echo busy; exit 0; fi
done
m=$1; shift
[ "$m" = check ] && {{ echo idle; exit 0; }}
command -v nvidia-smi >/dev/null 2>&1 || {{ echo absent; exit 0; }}
echo nvidia-smi
if command -v timeout >/dev/null 2>&1; then
  timeout {SMI_TIMEOUT} nvidia-smi "$@" 2>&1
else
  nvidia-smi "$@" 2>&1
fi
echo "exit $?"
"""

NO_DEVICES_EXIT = 6  # nvidia-smi: "No devices were found" (the query found no GPU)
TIMEOUT_EXIT = 124  # timeout(1) ended it


def probe_argv(sample: bool) -> list[str]:
    """The exec's argv: sample (busy check, then nvidia-smi) or only check for our commands."""
    return ["sh", "-c", PROBE, ARGV0, "sample" if sample else "check", *QUERY_ARGS]


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def read_probe(pod: str, result: ExecResult, sampled_at: float | None = None) -> PodGpus:
    """What the probe's answer says; ``idle`` (a check) is the state ``idle``."""
    when = time.time() if sampled_at is None else sampled_at
    lines = result.stdout.splitlines()
    first = lines[0].strip() if lines else ""
    if result.returncode != 0 or not first:
        said = _first_line(result.stderr) or _first_line(result.stdout) or "no answer"
        return PodGpus(pod, "error", sampled_at=when, message=f"the GPU probe failed: {said}")
    if first in ("busy", "absent", "idle"):
        message = {"busy": "a command runs there", "absent": "no nvidia-smi in the pod"}
        return PodGpus(pod, first, sampled_at=when, message=message.get(first, ""))
    body = lines[1:]
    code = None
    if body and body[-1].startswith("exit "):
        code = body.pop().split()[-1]
    text = "\n".join(body)
    gpus, other = parse_query_gpu(text)
    if code == "0" and gpus:
        note = f"{len(other)} line(s) not understood: {other[0]}" if other else ""
        return PodGpus(pod, "ok", tuple(gpus), when, note)
    said = _first_line("\n".join(other)) or _first_line(text)
    if code == str(NO_DEVICES_EXIT) or (code == "0" and not gpus):
        return PodGpus(pod, "no-gpu", sampled_at=when, message=said or "nvidia-smi found no GPU")
    if code == str(TIMEOUT_EXIT):
        said = f"nvidia-smi did not answer within {SMI_TIMEOUT} s"
    return PodGpus(
        pod, "error", sampled_at=when, message=said or f"nvidia-smi exited with code {code}"
    )


__all__ = ["PROBE", "probe_argv", "read_probe"]
