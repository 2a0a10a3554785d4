"""``%%trainjob --python`` in a real kernel on the local cluster: state across cells, values,
remote tracebacks, Ctrl-C, ``--pod all`` ranks, push/pull, dropped connections, a missing
interpreter, and no interpreter process left after ``%trainjob_close``."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code, shown_text
from tests.helpers.polling import wait_until
from tests.integration.proctools import alive, processes_with_env, wait_dead
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(240)


def start(kernel: Kernel, cluster: LocalCluster, line: str = "torch-distributed --nodes 2") -> None:
    code = load_magics_code(cluster.kubeconfig_path, widgets="off")
    reply, msgs = kernel.run(code + f"\n%trainjob_connect {line}", timeout=120)
    assert reply["status"] == "ok", shown_text(msgs)


def results(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The data of the cell's execute_result and display_data messages."""
    return [
        m["content"]["data"] for m in msgs if m["msg_type"] in ("execute_result", "display_data")
    ]


def agent_pids(kernel: Kernel) -> dict[str, int]:
    """pod -> pid of its interpreter, as the interpreters themselves say."""
    reply, msgs = kernel.run("%%trainjob --python --pod all --quiet\nimport os\nos.getpid()")
    assert reply["status"] == "ok", shown_text(msgs)
    _reply, out = kernel.run_text("print({p: int(r.value) for p, r in _trainjob.items()})")
    return eval(out.strip())  # a dict literal printed by the kernel


def test_state_values_errors_and_pods(kernel: Kernel, cluster: LocalCluster) -> None:
    start(kernel, cluster)
    reply, msgs = kernel.run("%%trainjob --python\nmodel = {'w': 2}\nprint('loaded')\nmodel")
    assert reply["status"] == "ok", shown_text(msgs)
    assert "loaded" in shown_text(msgs)
    assert results(msgs)[-1]["text/plain"] == "{'w': 2}"
    reply, msgs = kernel.run(
        "%%trainjob --python\n"
        "class Table:\n"
        "    def _repr_html_(self): return '<b>w=%d</b>' % model['w']\n"
        "    def __repr__(self): return 'Table()'\n"
        "model['w'] += 1\n"
        "Table()"
    )
    assert reply["status"] == "ok", shown_text(msgs)
    data = results(msgs)[-1]
    assert data["text/html"] == "<b>w=3</b>" and data["text/plain"] == "Table()"

    reply, msgs = kernel.run("%%trainjob --python\ndef f(x):\n    return x / 0\nf(model['w'])")
    assert reply["status"] == "error" and reply["ename"] == "RemotePythonCellError"
    assert "ZeroDivisionError: division by zero" in reply["evalue"]
    tb = "\n".join(reply["traceback"])
    assert 'File "<cell-' in tb and "return x / 0" in tb and "ZeroDivisionError" in tb
    assert "trainjob-magics-agent" not in tb and "remote_agent" not in tb

    reply, msgs = kernel.run("%%trainjob --python\nx = = 1")
    assert reply["status"] == "error" and "SyntaxError" in reply["evalue"]
    assert "x = = 1" in "\n".join(reply["traceback"])

    # --pod all: one interpreter per pod, each with the pod's own rank
    reply, msgs = kernel.run(
        "%%trainjob --python --pod all\nimport os\nrank = int(os.environ['PET_NODE_RANK'])\nrank"
    )
    assert reply["status"] == "ok", shown_text(msgs)
    shown = shown_text(msgs)
    assert "[node-0] 0" in shown and "[node-1] 1" in shown
    assert "[node-0] ok · " in shown and "exit code" not in shown  # no exit code for Python
    pids = agent_pids(kernel)
    assert len(set(pids.values())) == 2

    # push and pull round-trip a dict; --pod all gives pod -> value
    reply, msgs = kernel.run("cfg = {'lr': 0.1, 'layers': [1, 2]}\n%trainjob_push cfg --pod all")
    assert reply["status"] == "ok", shown_text(msgs)
    assert "pushed cfg to 2 pods" in shown_text(msgs)
    reply, msgs = kernel.run("%%trainjob --python --pod all\ncfg['rank'] = rank\nback = cfg\nNone")
    assert reply["status"] == "ok", shown_text(msgs)
    reply, out = kernel.run_text(
        "%trainjob_pull back --pod all\nprint(sorted(back.values(), key=str))"
    )
    assert reply["status"] == "ok", out
    assert "{'lr': 0.1, 'layers': [1, 2], 'rank': 0}" in out
    assert "{'lr': 0.1, 'layers': [1, 2], 'rank': 1}" in out
    reply, out = kernel.run_text("%trainjob_pull model\nprint(model)")
    assert reply["status"] == "ok" and "{'w': 3}" in out
    reply, out = kernel.run_text("%trainjob_pull rank --pod node-1\nprint(rank)")
    assert reply["status"] == "ok" and out.strip().endswith("1"), out  # one pod: its value

    # an exception on one pod fails the cell with that pod's traceback, the others' output stays
    reply, msgs = kernel.run(
        "%%trainjob --python --pod all\nprint('before', rank)\nif rank == 1:\n"
        "    raise RuntimeError('only on rank 1')\nrank"
    )
    assert reply["status"] == "error" and "RuntimeError: only on rank 1" in reply["evalue"]
    tb = "\n".join(reply["traceback"])
    assert "[node-1]" in tb and "raise RuntimeError('only on rank 1')" in tb
    shown = shown_text(msgs)
    assert "before 0" in shown and "before 1" in shown and "RuntimeError: only on rank 1" in shown

    # an unpicklable value: one line naming it
    reply, _ = kernel.run("import threading\nlk = threading.Lock()\n%trainjob_push lk")
    assert reply["status"] == "error" and "cannot push 'lk'" in reply["evalue"]
    assert len(reply["traceback"]) == 1

    # reset: new interpreters, the names are gone
    reply, out = kernel.run_text("%trainjob_python_reset --pod all")
    assert reply["status"] == "ok" and "state is gone" in out
    assert wait_dead(list(pids.values()), 10) == []
    reply, _ = kernel.run("%%trainjob --python\nmodel")
    assert reply["status"] == "error" and "NameError" in reply["evalue"]

    # the interpreters' processes end with the session
    pids = agent_pids(kernel)
    assert all(alive(p) for p in pids.values())
    reply, _ = kernel.run("%trainjob_close")
    assert reply["status"] == "ok"
    assert wait_dead(list(pids.values()), 20) == []


def test_ctrl_c_keeps_state_and_dropped_connection_keeps_it(
    kernel: Kernel, cluster: LocalCluster
) -> None:
    start(kernel, cluster, "mpi-interactive")
    reply, msgs = kernel.run("%%trainjob --python\nimport time\nkept = 'yes'\nkept")
    assert reply["status"] == "ok", shown_text(msgs)

    msg_id = kernel.kc.execute(
        "%%trainjob --python\nprint('sleeping', flush=True)\ntime.sleep(1000)"
    )
    msgs: list[dict[str, Any]] = []

    def seen(text: str) -> bool:
        while True:
            try:
                m = kernel.kc.get_iopub_msg(timeout=0.2)
            except Exception:
                return text in shown_text(msgs)
            if m["parent_header"].get("msg_id") == msg_id:
                msgs.append(m)

    assert wait_until(lambda: seen("sleeping"), timeout=30), "the cell printed nothing"
    t0 = time.monotonic()
    kernel.km.interrupt_kernel()
    reply = kernel.kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.kc.get_shell_msg(timeout=30)
    assert time.monotonic() - t0 < 5
    assert reply["content"]["status"] == "error"
    assert "KeyboardInterrupt" in reply["content"]["evalue"]
    assert "keeps its state" in reply["content"]["evalue"]
    reply, msgs = kernel.run("%%trainjob --python\nkept")
    assert reply["status"] == "ok" and results(msgs)[-1]["text/plain"] == "'yes'"

    # a dropped exec connection: the code goes on in the pod, the state stays
    reply, _ = kernel.run(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        "pod = loaded_magics(get_ipython()).registry.find().session.pod"
    )
    _r, out = kernel.run_text("print(pod)")
    cluster.faults.drop_exec(out.strip(), after_bytes=2000)
    reply, msgs = kernel.run(
        "%%trainjob --python\nfor i in range(200):\n    print('x' * 50)\nafter_drop = i\n"
    )
    assert reply["status"] == "error" and reply["ename"] == "ConnectionLostError", reply
    assert "keeps running there with its state" in reply["evalue"]
    cluster.faults.clear()
    reply, msgs = kernel.run("%%trainjob --python\n(kept, after_drop)")
    assert reply["status"] == "ok", shown_text(msgs)
    assert results(msgs)[-1]["text/plain"] == "('yes', 199)"
    reply, _ = kernel.run("%trainjob_close")
    assert reply["status"] == "ok"


def test_missing_interpreter_is_one_line(kernel: Kernel, cluster: LocalCluster) -> None:
    start(kernel, cluster, "mpi-interactive")
    reply, _ = kernel.run("%config TrainJobMagics.python = 'python3-not-here'")
    assert reply["status"] == "ok"
    reply, _ = kernel.run("%%trainjob --python\n1 + 1")
    assert reply["status"] == "error" and reply["ename"] == "PythonNotFoundError"
    assert len(reply["traceback"]) == 1
    assert "'python3-not-here'" in reply["evalue"] and "TrainJobMagics.python" in reply["evalue"]
    reply, _ = kernel.run("%trainjob_close")
    assert reply["status"] == "ok"


def test_interpreters_live_in_the_pods_process_groups(cluster: LocalCluster) -> None:
    """Deleting the pods (closing the session) ends the interpreters: no stray process."""
    from trainjob_magics import connect

    s = connect("mpi-interactive", num_nodes=2, config_file=str(cluster.kubeconfig_path))
    try:
        r = s.python("import os\nos.getpid()", pods="all")
        pids = [int(one.value) for one in r.values()]
        assert all(alive(p) for p in pids)
        pods = list(r)
    finally:
        s.close(timeout=30)
    assert wait_dead(pids, 20) == []
    assert all(processes_with_env("POD_NAME", pod) == [] for pod in pods)


def test_pods_sharing_their_tmp_have_an_interpreter_each(cluster: LocalCluster) -> None:
    """Two pods with one TMPDIR (as a shared hostPath /tmp would be): each pod's code runs in
    its own interpreter, in that pod, and its state is its own."""
    from trainjob_magics import connect

    shared = cluster.root / "shared-tmp"
    shared.mkdir(exist_ok=True)
    s = connect(
        "mpi-interactive",
        num_nodes=2,
        env={"TMPDIR": str(shared)},
        config_file=str(cluster.kubeconfig_path),
    )
    try:
        r = s.python("import os\nmine = os.environ['POD_NAME']\n(os.getpid(), mine)", pods="all")
        assert r.ok, {p: one.error for p, one in r.items()}
        seen = {pod: eval(one.value) for pod, one in r.items()}
        assert len({pid for pid, _ in seen.values()}) == len(seen) >= 2
        assert all(name == pod for pod, (_pid, name) in seen.items())
        again = s.python("mine", pods="all")
        assert {pod: eval(one.value) for pod, one in again.items()} == {p: p for p in seen}
    finally:
        s.close(timeout=30)


def test_engine_streams_live_times_out_and_kills_code_that_ignores_sigint(
    cluster: LocalCluster,
) -> None:
    from trainjob_magics import connect
    from trainjob_magics.engine import errors as E

    s = connect("mpi-interactive", config_file=str(cluster.kubeconfig_path))
    try:
        seen: list[tuple[str, str]] = []
        first = threading.Event()

        def on_output(pod: str, stream: str, text: str) -> None:
            seen.append((stream, text))
            if stream == "stderr":  # printed last before the sleep
                first.set()

        run = s.start_python(
            "import sys, time\nkept = 7\nprint('10%\\r', end='', flush=True)\n"
            "print('warn', file=sys.stderr)\ntime.sleep(1000)",
            on_output=on_output,
        )
        assert first.wait(30), "no output streamed while the code ran"
        assert not run.done
        error = run.interrupt()
        assert isinstance(error, E.CommandInterruptedError)
        assert error.partial.error.type == "KeyboardInterrupt"
        assert error.partial.stdout == "10%\r" and error.partial.stderr == "warn\n"
        assert ("stdout", "10%\r") in seen

        with pytest.raises(E.ExecTimeoutError) as info:
            s.python("time.sleep(1000)", timeout=1)
        assert "did not finish within 1s" in str(info.value) and "keeps its state" in str(
            info.value
        )
        assert s.python("kept").value == "7"
        # big requests go through the Python client (the sh one reads stdin byte by byte)
        assert s.push(big=list(range(20000))) == [s.pod]
        assert s.python("len(big)\n" + "#" * 20000 + "\n").value == "20000"
        assert s.pull("big")[-1] == 19999

        pid = int(s.python("import os, signal\nos.getpid()").value)
        ready = threading.Event()
        run = s.start_python(
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\n"
            "time.sleep(1000)",
            on_output=lambda pod, stream, text: ready.set(),
        )
        assert ready.wait(30)
        error = run.interrupt()
        assert "was killed: its state is lost" in str(error)
        assert wait_dead([pid], 5) == []
        r = s.python("'kept' in dir()")
        assert r.value == "False"  # a new interpreter
        r = s.python("import os\nos._exit(3)")
        assert r.error is not None and r.error.type == "InterpreterLost"
        assert "its state is lost" in r.error.message
        assert s.python("'kept' in dir()").value == "False"
    finally:
        s.close(timeout=30)
