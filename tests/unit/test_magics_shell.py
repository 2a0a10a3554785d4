"""Magics in a real InteractiveShell over a fake engine (real subprocesses stream the output)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from trainjob_magics.engine import CommandRun, PodRef
from trainjob_magics.engine.exec.commands import CommandGroup
from trainjob_magics.engine.exec.inflight import InFlightCommand
from trainjob_magics.engine.result import ExecResult, JobStatus, PodInfo
from trainjob_magics.magics import (
    TrainJobCellError,
    TrainJobMagicError,
    TrainJobUsageError,
    last_result,
)
from trainjob_magics.magics.extension import loaded_magics
from trainjob_magics.magics.host import EngineCalls

pytestmark = pytest.mark.timeout(60)


class NoStopper:
    """A runner that cannot stop the fake's local process (like a bare executable)."""

    def interrupt(self, only: Any = None) -> list[Any]:
        return []


class FakeSession:
    def __init__(self, name: str, namespace: str, runtime: str) -> None:
        self.name, self.namespace, self.runtime = name, namespace, runtime
        self.trainer_pod = f"{name}-launcher-0"
        self.closed = False
        self.calls: list[Any] = []

    def status(self) -> JobStatus:
        pod = PodInfo(self.trainer_pod, "launcher", "Running", True, "local", 0, None, "", True)
        state = "Deleted" if self.closed else "Running"
        return JobStatus(
            self.name, self.namespace, self.runtime, state, "", [pod], self.trainer_pod, 0.5
        )

    def execute(
        self,
        command: Any,
        container: Any = None,
        stdin: Any = None,
        timeout: Any = None,
        on_output: Any = None,
    ) -> ExecResult:
        self.calls.append((command, container, timeout))
        t0 = time.monotonic()
        p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.got = got  # what a CommandRun snapshot reads while the command runs

        def read(f: Any, name: str) -> None:
            for chunk in iter(lambda: f.read1(4096), b""):
                got[name].append(chunk)
                if on_output:
                    on_output(name, chunk.decode())

        ts = [
            threading.Thread(target=read, args=(p.stdout, "stdout")),
            threading.Thread(target=read, args=(p.stderr, "stderr")),
        ]
        for t in ts:
            t.start()
        p.wait()
        for t in ts:
            t.join()
        out, err = b"".join(got["stdout"]), b"".join(got["stderr"])
        return ExecResult(
            out.decode(),
            err.decode(),
            p.returncode,
            time.monotonic() - t0,
            out,
            err,
            self.trainer_pod,
        )

    @property
    def pod(self) -> str:
        return self.trainer_pod

    def start(self, command: Any, **kw: Any) -> CommandRun:
        """What the magics call: ``execute`` in the background (the engine's CommandRun)."""
        on_output = kw.get("on_output")
        out = functools.partial(on_output, self.pod) if on_output else None
        ref = PodRef(self.pod, "trainer", 0, "Running")

        def so_far() -> ExecResult:
            got = self.got
            return ExecResult(
                b"".join(got["stdout"]).decode(), b"".join(got["stderr"]).decode(), pod=self.pod
            )

        def work(group: CommandGroup) -> ExecResult:
            self.got = {"stdout": [], "stderr": []}
            group.joined("fake", InFlightCommand(self.pod, None, None, snapshot=so_far))
            return self.execute(command, kw.get("container"), None, kw.get("timeout"), out)

        return CommandRun(work, CommandGroup(NoStopper()), [ref], multi=False).start()  # type: ignore[arg-type]

    def close(self, timeout: float = 180) -> None:
        self.closed = True


class FakeEngine:
    def __init__(self) -> None:
        self.sessions: list[FakeSession] = []
        self.kwargs: list[dict[str, Any]] = []
        self.block = threading.Event()
        self.blocking = False
        self.deleted: list[str] = []
        self.n = 0

    def new_name(self) -> str:
        self.n += 1
        return f"job{self.n}"

    def connect(self, runtime: str, on_status: Any = None, **kw: Any) -> FakeSession:
        self.kwargs.append({"runtime": runtime, **kw})
        s = FakeSession(kw["name"], kw.get("namespace") or "default", runtime)
        for state in ("Creating", "Pending", "Running"):
            st = s.status()
            st.state = state
            if on_status:
                on_status(st)
            if self.blocking:
                self.block.wait(20)
                raise RuntimeError("deleted while waiting")
        self.sessions.append(s)
        return s

    def attach(self, name: str, on_status: Any = None, **kw: Any) -> FakeSession:
        self.kwargs.append({"attach": name, **kw})
        s = FakeSession(name, kw.get("namespace") or "default", "torch-distributed")
        self.sessions.append(s)
        return s

    def delete(self, name: str, **kw: Any) -> bool:
        self.deleted.append(name)
        self.block.set()
        return True


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


def inject(shell: InteractiveShell, fake: FakeEngine) -> None:
    """The magics' engine calls, replaced by the fake's (the host's test seam)."""
    magics = loaded_magics(shell)
    assert magics is not None
    magics.host.engine = EngineCalls(
        connect=fake.connect,
        attach=fake.attach,
        new_name=fake.new_name,
        abandon=lambda name, *a, **k: fake.delete(name),
    )


@pytest.fixture
def shell(engine: FakeEngine) -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "trainjob_magics.magics")
    inject(sh, engine)
    sh.run_line_magic("config", "TrainJobMagics.update_interval = 0.0")
    yield sh
    sh.run_line_magic("unload_ext", "trainjob_magics.magics")
    sh.config.pop("TrainJobMagics", None)  # %config persists in the shell's config


def test_load_twice_is_harmless(shell: InteractiveShell) -> None:
    from trainjob_magics.magics.extension import load_ipython_extension

    load_ipython_extension(shell)
    mine = [c for c in shell.configurables if type(c).__name__ == "TrainJobMagics"]
    assert len(mine) == 1
    assert "trainjob" in shell.magics_manager.magics["cell"]


def test_help_documents_every_option(shell: InteractiveShell) -> None:
    doc = shell.find_line_magic("trainjob_connect").__doc__
    for opt in (
        "--nodes",
        "--image",
        "--cpu",
        "--memory",
        "--gpu",
        "--env",
        "--name",
        "--namespace",
        "--context",
        "--kubeconfig",
        "--timeout",
        "--as",
        "--attach",
        "--replace",
    ):
        assert opt in doc
    doc = shell.find_cell_magic("trainjob").__doc__
    for opt in (
        "--container",
        "--timeout",
        "--out",
        "--err",
        "--result",
        "--no-raise-error",
        "--quiet",
    ):
        assert opt in doc
    assert "--all" in shell.find_line_magic("trainjob_close").__doc__


def test_connect_maps_options_and_reuses(
    shell: InteractiveShell, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    line = (
        "mpi-interactive --nodes 4 --image img:1 --cpu 2 --memory 1Gi --gpu 1 "
        "--env A=1 B=x=y --env C= --namespace ns1 --timeout 30"
    )
    shell.run_line_magic("trainjob_connect", line)
    kw = engine.kwargs[-1]
    assert kw["runtime"] == "mpi-interactive" and kw["num_nodes"] == 4 and kw["image"] == "img:1"
    assert kw["cpu"] == "2" and kw["memory"] == "1Gi" and kw["gpu"] == 1
    assert kw["env"] == {"A": "1", "B": "x=y", "C": ""} and kw["namespace"] == "ns1"
    assert kw["timeout"] == 30 and kw["command"] is None
    out = capsys.readouterr().out
    assert "Pending" in out and "Session 'default' ready: TrainJob job1" in out
    shell.run_line_magic("trainjob_connect", line)
    assert len(engine.kwargs) == 1
    assert "Reusing the live session 'default'" in capsys.readouterr().out
    with pytest.raises(TrainJobUsageError, match="%trainjob_close default first, add --replace"):
        shell.run_line_magic("trainjob_connect", "mpi-interactive --nodes 2")
    shell.run_line_magic("trainjob_connect", "mpi-interactive --nodes 2 --replace")
    assert engine.sessions[0].closed and len(engine.kwargs) == 2


def test_config_changes_behaviour(shell: InteractiveShell, engine: FakeEngine) -> None:
    shell.run_line_magic("config", "TrainJobMagics.default_runtime = 'torch-distributed'")
    shell.run_line_magic("config", "TrainJobMagics.namespace = 'team-a'")
    shell.run_line_magic("config", "TrainJobMagics.connect_timeout = 12.0")
    shell.run_line_magic("config", "TrainJobMagics.keep_alive_command = 'sleep 99'")
    shell.run_line_magic("trainjob_connect", "")
    kw = engine.kwargs[-1]
    assert (kw["runtime"], kw["namespace"], kw["timeout"]) == ("torch-distributed", "team-a", 12.0)
    assert kw["command"] == ["sh", "-c", "sleep 99"]
    shell.run_line_magic("config", "TrainJobMagics.raise_on_error = False")
    shell.run_cell_magic("trainjob", "", "exit 4")
    assert last_result().returncode == 4


def test_exec_streams_live_and_stores_results(
    shell: InteractiveShell, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    shell.run_cell_magic(
        "trainjob",
        "--out o --err e --result r",
        'echo "it\'s \\"quoted\\" $((1+1))"; echo warn >&2',
    )
    assert engine.sessions[0].calls[-1][0][:2] == ["sh", "-c"]
    ns = shell.user_ns
    assert ns["o"] == 'it\'s "quoted" 2\n' and ns["e"] == "warn\n"
    assert ns["r"].returncode == 0 and ns["_trainjob"] is ns["r"] is last_result()
    captured = capsys.readouterr()
    assert 'it\'s "quoted" 2' in captured.out and "warn" in captured.err
    assert "exit code 0" in captured.out


def test_nonzero_exit_raises_one_line(
    shell: InteractiveShell, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    with pytest.raises(TrainJobCellError, match=r"exited with code 3 \(pod job1-launcher-0\)"):
        shell.run_cell_magic("trainjob", "--result r", "echo before; exit 3")
    assert shell.user_ns["r"].stdout == "before\n"
    capsys.readouterr()
    res = shell.run_cell("%%trainjob\necho shown\nexit 5\n")
    assert not res.success and isinstance(res.error_in_exec, TrainJobCellError)
    out = capsys.readouterr().out
    assert "shown" in out and "exit code 5" in out
    assert "Traceback" not in out
    err_lines = [x for x in out.splitlines() if "TrainJobCellError" in x]
    assert len(err_lines) == 1 and "exited with code 5" in err_lines[0]
    shell.run_cell_magic("trainjob", "--no-raise-error", "exit 6")
    assert last_result().returncode == 6


def test_quiet_shows_nothing(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "--quiet --out o", "echo secret-ish")
    assert capsys.readouterr().out == "" and shell.user_ns["o"] == "secret-ish\n"


def test_two_sessions_side_by_side(
    shell: InteractiveShell, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as a")
    shell.run_line_magic("trainjob_connect", "torch-distributed --as b")
    shell.run_cell_magic("trainjob", "a", "echo in-a")
    assert last_result().pod == "job1-launcher-0"
    shell.run_cell_magic("trainjob", "", "echo in-default")
    assert last_result().pod == "job2-launcher-0"
    capsys.readouterr()
    shell.run_line_magic("trainjob_sessions", "")
    out = capsys.readouterr().out
    assert "a" in out and "b *" in out and "torch-distributed" in out
    with pytest.raises(TrainJobUsageError, match="no session named 'zz'"):
        shell.run_cell_magic("trainjob", "zz", "echo")
    shell.run_line_magic("trainjob_close", "--all")
    assert all(s.closed for s in engine.sessions)
    assert "Closed session 'a'" in capsys.readouterr().out


def test_status_text(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as a")
    capsys.readouterr()
    shell.run_line_magic("trainjob_status", "a")
    out = capsys.readouterr().out
    assert "TrainJob job1" in out and "job1-launcher-0 *" in out


def test_attach(shell: InteractiveShell, engine: FakeEngine) -> None:
    shell.run_line_magic("trainjob_connect", "--attach existing1")
    assert engine.kwargs[-1]["attach"] == "existing1"
    shell.run_cell_magic("trainjob", "existing1", "true")
    with pytest.raises(TrainJobUsageError, match="drop --nodes"):
        shell.run_line_magic("trainjob_connect", "--attach x --nodes 2")


@pytest.mark.parametrize(
    "magic,line,cell,match",
    [
        ("trainjob_connect", "mpi-interactive --nodes 0", None, "--nodes must be at least 1"),
        ("trainjob_connect", "mpi-interactive --env NOEQ", None, "--env expects KEY=VALUE"),
        ("trainjob_connect", "", None, "no runtime"),
        ("trainjob_connect", "mpi-interactive --bogus", None, "unrecognized arguments: --bogus"),
        ("trainjob", "--out 1x", "echo", "--out expects a Python variable name"),
        ("trainjob", "", "   \n  ", "the cell is empty"),
        ("trainjob", "", "echo", "no TrainJob session in this kernel"),
        ("trainjob_close", "a --all", None, "either an ALIAS or --all"),
    ],
)
def test_usage_errors(
    shell: InteractiveShell, engine: FakeEngine, magic: str, line: str, cell: str | None, match: str
) -> None:
    with pytest.raises(TrainJobUsageError, match=match):
        if cell is None:
            shell.run_line_magic(magic, line)
        else:
            shell.run_cell_magic(magic, line, cell)
    assert engine.kwargs == []


def _sigint_after(seconds: float) -> threading.Timer:
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_interrupt_during_cell_fails_with_one_line(shell: InteractiveShell) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    _sigint_after(0.5)
    t0 = time.monotonic()
    with pytest.raises(TrainJobCellError, match="interrupted") as info:
        shell.run_cell_magic("trainjob", "--result r", "echo started; sleep 3")
    assert time.monotonic() - t0 < 2.5
    assert info.value.result.stdout == "started\n" and shell.user_ns["r"].returncode is None


def test_interrupt_while_connecting_deletes_the_job(
    shell: InteractiveShell, engine: FakeEngine
) -> None:
    engine.blocking = True
    _sigint_after(0.5)
    with pytest.raises(TrainJobMagicError, match="TrainJob job1 in default is deleted"):
        shell.run_line_magic("trainjob_connect", "mpi-interactive")
    assert engine.deleted == ["job1"]
    assert len(shell.find_line_magic("trainjob_connect").__self__.registry) == 0


def test_reset_and_unload_close_sessions(shell: InteractiveShell, engine: FakeEngine) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as a")
    shell.run_line_magic("reset", "-f")
    assert engine.sessions[0].closed
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as b")
    shell.run_line_magic("unload_ext", "trainjob_magics.magics")
    assert engine.sessions[1].closed
    assert "trainjob" not in shell.magics_manager.magics["cell"]
    assert "reset" not in vars(shell)
    shell.run_line_magic("load_ext", "trainjob_magics.magics")


def test_widgets_on_in_plain_shell(
    shell: InteractiveShell, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("config", "TrainJobMagics.widgets = 'on'")
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    shell.run_cell_magic("trainjob", "", "echo hello-widget")
    out = capsys.readouterr().out
    # a plain shell prints the text/plain fallback of the widget displays
    assert "TrainJob job1" in out and "hello-widget" in out and "exit code 0" in out
    shell.run_line_magic("config", "TrainJobMagics.widgets = 'auto'")
