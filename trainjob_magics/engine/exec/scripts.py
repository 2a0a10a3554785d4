"""Fixed POSIX-sh scripts the engine runs in pods: command wrapper, stopper, heartbeat, watchdog.

Every script is a constant passed as ONE argv element to ``sh -c``; user data only ever travels
as further argv elements (``"$@"``), never spliced into script text. The scripts need nothing but
a POSIX ``sh`` (dash, busybox ash, bash); ``/proc`` makes stopping thorough (see :data:`STOP`).

State lives in ``${TMPDIR:-/tmp}/trainjob-magics/`` inside the pod:

- ``<exec-id>.pid``: pid of the wrapper of a running command (removed when it ends);
- ``heartbeat``: created by every exec and by the engine's heartbeat thread; the idle watchdog
  removes it each time it sees it, and ends the trainer process when it stayed away for
  ``idle_timeout`` seconds.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Sequence

STATE_DIR = '"${TMPDIR:-/tmp}/trainjob-magics"'


ARGV0 = "trainjob-magics"


SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox"})


DEFAULT_IDLE_TIMEOUT = 1800.0  # 30 minutes


SLEEP_FOREVER: list[str] = ["sleep", "infinity"]


# Runs "$@" (after the exec id in $1) as a child, recording the wrapper's pid for the stopper.
# Not `exec`: the wrapper removes the pid file once the command ended and keeps its exit code.
# Once the command ended it prints its end mark, "\x1e<exec-id> end <code, 3 digits>\n", on
# stdout and then stderr: the proof that each stream reached the command's end. The engine
# cuts the marks out of the streams (streams.EndMark) and fails a "Success" that came without
# both: kube-apiserver's stream translator (and 1.36's kubelet's) reports a stream cut behind
# it, a kubelet restart, as Success (client-go's errorstream.go reads an empty error stream as
# success). SIGPIPE is ignored only then, for the marks: the command never inherits it.
WRAPPER = f"""d={STATE_DIR}
mkdir -p "$d" 2>/dev/null && : >"$d/heartbeat" 2>/dev/null
i=$1
f="$d/$1.pid"
shift
echo $$ >"$f" 2>/dev/null || f=
"$@"
s=$?
[ -n "$f" ] && rm -f "$f"
trap '' PIPE
printf '\036%s end %03d\n' "$i" $s 2>/dev/null
printf '\036%s end %03d\n' "$i" $s >&2
exit $s
"""


# Stops the process tree of the wrapper whose exec id is $1: SIGINT, wait $2 tenths of a second,
# SIGTERM, wait $3 tenths, SIGKILL, wait 1 s. With /proc: the wrapper, every descendant (found
# through PPid, remembered across reparenting) and every member of its process group when it is
# a group leader, or when it is gone: containerd SIGKILLs an exec's own process (the wrapper)
# when its stream is cut (a kubelet restart; internal/cri/server/container_execsync.go), and its
# children, reparented, are then found by their process group only (no pid is reused while a
# group of that id lives). Without /proc: `kill -SIG -PGID` then `kill -SIG PID`. $4, when
# given, is where procfs would be (tests pass a missing directory to run the branch of hosts
# without it).
# Exit codes: 0 all gone, 3 nothing to stop (no pid file: the command already ended),
# 4 some processes survived SIGKILL (listed on stdout).
STOP = f"""d={STATE_DIR}
f="$d/$1.pid"; gi=$2; gt=$3; me=$$
nap() {{ sleep 0.1 2>/dev/null || sleep 1; }}
n=0
while [ ! -r "$f" ] && [ $n -lt 10 ]; do nap; n=$((n+1)); done
if [ ! -r "$f" ]; then echo "nothing to stop: the command already ended"; exit 3; fi
read -r root <"$f"
case $root in ''|*[!0-9]*|1) echo "nothing to stop: unusable pid file"; exit 3;; esac
if [ ! -r "${{4:-/proc}}/$me/stat" ]; then
  for sg in INT TERM KILL; do
    kill -$sg -$root 2>/dev/null || kill -$sg $root 2>/dev/null || break
    nap; nap; nap; nap; nap
  done
  if kill -0 $root 2>/dev/null; then echo "still running: $root (no /proc)"; exit 4; fi
  rm -f "$f"; echo "stopped pid $root without /proc"; exit 0
fi
tree=" $root "; lead=1
if read -r l 2>/dev/null </proc/$root/stat; then
  r=${{l##*) }}; set -- $r; [ "$3" = "$root" ] || lead=
fi
scan() {{
  ch=1
  while [ $ch = 1 ]; do
    ch=0
    for s in /proc/[0-9]*/stat; do
      read -r l 2>/dev/null <"$s" || continue
      p=${{s#/proc/}}; p=${{p%/stat}}
      r=${{l##*) }}; set -- $r
      case $1 in Z|X) continue;; esac
      [ "$p" = "$me" ] || [ "$p" = 1 ] && continue
      case "$tree" in *" $p "*) continue;; esac
      case "$tree" in *" $2 "*) tree="$tree$p "; ch=1; continue;; esac
      if [ -n "$lead" ] && [ "$3" = "$root" ]; then tree="$tree$p "; ch=1; fi
    done
  done
}}
alive() {{
  a=
  for p in $tree; do
    read -r l 2>/dev/null </proc/$p/stat || continue
    r=${{l##*) }}; set -- $r
    case $1 in Z|X) ;; *) a="$a $p";; esac
  done
}}
scan; alive
if [ -z "$a" ]; then rm -f "$f"; echo "nothing to stop: the command already ended"; exit 3; fi
for sg in INT TERM KILL; do
  scan
  [ -n "$lead" ] && kill -$sg -$root 2>/dev/null
  for p in $tree; do kill -$sg $p 2>/dev/null; done
  case $sg in INT) w=$gi;; TERM) w=$gt;; *) w=10;; esac
  i=0
  while :; do
    alive
    [ -z "$a" ] && break
    [ $i -ge $w ] && break
    nap; i=$((i+1))
  done
  if [ -z "$a" ]; then
    rm -f "$f"
    set -- $tree
    echo "stopped $# process(es) with SIG$sg"
    exit 0
  fi
done
echo "still running after SIGKILL:$a"
exit 4
"""


HEARTBEAT = f"""d={STATE_DIR}
mkdir -p "$d" 2>/dev/null && : >"$d/heartbeat"
"""


# The keep-alive watchdog ($1 idle seconds, $2 check interval). If the state dir is unusable it
# never idles out (it must not end a session it cannot hear). While a detached run
# (detach_scripts.py) lives it never idles out either; once the run ended (its runner sends
# SIGUSR1 at once; checked every few seconds too) it exits with the run's exit code, so the pod,
# and with it the TrainJob, ends Complete or Failed. A non-zero code is also noted in /dev/shm,
# which is the pod's and outlives a container restart (restartPolicy OnFailure): the restarted
# watchdog exits with it again at once instead of idling, until the Job's backoffLimit fails it.
# The local cluster's pods share the host's /dev/shm: it gives each pod a directory of its own
# instead ($TRAINJOB_LOCAL_SHM), so a pod never finds another's code. No "$$" and no "$(NAME)"
# in it: the kubelet expands both in a container's command ("$$" -> "$"); its pid comes from a
# child's $PPID instead.
# SIGTERM/SIGINT end it at once (as PID 1 of a container a shell otherwise ignores them until
# the grace period runs out), with 143 as a killed process: a deleted or evicted pod then ends
# Failed and its Job replaces it (backoffLimit); exit 0 would make the kubelet mark it
# Succeeded, complete the Job's index and so the whole TrainJob. Only the idle release and a
# detached run that ended 0 exit 0: they are meant to end the job.
WATCHDOG = f"""d={STATE_DIR}
hb="$d/heartbeat"; t=$1; s=$2; r="$d/detached"
m="${{TRAINJOB_LOCAL_SHM:-/dev/shm}}/trainjob-magics.$HOSTNAME.exit"
trap 'kill $! 2>/dev/null; exit 143' TERM INT
trap ':' USR1
if read -r c 2>/dev/null <"$m"; then
  echo "trainjob-magics: the detached run of this pod ended with exit code $c: exiting with it"
  exit "$c"
fi
if ! {{ mkdir -p "$d" && : >"$hb"; }} 2>/dev/null; then
  echo "trainjob-magics: $d is not writable: idle release is off"
  while :; do sleep 3600 & wait $!; done
fi
sh -c 'echo "$PPID"' >"$d/keepalive-pid"
echo "trainjob-magics: idle watchdog: exits after ${{t}}s without a heartbeat"
idle=0; w=$s
while :; do
  sleep "$w" & wait $!
  kill $! 2>/dev/null; w=$s
  n=; read -r n 2>/dev/null <"$r/current"
  if [ -n "$n" ] && [ -r "$r/$n/exit" ]; then
    read -r c <"$r/$n/exit"; case $c in ''|*[!0-9]*) c=1;; esac
    [ "$c" = 0 ] || echo "$c" >"$m" 2>/dev/null
    echo "trainjob-magics: detached run $n ended with exit code $c: ending the trainer with it"
    exit "$c"
  fi
  if [ -n "$n" ]; then
    p=; read -r p 2>/dev/null <"$r/$n/pid"
    if [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null && [ ! -d "/proc/$p" ]; then
      [ -e "$r/$n/exit" ] || echo 137 >"$r/$n/exit"
    fi
    rm -f "$hb"; idle=0; w=$((s<5?s:5)); continue
  fi
  if [ -e "$hb" ]; then rm -f "$hb"; idle=0; else idle=$((idle+s)); fi
  if [ "$idle" -ge "$t" ]; then
    echo "trainjob-magics: no heartbeat for ${{idle}}s (idle_timeout ${{t}}s):" \
      "exiting to release this TrainJob's resources"
    exit 0
  fi
done
"""


def new_exec_id() -> str:
    """A fresh id for one wrapped command (its pid file name)."""
    return f"x{os.getpid()}-{secrets.token_hex(6)}"


def wants_wrapper(argv: Sequence[str]) -> bool:
    """Commands run by a shell get the wrapper; a bare executable runs as given, so a missing
    one still gets the container runtime's own error."""
    return bool(argv) and os.path.basename(argv[0]) in SHELLS


def wrap(exec_id: str, argv: Sequence[str]) -> list[str]:
    """``argv`` under the wrapper: ``sh -c WRAPPER trainjob-magics EXEC_ID ARGV...``."""
    return ["sh", "-c", WRAPPER, ARGV0, exec_id, *argv]


def end_mark_head(exec_id: str) -> bytes:
    """What the wrapper's end mark for ``exec_id`` starts with (then 3 digits and a newline)."""
    return b"\x1e" + exec_id.encode() + b" end "


def end_mark_of(argv: Sequence[str]) -> bytes | None:
    """The end mark head ``argv`` prints when it runs under the wrapper, else None."""
    if len(argv) > 4 and list(argv[:4]) == ["sh", "-c", WRAPPER, ARGV0]:
        return end_mark_head(argv[4])
    return None


def stop_argv(
    exec_id: str, int_grace: float = 1.0, term_grace: float = 1.0, *, proc: str | None = None
) -> list[str]:
    """The stopper for ``exec_id``; graces in seconds (tenth-of-second resolution). ``proc``:
    where procfs is (default ``/proc``); a missing directory runs the branch of hosts without it."""
    tenths = [str(max(1, round(g * 10))) for g in (int_grace, term_grace)]
    return ["sh", "-c", STOP, ARGV0, exec_id, *tenths, *([proc] if proc else [])]


def heartbeat_argv() -> list[str]:
    """Touch the heartbeat file."""
    return ["sh", "-c", HEARTBEAT, ARGV0]


def watchdog_step(idle_timeout: float) -> int:
    """Seconds between two watchdog checks: a tenth of the timeout, 1..60."""
    return int(max(1, min(60, idle_timeout // 10)))


def heartbeat_interval(idle_timeout: float) -> float:
    """Seconds between two heartbeats: a quarter of the timeout, at most a minute."""
    return max(0.5, min(60.0, idle_timeout / 4))


def keep_alive_command(idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> list[str]:
    """The trainer's keep-alive command: the idle watchdog, or ``sleep infinity`` when None."""
    if idle_timeout is None:
        return list(SLEEP_FOREVER)
    seconds = math.ceil(idle_timeout)
    return ["sh", "-c", WATCHDOG, ARGV0, str(seconds), str(watchdog_step(seconds))]


def validate_idle_timeout(value: object) -> float | None:
    """None/0 -> None (off); a positive number of seconds (at least 2) -> float."""
    from ..errors import InvalidInputError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidInputError(f"idle_timeout must be a number of seconds or None, got {value!r}")
    if value == 0:
        return None
    if value < 2 or math.isinf(value):
        raise InvalidInputError(
            f"idle_timeout must be at least 2 seconds (or None/0 to keep the job forever), "
            f"got {value!r}"
        )
    return float(value)
