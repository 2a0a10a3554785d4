"""Fixed POSIX-sh scripts of detached runs: start one, read its state.

A detached run belongs to the TrainJob, not to the kernel: it is started by one short exec and
lives on in the pod, beside the keep-alive watchdog (``scripts.WATCHDOG``), which holds the job
while the run lives and ends the trainer with the run's exit code once it ended. State, in the
watchdog's state directory ``${TMPDIR:-/tmp}/trainjob-magics/``:

- ``keepalive-pid``: the watchdog's pid (PID 1 in a container): the run's output goes to its
  stdout, ``/proc/PID/fd/1``, which is the container's log (``kubectl logs``);
- ``detached/current``: the number of the newest run;
- ``detached/N/``: ``command``, ``started`` (epoch seconds), ``pid`` (the runner), ``log`` (its
  stdout and stderr), ``exit`` (its exit code, written once it ended).

As everywhere, user text travels as argv (``"$@"``), never in script text.
"""

from __future__ import annotations

from collections.abc import Sequence

from .scripts import ARGV0, STATE_DIR

BUSY_EXIT = 75  # the start script's exit code when a run is still alive
NO_STATE_EXIT = 76  # no usable state directory: nothing can be detached
NO_WATCHDOG_EXIT = 77  # no keep-alive watchdog in this pod: the run could not end the job

# $1: the command's text (shown by attach), then the argv to run. Prints "started N PID".
START = f"""d={STATE_DIR}; r="$d/detached"
mkdir -p "$r" 2>/dev/null || {{ echo "cannot create $r"; exit {NO_STATE_EXIT}; }}
: >"$d/heartbeat" 2>/dev/null
k=
read -r k 2>/dev/null <"$d/keepalive-pid"
case $k in ''|*[!0-9]*) echo "no keep-alive watchdog runs in this pod"; exit {NO_WATCHDOG_EXIT};;
esac
n=0
if read -r n 2>/dev/null <"$r/current"; then
  case $n in ''|*[!0-9]*) n=0;; esac
  if [ "$n" -gt 0 ] && [ ! -e "$r/$n/exit" ]; then
    p=; read -r p 2>/dev/null <"$r/$n/pid"
    if [ -z "$p" ] || kill -0 "$p" 2>/dev/null || [ -d "/proc/$p" ]; then
      echo "busy $n"; exit {BUSY_EXIT}
    fi
  fi
fi
n=$((n+1))
while ! mkdir "$r/$n" 2>/dev/null; do n=$((n+1)); done
printf '%s\\n' "$1" >"$r/$n/command"; shift
date +%s >"$r/$n/started"
: >"$r/$n/log"
echo "$n" >"$r/current"
out=/dev/null
[ -w "/proc/$k/fd/1" ] && out="/proc/$k/fd/1"
echo "trainjob-magics: detached run $n started on $HOSTNAME: $(cat "$r/$n/command")" >>"$out"
(
  {{ "$@"; echo $? >"$r/$n/rc"; }} </dev/null 2>&1 | tee -a "$r/$n/log" >>"$out" 2>/dev/null
  c=137
  read -r c 2>/dev/null <"$r/$n/rc"
  echo "trainjob-magics: detached run $n exited with code $c" >>"$out"
  echo "$c" >"$r/$n/exit.tmp" && mv -f "$r/$n/exit.tmp" "$r/$n/exit"
  kill -USR1 "$k" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
echo $! >"$r/$n/pid"
echo "started $n $!"
"""

# $1: a separator line, $2: how many log lines. Prints key lines (run, started, exit, alive),
# then the separator + "command", the command, the separator + "tail", the last lines.
READ = f"""d={STATE_DIR}; r="$d/detached"; sep=$1
n=; read -r n 2>/dev/null <"$r/current" || {{ echo "run 0"; exit 0; }}
case $n in ''|*[!0-9]*) echo "run 0"; exit 0;; esac
echo "run $n"
s=; read -r s 2>/dev/null <"$r/$n/started"; echo "started $s"
if [ -r "$r/$n/exit" ]; then read -r c <"$r/$n/exit"; echo "exit $c"
else
  p=; read -r p 2>/dev/null <"$r/$n/pid"
  if [ -z "$p" ] || kill -0 "$p" 2>/dev/null || [ -d "/proc/$p" ]; then echo "alive 1"
  else echo "alive 0"; fi
fi
echo "$sep command"
cat "$r/$n/command" 2>/dev/null
echo "$sep tail"
tail -n "$2" "$r/$n/log" 2>/dev/null
"""


def start_argv(command_text: str, argv: Sequence[str]) -> list[str]:
    """Start ``argv`` as a detached run (``command_text`` is what attach shows)."""
    return ["sh", "-c", START, ARGV0, command_text, *argv]


def read_argv(separator: str, lines: int) -> list[str]:
    """Read the newest detached run's state and its last ``lines`` lines."""
    return ["sh", "-c", READ, ARGV0, separator, str(int(lines))]


__all__ = [
    "BUSY_EXIT",
    "NO_STATE_EXIT",
    "NO_WATCHDOG_EXIT",
    "READ",
    "START",
    "read_argv",
    "start_argv",
]
