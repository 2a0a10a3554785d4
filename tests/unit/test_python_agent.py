"""The Python room without a cluster: the exact argv the pods run (agent, client, interrupt,
stopper), run here as local processes in a private TMPDIR; the result framing."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.polling import wait_until
from tests.integration.proctools import alive, wait_dead
from trainjob_magics.engine.exec.client import exec_url
from trainjob_magics.engine.python import scripts
from trainjob_magics.engine.python.results import StdoutFilter, read_outcome
from trainjob_magics.engine.python.runs import new_nonce
from trainjob_magics.engine.result import ExecResult

PYTHON = "python3"


class Pod:
    """A fake pod: a TMPDIR of its own; runs argv as the exec would."""

    def __init__(self, tmp: Path, pod: str = "pod-a") -> None:
        self.tmp = tmp
        self.env = {**os.environ, "TMPDIR": str(tmp), "HOSTNAME": pod}
        self.name = scripts.agent_name(PYTHON)

    def run(self, argv: list[str], stdin: bytes = b"", timeout: float = 30) -> Any:
        return subprocess.run(argv, input=stdin, env=self.env, capture_output=True, timeout=timeout)

    def boot(self) -> dict[str, Any]:
        done = self.run(scripts.boot_argv(PYTHON, self.name))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.decode().strip().splitlines()[-1])

    def request(self, request: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
        nonce = new_nonce()
        done = self.run(
            scripts.cell_argv(PYTHON, self.name), scripts.encode_request(nonce, request)
        )
        outcome = read_outcome(ExecResult(done.stdout.decode(), pod="p"), nonce)
        return outcome.stdout, done.stderr.decode(), outcome.frame

    def cell(self, code: str) -> tuple[str, str, dict[str, Any] | None]:
        return self.request({"op": "run", "code": code})

    def fast_cell(self, code: str) -> tuple[str, str, dict[str, Any] | None]:
        """The sh client (no interpreter per cell), as small cells use it."""
        nonce = new_nonce()
        stdin = scripts.encode_fast_request(nonce, {"op": "run", "code": code})
        assert stdin is not None
        done = self.run(scripts.fast_cell_argv(self.name), stdin)
        outcome = read_outcome(ExecResult(done.stdout.decode(), pod="p"), nonce)
        return outcome.stdout, done.stderr.decode(), outcome.frame


@pytest.fixture
def pod(tmp_path: Path) -> Any:
    p = Pod(tmp_path)
    yield p
    if (p.tmp / "trainjob-magics" / f"{p.name}.pod-a" / "agent.pid").exists():
        p.run(scripts.kill_argv(p.name))


def test_agent_keeps_state_and_reports_values_and_errors(pod: Pod, tmp_path: Path) -> None:
    out, _err, frame = pod.cell("1 + 1")
    assert frame == {"status": "no-agent"}
    hello = pod.boot()
    assert hello["status"] == "started" and alive(hello["pid"])
    assert pod.boot() == {"status": "running"}  # one agent per directory
    directory = tmp_path / "trainjob-magics" / f"{pod.name}.pod-a"
    assert (directory.stat().st_mode & 0o777) == 0o700
    out, err, frame = pod.cell("import os, sys\nx = 41\nprint('a\\rb')\nos.system('echo sh-out')\n"
                               "print('e', file=sys.stderr)\nx + 1")  # fmt: skip
    assert out == "a\rb\nsh-out\n" and err == "e\n"
    assert frame is not None and frame["ok"] and frame["data"] == {"text/plain": "42"}
    assert frame["instance"] == hello["instance"]
    _out, _err, frame = pod.cell("x;")
    assert frame == {"ok": True, "instance": hello["instance"]}  # `;` hides the value
    _out, _err, frame = pod.cell("def f():\n    raise ValueError('bad')\nf()")
    assert frame is not None and frame["error"]["type"] == "ValueError"
    tb = frame["error"]["traceback"]
    assert tb.startswith("Traceback") and "raise ValueError('bad')" in tb
    assert "trainjob-magics-agent" not in tb
    _out, _err, frame = pod.cell("x = = 1")
    assert frame is not None and frame["error"]["type"] == "SyntaxError"
    assert "x = = 1" in frame["error"]["traceback"]


def test_the_sh_client_shares_the_interpreter(pod: Pod, tmp_path: Path) -> None:
    assert pod.fast_cell("1")[2] == {"status": "no-agent"}
    pod.boot()
    out, err, frame = pod.fast_cell("import os, sys\nx = 5\nprint('a\\rb')\nos.system('echo sh')\n"
                                    "print('e', file=sys.stderr)\nx * 2")  # fmt: skip
    assert (out, err) == ("a\rb\nsh\n", "e\n")
    assert frame is not None and frame["data"] == {"text/plain": "10"}
    assert pod.cell("x")[2]["data"] == {"text/plain": "5"}  # type: ignore[index]
    assert scripts.encode_fast_request(new_nonce(), {"code": "x" * 20000}) is None


def test_push_pull_and_unpicklable(pod: Pod) -> None:
    import base64
    import pickle

    pod.boot()
    blob = base64.b64encode(pickle.dumps({"a": [1, 2]})).decode()
    assert pod.request({"op": "push", "values": {"d": blob}})[2]["ok"]  # type: ignore[index]
    _o, _e, frame = pod.request({"op": "pull", "names": ["d"], "max_bytes": 1000})
    assert frame is not None and pickle.loads(base64.b64decode(frame["values"]["d"])) == {
        "a": [1, 2]
    }
    pod.cell("import threading\nlk = threading.Lock()")
    _o, _e, frame = pod.request({"op": "pull", "names": ["lk"], "max_bytes": 1000})
    assert frame is not None and "cannot pickle 'lk'" in frame["error"]["message"]
    _o, _e, frame = pod.request({"op": "pull", "names": ["d"], "max_bytes": 5})
    assert frame is not None and "over the limit" in frame["error"]["message"]
    _o, _e, frame = pod.request({"op": "pull", "names": ["nope"], "max_bytes": 5})
    assert frame is not None and frame["error"]["type"] == "NameError"


def test_interrupt_raises_keyboard_interrupt_and_kill_ends_the_tree(pod: Pod) -> None:
    hello = pod.boot()
    pod.cell("import time\nkept = 1")
    nonce = new_nonce()
    request = {"op": "run", "code": "print('ready', flush=True)\ntime.sleep(1000)"}
    client = subprocess.Popen(
        scripts.cell_argv(PYTHON, pod.name),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=pod.env,
    )
    assert client.stdin is not None and client.stdout is not None
    client.stdin.write(scripts.encode_request(nonce, request))
    client.stdin.close()
    assert client.stdout.readline() == b"ready\n"  # the code runs

    def interrupted() -> bool:  # as the engine does: SIGINT again until the code stops
        assert pod.run(scripts.interrupt_argv(pod.name)).returncode == 0
        with contextlib.suppress(subprocess.TimeoutExpired):
            client.wait(0.5)
        return client.returncode is not None

    assert wait_until(interrupted, timeout=10)
    rest = client.stdout.read().decode()
    frame = read_outcome(ExecResult(rest, pod="p"), nonce).frame
    assert frame is not None
    assert frame["error"]["type"] == "KeyboardInterrupt"
    assert pod.cell("kept")[2]["data"] == {"text/plain": "1"}  # type: ignore[index]
    # code that ignores SIGINT: only the stopper ends it, with the whole tree
    pod.cell("import signal, subprocess\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "child = subprocess.Popen(['sleep', '1000'])")  # fmt: skip
    child = int(pod.cell("child.pid")[2]["data"]["text/plain"])  # type: ignore[index]
    stopped = pod.run(scripts.kill_argv(pod.name))
    assert stopped.returncode == 0, stopped.stdout
    assert wait_dead([hello["pid"], child], 5) == []
    assert pod.cell("1")[2] == {"status": "no-agent"}
    assert pod.run(scripts.interrupt_argv(pod.name)).returncode == 3


def test_missing_interpreter_is_marked(pod: Pod) -> None:
    done = pod.run(scripts.boot_argv("python3-not-here", pod.name))
    assert done.returncode == 127 and scripts.NOT_FOUND.encode() in done.stderr


def test_stdout_filter_holds_back_only_a_possible_nonce() -> None:
    nonce = new_nonce()
    f = StdoutFilter(nonce)
    text = "hello\rworld\n" + nonce + '{"ok": true}\n'
    got = "".join(f.feed(text[i : i + 3]) for i in range(0, len(text), 3))
    assert got == "hello\rworld\n"
    g = StdoutFilter(nonce)
    assert g.feed("progress 10%\r") == "progress 10%\r"  # nothing held back
    assert g.feed("x" + nonce[:5]) == "x" and g.feed("y") == nonce[:5] + "y"


def test_exec_urls_fit_the_request_line_limit() -> None:
    long = "p" * 63
    for argv in (scripts.boot_argv(PYTHON, "py-0123456789ab"), scripts.cell_argv(PYTHON, "x")):
        url = exec_url("https://10.0.0.1:6443", long, long, argv, container=long, stdin=True)
        assert len(url) < 8000


def test_cells_run_under_the_wrapper() -> None:
    """Each cell is a wrapped exec: it touches the idle watchdog's heartbeat and has a pid
    file, so session.interrupt() reaches it (its trap passes SIGINT to the agent)."""
    from trainjob_magics.engine.exec.scripts import wants_wrapper

    assert wants_wrapper(scripts.fast_cell_argv("py-0123456789ab"))
    assert wants_wrapper(scripts.cell_argv(PYTHON, "py-0123456789ab"))


def test_the_sh_client_sees_an_interpreter_that_exits(pod: Pod) -> None:
    for _ in range(3):  # the exit races the client's wait: it must never hang
        pod.boot()
        assert pod.fast_cell("import os\nos._exit(3)")[2] == {"status": "agent-gone"}


def test_pods_sharing_one_tmp_have_an_interpreter_each(tmp_path: Path) -> None:
    """Two pods (their HOSTNAME) with one TMPDIR: two agents, each with its own state."""
    a, b = Pod(tmp_path, "pod-a"), Pod(tmp_path, "pod-b")
    assert a.boot()["status"] == "started"
    assert b.boot()["status"] == "started"
    try:
        assert a.cell("x = 'a'")[2]["ok"] and b.cell("x = 'b'")[2]["ok"]
        assert a.fast_cell("x")[2]["data"]["text/plain"] == "'a'"
        assert b.cell("x")[2]["data"]["text/plain"] == "'b'"
        pids = {p.fast_cell("import os\nos.getpid()")[2]["data"]["text/plain"] for p in (a, b)}
        assert len(pids) == 2
    finally:
        for pod in (a, b):
            pod.run(scripts.kill_argv(pod.name))
