"""Terminal IPython (a real ``ipython`` in a pseudo-terminal) shows the plain-text fallback."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kube import trainjob_names

pytestmark = pytest.mark.timeout(240)

IPYTHON = [
    sys.executable,
    "-m",
    "IPython",
    "--simple-prompt",
    "--colors=NoColor",
    "--no-banner",
    "--no-confirm-exit",
    "--HistoryManager.enabled=False",
]


class TerminalIPython:
    """``ipython --simple-prompt`` on a pty; every chunk it writes is kept with its arrival time."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            IPYTHON,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.chunks: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.chunks.append((time.monotonic(), data.decode("utf-8", "replace")))

    def text(self) -> str:
        """Everything the terminal showed so far (``\\r\\n`` as ``\\n``)."""
        with self._lock:
            return "".join(c for _, c in self.chunks).replace("\r\n", "\n")

    def when(self, needle: str, start: int = 0) -> float | None:
        """Monotonic time at which ``needle`` had fully arrived (searching from char ``start``)."""
        with self._lock:
            chunks = list(self.chunks)
        seen = ""
        for at, chunk in chunks:
            seen += chunk.replace("\r\n", "\n")
            if seen.find(needle, start) >= 0:
                return at
        return None

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float, start: int = 0) -> Any:
        """Wait until ``pattern`` (regex) matches the output after char ``start``."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.text(), start)
            if match:
                return match
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{regex.pattern!r} not seen; terminal showed:\n{self.text()}")
            time.sleep(0.05)

    def run(self, source: str, timeout: float = 120) -> str:
        """Type a cell, wait for the next prompt, and return what the cell printed."""
        start = len(self.text())
        self.wait_for(r"In \[\d+\]: ", 60)
        count = int(re.findall(r"In \[(\d+)\]: ", self.text())[-1])
        lines = source.rstrip("\n").split("\n")
        body = "\n".join(lines) + ("\n\n\n" if len(lines) > 1 or source.startswith("%%") else "\n")
        os.write(self.master, body.encode())
        self.wait_for(rf"In \[{count + 1}\]: ", timeout, start)
        return self.text()[start:]

    def exit(self, timeout: float = 120) -> int:
        """Type ``exit`` and wait for the process to end."""
        os.write(self.master, b"exit\n")
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Kill the process group if it is still running and close the pty."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        os.close(self.master)


@pytest.fixture
def terminal(own_cluster: Any, tmp_path: Path) -> Iterator[TerminalIPython]:
    """Terminal IPython with KUBECONFIG of the local cluster and a private IPYTHONDIR."""
    env = {
        **os.environ,
        "KUBECONFIG": str(own_cluster.kubeconfig_path),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("JPY_PARENT_PID", None)
    term = TerminalIPython(env, tmp_path)
    try:
        yield term
    finally:
        term.kill()


def test_terminal_ipython_text_fallback(terminal: TerminalIPython, own_cluster: Any) -> None:
    out = terminal.run("%load_ext trainjob_magics")
    assert "Error" not in out, out

    out = terminal.run("%trainjob_connect mpi-interactive --nodes 2", timeout=120)
    names = trainjob_names(own_cluster.kubeconfig_path)
    assert len(names) == 1, names
    job = names[0]
    assert re.search(rf"Session 'default' ready: TrainJob {job}\b", out), out
    # the status streamed as text while waiting: one line per change, ending Running
    assert re.search(rf"\] {job}: Running, 2/2 pods running", out), out

    out = terminal.run("%trainjob_status")
    assert f"TrainJob {job}" in out and "mpi-interactive" in out, out
    rows = [line.strip() for line in out.splitlines() if line.strip().startswith(f"{job}-")]
    assert len(rows) == 2, out
    assert all(" Running " in row for row in rows), out
    assert any(" launcher " in row for row in rows) and any(" node " in row for row in rows)
    assert re.search(r"NAME\s+ROLE\s+PHASE\s+READY", out), out

    start = len(terminal.text())
    out = terminal.run(
        "%%trainjob\n"
        'for i in 1 2 3; do echo "tick-$i"; sleep 1; done\n'
        'echo "to-stderr" >&2\n'
        'echo "all-$((1+1))-done"',
        timeout=60,
    )
    for needle in ("tick-1\n", "tick-2\n", "tick-3\n", "to-stderr\n", "all-2-done\n"):
        assert needle in out, out
    footer = re.search(r"exit code 0 · (\d+\.\d+) s", out)
    assert footer, out
    assert float(footer.group(1)) >= 2.5
    at = {n: terminal.when(n, start) for n in ("tick-1\n", "tick-2\n", "tick-3\n", "exit code 0")}
    assert None not in at.values(), at
    # streamed live: each line arrived about a second apart, well before the command ended
    assert at["tick-1\n"] < at["tick-2\n"] < at["tick-3\n"] < at["exit code 0"], at
    assert at["exit code 0"] - at["tick-1\n"] >= 1.5, at
    assert at["tick-2\n"] - at["tick-1\n"] >= 0.5, at

    out = terminal.run("%%trainjob\necho before-fail\nexit 7", timeout=60)
    assert "before-fail\n" in out, out
    assert re.search(r"exit code 7 · ", out), out
    assert "TrainJobCellError" in out and "exited with code 7" in out, out
    assert "Traceback" not in out, out

    out = terminal.run("_trainjob.returncode, _trainjob.stdout")
    assert "(7, 'before-fail\\n')" in out, out

    assert job in trainjob_names(own_cluster.kubeconfig_path)
    assert terminal.exit() == 0, terminal.text()
    assert job not in trainjob_names(own_cluster.kubeconfig_path), "the TrainJob outlived the shell"
    shown = terminal.text()
    assert f"Closed session 'default' (TrainJob {job} deleted)." in shown, shown
    assert "cannot reach" not in shown and "is being deleted but" not in shown, shown
    assert own_cluster.token not in terminal.text()


def test_terminal_ctrl_c_footer_on_its_own_line(terminal: TerminalIPython) -> None:
    """Ctrl-C in a cell: the terminal echoes ``^C``; the footer starts on the next line."""
    assert "Error" not in terminal.run("%load_ext trainjob_magics")
    terminal.run("%trainjob_connect mpi-interactive", timeout=120)
    start = len(terminal.text())
    terminal.wait_for(r"In \[\d+\]: ", 60, start - 20)
    os.write(terminal.master, b"%%trainjob\necho started\nsleep 1000\n\n\n")
    terminal.wait_for(r"started\n", 60, start)
    time.sleep(0.3)
    os.write(terminal.master, b"\x03")  # Ctrl-C typed: the pty echoes ^C ...
    os.kill(terminal.proc.pid, signal.SIGINT)  # ... and (no controlling tty here) the SIGINT
    terminal.wait_for(r"interrupted: stopped the remote command", 30, start)
    out = terminal.text()[start:]
    assert "^C" in out, out  # the pty echoed it, as a terminal does
    assert not re.search(r"\^C(no )?exit code", out), out
    assert re.search(
        r"^(no exit code|exit code -?\d+) · [\d.]+ s · pod \S+ · interrupted$", out, re.M
    ), out
    assert terminal.exit() == 0, terminal.text()


def test_terminal_connect_counts_every_pod_of_the_job(
    terminal: TerminalIPython, own_cluster: Any
) -> None:
    """Issue 36, defect 6: an MPI job of 3 pods (launcher + 2 nodes) comes up node pods first
    (the launcher waits for them, the runtime's dependsOn); while it does, the connect's
    lines counted the pods created so far ("0/2 pods running"), not the job's 3."""
    assert "Error" not in terminal.run("%load_ext trainjob_magics")
    out = terminal.run("%trainjob_connect mpi-interactive --nodes 3", timeout=120)
    (job,) = trainjob_names(own_cluster.kubeconfig_path)
    counts = re.findall(rf"^\[\S+\] {job}: \w+, (\d+)/(\d+) pods running", out, re.M)
    assert counts, out
    assert all(total == "3" for _running, total in counts), out
    # the lines before the launcher existed say so too (the first said 0/2 before the fix)
    assert re.search(rf"\] {job}: Pending, 0/3 pods running - waiting for the launcher pod", out)
    assert counts[-1] == ("3", "3"), out
    assert terminal.exit() == 0, terminal.text()


def test_terminal_holding_lines_and_as_read_as_a_user_types_them(
    terminal: TerminalIPython, own_cluster: Any
) -> None:
    """Issue 36, defect 6, as a new user types it in terminal IPython: what a job holds reads
    naturally in %trainjob_sessions and %trainjob_status (never "holds held 7 s (0.0 CPU-h)"),
    and %%trainjob --as ALIAS works as %trainjob_connect --as ALIAS names the session."""
    assert "Error" not in terminal.run("%load_ext trainjob_magics")
    terminal.run("%trainjob_connect torch-distributed --nodes 2 --cpu 1 --as c", timeout=120)
    terminal.run("%trainjob_connect mpi-interactive --nodes 2 --as m", timeout=120)
    names = dict(re.findall(r"Session '(\w)' ready: TrainJob (\S+) ", terminal.text()))
    out = terminal.run("%trainjob_sessions")
    assert re.search(
        rf"^c \({names['c']}\): holds 2 CPU · held \d+ s \(<0\.1 CPU-h\) · idle \d+ s$", out, re.M
    ), out
    assert re.search(
        rf"^m \({names['m']}\): requests no GPU or CPU · up \d+ s · idle \d+ s$", out, re.M
    ), out
    out += terminal.run("%trainjob_status --as c")
    assert len(re.findall(r"holds 2 CPU · held ", out)) == 2, out  # sessions, then status: once
    assert "holds held" not in out and "0.0 CPU-h" not in out, out
    out = terminal.run("%%trainjob --as c\necho as-works-$((40+2))", timeout=60)
    assert "as-works-42\n" in out and f"pod {names['c']}-node-0-0-" in out, out
    out = terminal.run("%%trainjob --pod all --as m\necho as-all-$((1+1))", timeout=60)
    assert out.count("as-all-2") == 2 and "Error" not in out, out
    assert terminal.exit() == 0, terminal.text()
