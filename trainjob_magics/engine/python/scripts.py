"""The argv of every exec of the Python room: boot, cell, interrupt, kill.

Each is ``sh -c <constant script> trainjob-magics ARGS...``: the scripts (this module's
constants and the two stdlib-only files next to it) are fixed text passed as argv elements;
the user's code and values travel only on stdin, as data.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import json
import struct
import threading
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..exec.scripts import ARGV0, STATE_DIR, stop_argv

HERE = Path(__file__).resolve().parent
NOT_FOUND = "trainjob-magics: python-not-found:"

# The pod's own suffix of an agent's state directory, ``NAME.HOSTNAME``: pods that share their
# /tmp (a hostPath, an emptyDir) still get an interpreter each. The engine cannot name the
# pod in the argv (one argv runs on every pod of a cell), the pod can: HOSTNAME is set in
# every container (the runtime sets it; the pod's hostname, unique in a job and across jobs).
HOST = "h=${HOSTNAME:-$(hostname 2>/dev/null)}; h=${h:-pod}"

# $1 interpreter, $2 agent name, $3 mode (run | boot), $4 script, $5... its arguments; the
# script gets the state directory's name last. A cell uses the interpreter the agent recorded
# (``exe``: no PATH shims, 5 ms starts) when it is there; a missing interpreter is one marked
# line on stderr and exit 127.
LAUNCH = f"""{HOST}; n=$2.$h; d={STATE_DIR}/$n; p=$1; m=$3; s=$4; shift 4
if [ "$m" = run ] && [ -r "$d/exe" ]; then read -r p <"$d/exe" || p=; [ -x "$p" ] || p=$1; fi
if ! command -v "$p" >/dev/null 2>&1; then echo "{NOT_FOUND} $p" >&2; exit 127; fi
if [ "$m" = run ]; then exec "$p" -I -S -c "$s" "$@" "$n"; fi
exec "$p" -c "$s" "$@" "$n"
"""

# The fast client of a cell ($1 the agent name), POSIX sh only: no interpreter starts. stdin:
# the nonce line, the JSON request line. The agent writes the output into this process's stdout
# and stderr (copied to fds 7 and 8, since a builtin's redirection moves fd 1 for a moment),
# then says ``done`` on the FIFO c.$$ (remote_agent.py, PipeConn). No agent: the ``no-agent``
# status; no mkfifo or no /proc: ``fallback`` (the engine then uses remote_client.py).
CELL = f"""{HOST}; d={STATE_DIR}/$1.$h
IFS= read -r n || exit 3
IFS= read -r r || exit 3
no() {{ printf '%s{{"status": "%s"}}\\n' "$n" "$1"; exit 0; }}
[ -p "$d/ctl" ] && read -r p 2>/dev/null <"$d/agent.pid" || no no-agent
case $p in ''|*[!0-9]*|1) no no-agent;; esac
[ -r /proc/$$/stat ] || no fallback
read -r l 2>/dev/null </proc/$p/stat || no no-agent
l=${{l##*) }}; case $l in Z*|X*) no no-agent;; esac
c="$d/c.$$"
mkfifo -m 600 "$c" 2>/dev/null || no fallback
printf '%s\\n%s\\n' "$n" "$r" >"$d/q.$$"
exec 7>&1 8>&2
trap 'kill -INT "$p" 2>/dev/null' INT TERM
printf '%s\\n' "$$" >"$d/ctl"
IFS= read -r s <"$c"
[ "$s" = done ] || no "${{s:-agent-gone}}"
"""

FAST_MAX = 16 << 10  # bytes of request the sh client reads (it reads stdin byte by byte)

# Sends SIGINT to the agent $1 (KeyboardInterrupt in its running code); exit 3: no agent.
INTERRUPT = f"""{HOST}; f={STATE_DIR}/$1.$h/agent.pid
read -r p 2>/dev/null <"$f" || exit 3
case $p in ''|*[!0-9]*|1) exit 3;; esac
kill -INT "$p" 2>/dev/null || exit 3
"""

BOOTSTRAP = (
    "import base64,sys,zlib;"
    "exec(compile(zlib.decompress(base64.urlsafe_b64decode(sys.argv[1])),"
    "'<trainjob-magics-agent>','exec'))"
)


_AST_LOCK = threading.Lock()  # CPython 3.11's AST conversion is not safe in two threads at once
# (concurrent first calls from the boot threads raised "AST constructor recursion depth mismatch")


def minified(name: str) -> str:
    """A remote script without its docstrings and comments (the same code)."""
    with _AST_LOCK:
        return _minified(name)


def _minified(name: str) -> str:
    """Docstrings and the annotations of functions (nothing reads them) go; the code stays."""
    tree = ast.parse((HERE / name).read_text(), name)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    arg.annotation = None
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[:] = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


@functools.cache
def agent_source() -> str:
    """The agent, compressed for argv: the exec URL stays below 8 KiB (the request-line limit
    of many proxies, and of the local cluster). URL-safe base64: no character of it is
    percent-encoded in the URL."""
    raw = minified("remote_agent.py").encode("utf-8")
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode("ascii")


@functools.cache
def client_source() -> str:
    return minified("remote_client.py")


def agent_name(python: str) -> str:
    """The agent run by ``python`` (one agent per pod and interpreter); its state directory is
    ``NAME.HOSTNAME`` (:data:`HOST`)."""
    return "py-" + hashlib.sha256(python.encode("utf-8")).hexdigest()[:12]


def boot_argv(python: str, name: str) -> list[str]:
    return [
        "sh",
        "-c",
        LAUNCH,
        ARGV0,
        python,
        name,
        "boot",
        BOOTSTRAP,
        agent_source(),
        "boot",
    ]


def cell_argv(python: str, name: str) -> list[str]:
    return ["sh", "-c", LAUNCH, ARGV0, python, name, "run", client_source()]


def fast_cell_argv(name: str) -> list[str]:
    return ["sh", "-c", CELL, ARGV0, name]


def encode_fast_request(nonce: str, request: Mapping[str, Any]) -> bytes | None:
    """The sh client's stdin (two lines), or None when the request is too big for it."""
    body = json.dumps(request)
    if len(body) > FAST_MAX or "\n" in nonce:
        return None
    return f"{nonce}\n{body}\n".encode()


def interrupt_argv(name: str) -> list[str]:
    return ["sh", "-c", INTERRUPT, ARGV0, name]


def kill_argv(name: str) -> list[str]:
    """The stopper on the agent's pid file (in the pod's own state directory): its whole
    process tree goes."""
    sh, c, stop, argv0, _target, *graces = stop_argv(f"{name}/agent", int_grace=0.1, term_grace=1.0)
    pick = f'{HOST}; s=$0; n=$1; shift; exec sh -c "$s" {argv0} "$n.$h/agent" "$@"'
    return [sh, c, pick, stop, name, *graces]


def encode_request(nonce: str, request: Mapping[str, Any]) -> bytes:
    """The client's stdin: lengths, the nonce, the JSON request."""
    key = nonce.encode("utf-8")
    body = json.dumps(request).encode("utf-8")
    return struct.pack("!II", len(key), len(body)) + key + body


__all__ = [
    "NOT_FOUND",
    "agent_name",
    "boot_argv",
    "cell_argv",
    "encode_fast_request",
    "encode_request",
    "fast_cell_argv",
    "interrupt_argv",
    "kill_argv",
]
