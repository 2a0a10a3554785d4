"""What the sidebar and the live panels read stays true (issue 36), in a real kernel against the
local cluster: a close refused for a live detached run, or a kernel exit that leaves the run
going, notes no "Closing (...)" state on the TrainJob; the job's record reads its real state
("Failed" once the run exits 3)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import get_trainjob
from tests.helpers.polling import wait_until
from trainjob_magics.engine.inventory.notes import annotate
from trainjob_magics.engine.inventory.records import session_record
from trainjob_magics.engine.inventory.service import SessionInventory
from trainjob_magics.engine.trainjob.targets import list_job_pods
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(240)

CLOSED_BY = "trainjob-magics/closed-by"
SESSION = "get_ipython().magics_manager.registry['TrainJobMagics'].registry.find"


def _notes(cluster: LocalCluster, name: str) -> dict[str, str]:
    job = get_trainjob(cluster.kubeconfig_path, name) or {}
    return dict((job.get("metadata") or {}).get("annotations") or {})


def _record(cluster: LocalCluster, name: str) -> dict[str, Any]:
    """The job's record as the server extension sends it to the sidebar and the panels."""
    job = get_trainjob(cluster.kubeconfig_path, name)
    assert job is not None, f"TrainJob {name} is gone"
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        return session_record(job, list_job_pods(api, "default", name))
    finally:
        api.close()


def _ok(kernel: Kernel, code: str, timeout: float = 90) -> str:
    reply, out = kernel.run_text(code, timeout=timeout)
    assert reply["status"] == "ok", out
    return out


def test_refused_close_and_kernel_restart_leave_no_closing_state(
    cluster: LocalCluster, kernel: Kernel, tmp_path: Path
) -> None:
    go = tmp_path / "end-the-run"
    _ok(kernel, load_magics_code(cluster.kubeconfig_path))
    _ok(kernel, "%trainjob_connect mpi-interactive", timeout=120)
    _ok(kernel, f"%%trainjob --detach\nwhile [ ! -e {go} ]; do sleep 0.1; done; exit 3\n")
    name = _ok(kernel, "print(_trainjob.trainjob)").strip()

    # %trainjob_close refused (the run lives): no note, the record says Running
    reply, out = kernel.run_text("%trainjob_close")
    assert reply["status"] == "error" and "closing would kill it" in out, out
    assert CLOSED_BY not in _notes(cluster, name)
    record = _record(cluster, name)
    assert (record["state"], record["closing"]) == ("Running", ""), record

    # Kernel > Restart leaves the job to its run: no "Closing (kernel exit)" either
    kernel.restart()
    assert CLOSED_BY not in _notes(cluster, name)
    assert _record(cluster, name)["closing"] == ""

    # attached from the new kernel, the run exits 3: the record reads Failed, nothing else
    _ok(kernel, load_magics_code(cluster.kubeconfig_path))
    _ok(kernel, f"%trainjob_connect --attach {name}", timeout=120)
    go.touch()
    record = wait_until(
        lambda: (r := _record(cluster, name))["state"] == "Failed" and r, timeout=60
    )
    assert record["closing"] == "", record
    assert CLOSED_BY not in _notes(cluster, name)


def test_attach_clears_a_closing_note_left_by_a_close_that_never_went_ahead(
    cluster: LocalCluster, kernel: Kernel
) -> None:
    """A job noted "Closing (kernel exit)" by a version before the fix reads true again once
    a kernel attaches to it."""
    _ok(kernel, load_magics_code(cluster.kubeconfig_path))
    _ok(kernel, "%trainjob_connect mpi-interactive --as a", timeout=120)
    name = _ok(kernel, f"print({SESSION}('a').session.name)").strip()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        annotate(api, "default", name, {CLOSED_BY: "kernel exit"})
    finally:
        api.close()
    assert _record(cluster, name)["closing"] == "kernel exit"
    _ok(kernel, f"%trainjob_connect --attach {name} --as b", timeout=120)
    assert CLOSED_BY not in _notes(cluster, name)
    assert _record(cluster, name)["closing"] == ""


def test_the_last_command_note_is_when_the_command_ended(
    cluster: LocalCluster, kernel: Kernel
) -> None:
    """The sidebar's idle time counts from the end of the last command: the kernel writes it
    when the command ends, not at most once a minute (which read "idle 21 s" 2 s after a cell)."""
    _ok(kernel, load_magics_code(cluster.kubeconfig_path))
    _ok(kernel, "%trainjob_connect mpi-interactive --as a", timeout=120)
    name = _ok(kernel, f"print({SESSION}('a').session.name)").strip()
    _ok(kernel, "%%trainjob\nsleep 6")
    ended = datetime.now(timezone.utc)  # after the cell: the command ended before this

    def noted() -> datetime | None:
        when = _notes(cluster, name).get("trainjob-magics/last-command")
        return datetime.fromisoformat(when.replace("Z", "+00:00")) if when else None

    # written by then or soon after, and it is the end (the start was 6 s before it)
    last = wait_until(lambda: (t := noted()) and t >= ended - timedelta(seconds=2) and t)
    assert last <= ended + timedelta(seconds=1), (last, ended)
    idle = _record(cluster, name)["holds"]["idleSeconds"]
    assert idle is not None and idle <= (datetime.now(timezone.utc) - ended).total_seconds() + 1.5


def _cell_error(kernel: Kernel, code: str) -> str:
    reply, out = kernel.run_text(code, timeout=120)
    assert reply["status"] == "error", out
    return out


@pytest.mark.parametrize("how", ["sidebar", "kubectl"])
def test_the_next_cell_says_who_deleted_the_job_and_the_magic_to_run(
    cluster: LocalCluster, kernel: Kernel, kubectl: Any, how: str
) -> None:
    """After a close from the sidebar (the server extension's close) or a kubectl delete, the
    next cell says what happened and the magic to run next, in one line: not the Python API's
    "start a new session with connect(...)", and no "no exit code · 0.00 s" footer (text
    views: the footer is in the cell's text)."""
    _ok(kernel, load_magics_code(cluster.kubeconfig_path, widgets="off"))
    _ok(kernel, "%trainjob_connect mpi-interactive --as a", timeout=120)
    _ok(kernel, "%%trainjob a\necho ran")
    name = _ok(kernel, f"print({SESSION}('a').session.name)").strip()
    if how == "sidebar":
        inventory = SessionInventory(config_file=str(cluster.kubeconfig_path))
        try:
            inventory.close("default", name)
        finally:
            inventory.stop()
        why = "closed by the sidebar"
    else:
        kubectl("delete", "trainjob", name)
        why = "deleted outside trainjob-magics (e.g. kubectl delete)"
    out = _cell_error(kernel, "%%trainjob a\necho again")
    lines = [line for line in out.strip().splitlines() if line.strip()]
    assert len(lines) == 1, out  # no footer: nothing ran
    assert re.fullmatch(
        rf"\S*TrainJobMagicError\S*: TrainJob {name} of session 'a' is gone, {re.escape(why)}"
        r"( at \d\d:\d\d:\d\d)?: start a new session with %trainjob_connect mpi-interactive --as a "
        r"\(and the options you used\)",
        lines[0],
    ), lines[0]
    assert "connect(...)" not in out and "exit code" not in out and "0.00 s" not in out
    # the magic it names works: a new session under the same alias
    _ok(kernel, "%trainjob_connect mpi-interactive --as a", timeout=120)
    _ok(kernel, "%%trainjob a\necho again")


def test_holding_lines_and_as_read_true(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """%trainjob_sessions and %trainjob_status: one holding line each, never "holds held" or
    "(0.0 CPU-h)" (pods that request nothing); %%trainjob --as ALIAS as %trainjob_connect takes
    it."""
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as a")
    capsys.readouterr()
    shell.run_line_magic("trainjob_sessions", "")
    shell.run_line_magic("trainjob_status", "a")
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if "requests no GPU or CPU · up " in x]
    assert len(lines) == 2 and lines[0].startswith("a ("), out
    assert "holds held" not in out and "0.0 CPU-h" not in out, out
    ok = shell.run_cell("%%trainjob --as a\necho as-works").success
    assert ok and "as-works" in capsys.readouterr().out
