"""``%%trainjob`` with mpirun on the local cluster's 4-pod MPI job: the ranks' plain text, the
footer, the failed rank as the cell's last line, the world check, and the ranks' panel (folding,
the failed rank first, live updates, its text form)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics import TrainJobCellError
from trainjob_magics.magics import cell as cell_module
from trainjob_magics.magics.views.ranks import RanksWidgetView

pytestmark = pytest.mark.timeout(150)

RANKS = 'mpirun sh -c "echo rank \\$OMPI_COMM_WORLD_RANK on \\$HOSTNAME"'
FAIL_2 = (
    'mpirun sh -c "echo hello \\$OMPI_COMM_WORLD_RANK; '
    'if [ \\$OMPI_COMM_WORLD_RANK = 2 ]; then echo last words of 2; exit 3; fi; sleep 2"'
)
NOTE = "ranks tagged by mpirun --tag-output (hosts from --display-map)"
# Open MPI prints its report naming the first failed rank ("mpirun detected that one or more
# processes exited with non-zero status ... Process name: [[J,1],R]") in most runs, not all: in
# the others only "Primary job terminated normally, but 1 process returned a non-zero exit
# code" (seen with 4.1.4 here and 5.0.7 on the real node). The cell then says the launcher named
# no rank; the tests run the cell again (up to REPORT_TRIES times) until mpirun names one.
REPORT = "mpirun detected that one or more processes exited"
REPORT_TRIES = 6
NOT_READ = (
    "unset OMPI_MCA_orte_default_hostfile TRAINJOB_LOCAL_HOSTFILE; "
    "export OMPI_MCA_rmaps_base_oversubscribe=1; mpirun -np 4 hostname"
)


@pytest.fixture(scope="module")
def shell(local_cluster: LocalCluster) -> Iterator[InteractiveShell]:
    with magics_shell(local_cluster.kubeconfig_path, widgets="off") as sh:
        sh.run_line_magic("trainjob_connect", "mpi-interactive --nodes 4")
        try:
            yield sh
        finally:
            sh.run_line_magic("trainjob_close", "--all")


def pods(sh: InteractiveShell, target: str) -> list[str]:
    host = sh.find_line_magic("trainjob_connect").__self__
    return [p.name for p in host.registry.find().session.pods(target)]


def test_plain_text_output_as_mpirun_prints_it_then_the_ranks(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "", "echo before; " + RANKS)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "before"
    ranks = re.findall(r"^rank (\d) on (\S+)$", out, re.M)  # as an untagged mpirun prints
    assert sorted(int(r) for r, _ in ranks) == [0, 1, 2, 3], out
    footer = next(i for i, ln in enumerate(lines) if ln.startswith("exit code 0"))
    assert lines[footer].endswith(NOTE)
    # then the ranks: 4 rows (each printed its own line), each with its pod
    assert lines[footer + 1] == "4 ranks", out
    rows = lines[footer + 2 : footer + 6]
    assert all(re.match(r"  ✓ rank \d · \S+ · exit 0  \| rank \d on \S+$", r) for r in rows), rows
    result = shell.user_ns["_trainjob"]
    assert sorted(result.by_rank) == [0, 1, 2, 3]
    assert {o.pod for o in result.by_rank.values()} == set(pods(shell, "all"))


def test_alike_ranks_fold_in_the_text_and_the_failed_rank_comes_first(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # rank 3 fails a second after it printed; a loaded machine may start another rank later
    # still, and mpirun stops the job before it prints: the cell runs again then, as it does
    # when mpirun names no rank
    for _ in range(REPORT_TRIES):
        capsys.readouterr()
        with pytest.raises(TrainJobCellError) as info:
            shell.run_cell_magic(
                "trainjob",
                "",
                'mpirun sh -c "echo same; [ \\$OMPI_COMM_WORLD_RANK = 3 ] && sleep 1 && exit 5; '
                'sleep 3"',
            )
        captured = capsys.readouterr()
        if REPORT in captured.err + captured.out and "4 ranks · 1 ✗" in captured.out:
            break
        assert "4 ranks · 1 ✗" in captured.out or "it named no rank that failed" in str(
            info.value
        ), (info.value, captured.out)
    else:
        pytest.fail(
            f"mpirun never named the failed rank of 4 printing ranks in {REPORT_TRIES} runs"
        )
    out = captured.out
    summary = out[out.index("4 ranks · 1 ✗") :].splitlines()
    assert summary[1].startswith("  ✗ rank 3 · ") and "exit 5" in summary[1], summary
    assert summary[2].startswith("  · 3 ranks: identical output (rank 0 · "), summary


def test_the_failed_rank_is_the_cells_last_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    node_1 = pods(shell, "node-1")[0]
    named = f"mpirun: rank 2 (pod {node_1}) failed first: exit code 3; "
    for _ in range(REPORT_TRIES):
        capsys.readouterr()
        with pytest.raises(TrainJobCellError) as info:
            shell.run_cell_magic("trainjob", "", FAIL_2)
        captured = capsys.readouterr()
        if REPORT in captured.err + captured.out:
            break
        assert "it named no rank that failed" in str(info.value), info.value
    else:
        pytest.fail(f"mpirun never named the failed rank in {REPORT_TRIES} runs")
    message = str(info.value)
    assert message.endswith(named + "last lines: hello 2 | last words of 2"), message
    for _ in range(REPORT_TRIES):
        capsys.readouterr()
        shell.run_cell_magic("trainjob", "--no-raise-error", FAIL_2)
        err = capsys.readouterr().err
        last = err.rstrip("\n").splitlines()[-1]
        if REPORT in err:
            assert last.startswith(f"mpirun: rank 2 (pod {node_1}) failed"), err
            break
        assert "it named no rank that failed" in last, err
    else:
        pytest.fail(f"mpirun never named the failed rank in {REPORT_TRIES} runs")


def test_world_check_warns_in_one_line_and_can_be_turned_off(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "", NOT_READ)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "of the job's 4 pods" in warnings[0]
    assert "the hostfile was not read" in warnings[0]
    shell.run_cell_magic("trainjob", "--no-world-check", NOT_READ)
    assert "warning:" not in capsys.readouterr().err
    shell.run_line_magic("config", "TrainJobMagics.world_check = False")
    try:
        shell.run_cell_magic("trainjob", "", NOT_READ)
        assert "warning:" not in capsys.readouterr().err
    finally:
        shell.run_line_magic("config", "TrainJobMagics.world_check = True")


def test_no_ranks_runs_mpirun_as_written(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "--no-ranks", RANKS)
    out = capsys.readouterr().out
    assert NOTE not in out and "4 ranks" not in out
    assert len(re.findall(r"^rank \d on \S+$", out, re.M)) == 4
    assert shell.user_ns["_trainjob"].by_rank == {}


def test_ranks_panel_folds_shows_the_failed_rank_first_and_updates_live(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    renders: list[str] = []

    class Recording(RanksWidgetView):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

        def _render_overview(self) -> None:
            super()._render_overview()
            renders.append(self.overview.value)

    monkeypatch.setattr(cell_module, "RanksWidgetView", Recording)
    shell.run_line_magic("config", "TrainJobMagics.widgets = 'on'")
    try:
        with pytest.raises(TrainJobCellError):
            shell.run_cell_magic("trainjob", "", FAIL_2)
    finally:
        shell.run_line_magic("config", "TrainJobMagics.widgets = 'off'")
    (view,) = made
    text = view.text()
    lines = text.splitlines()
    # the summary: the failed rank first, then the ranks the launcher stopped
    assert lines[0] == "4 ranks · 1 ✗ · 3 ended · mpirun ended", text
    assert lines[1].startswith("  ✗ rank 2 · ") and "exit 3" in lines[1], text
    assert "last words of 2" in lines[1]
    assert any("mpirun (launcher)" in ln for ln in lines)
    # each rank's lines apart: the failed rank's under its own head
    assert "hello 2" in text and "last words of 2" in text
    assert view.selector.value == "rank 2"  # the failed rank is the one shown
    assert len(renders) >= 2 and renders[0] != renders[-1]  # redrawn while it ran
    # ranks whose output is the same are folded into one row
    view2 = RanksWidgetView("mpirun", show=False)
    for rank in range(4):
        view2.add(rank, f"h{rank}")
        view2.write(f"rank {rank}", "stdout", "same\n")

    class Mpi:
        failure = None
        runs: list[Any] = []
        by_rank: dict[int, Any] = {}

    view2.settle(Mpi())
    assert "4 ranks: identical output (rank 0 · h0, rank 1 · h1, rank 2 · h2, rank 3 · h3)" in (
        view2.text()
    )
    assert "pods" not in view2.text()


# 32 ranks over the 4 pods (8 a pod): each prints "ready", rank 5 a line of its own too; rank 17
# fails once the 31 others printed and exited 0 (each leaves a file in {done}: the local cluster's
# pods are processes of this machine), so every rank has printed all it prints.
MANY = 32
MANY_CELL = """mpirun -np 32 --oversubscribe sh -c '
r=$OMPI_COMM_WORLD_RANK
echo ready
if [ $r = 5 ]; then echo "rank 5: checkpoint written"; fi
if [ $r = 17 ]; then
  while [ $(ls {done} | wc -l) -lt 31 ]; do sleep 0.2; done
  echo "rank 17: CUDA error: out of memory"; exit 3
fi
touch {done}/$r'"""


def _run_until_named(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> tuple[pytest.ExceptionInfo[TrainJobCellError], str, str]:
    """Run MANY_CELL until mpirun's report names the failed rank (it does in most runs); the
    cell's error, stdout and stderr."""
    for attempt in range(REPORT_TRIES):
        done = tmp_path / f"done{attempt}"
        done.mkdir()
        capsys.readouterr()
        with pytest.raises(TrainJobCellError) as info:
            shell.run_cell_magic("trainjob", "", MANY_CELL.format(done=done))
        captured = capsys.readouterr()
        if REPORT in captured.err + captured.out:
            return info, captured.out, captured.err
        assert "it named no rank that failed" in str(info.value), info.value
    pytest.fail(f"mpirun never named the failed rank in {REPORT_TRIES} runs")


def _many_rows(pod: Callable[[int], str]) -> list[str]:
    """The summary rows of MANY_CELL, each rank with its pod (``pod(rank)``)."""
    fold = ", ".join(f"rank {r} · {pod(r)}" for r in (0, 1, 2))
    return [
        f"  ✗ rank 17 · {pod(17)} · exit 3  | rank 17: CUDA error: out of memory",
        f"  · {MANY - 2} ranks: identical output ({fold}, … rank 31 · {pod(31)}) · ended  | ready",
        f"  · rank 5 · {pod(5)} · ended  | rank 5: checkpoint written",
    ]


def test_32_ranks_as_plain_text(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The terminal's form of a 32-rank cell: the output as mpirun prints it, the footer, then
    '32 ranks · 1 ✗', the failed rank first with its last line, the 30 alike ranks in one row
    (in rank order: 0, 1, 2, … 31), rank 5 apart; the cell's error names the failed rank."""
    info, out, err = _run_until_named(shell, capsys, tmp_path)
    lines = out.splitlines()
    footer = next(i for i, ln in enumerate(lines) if ln.startswith("exit code 3 · "))
    assert lines[footer].endswith(NOTE), lines[footer]
    streamed = lines[:footer]
    assert streamed.count("ready") == MANY, streamed
    assert "rank 5: checkpoint written" in streamed and "rank 17: CUDA error: out of memory" in (
        streamed
    )
    result = info.value.result
    by_rank = result.by_rank
    assert sorted(by_rank) == list(range(MANY))
    job_pods = pods(shell, "all")
    assert {o.pod for o in by_rank.values()} == set(job_pods)  # 8 ranks on each of the 4 pods
    assert lines[footer + 1 :] == [f"{MANY} ranks · 1 ✗", *_many_rows(lambda r: by_rank[r].pod)]
    assert by_rank[5].stdout == "ready\nrank 5: checkpoint written\n"
    named = f"mpirun: rank 17 (pod {by_rank[17].pod}) failed first: exit code 3; "
    assert str(info.value).endswith(
        named + "last lines: ready | rank 17: CUDA error: out of memory"
    ), info.value
    assert "warning:" not in err  # 32 ranks on the job's 4 pods: the world check is content


def test_32_ranks_panel_text(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ranks' panel of the same cell as text (its ``text/plain``: what nbconvert's text
    and LaTeX forms show): '32 ranks · 1 ✗ · 31 ended · mpirun ended', the same rows (the
    launcher's among them), then the failed rank's lines, the 30 alike ranks' once, rank 5's;
    it says "ranks", never "pods", and its picker lists the ranks in rank order."""
    made: list[RanksWidgetView] = []

    class Recording(RanksWidgetView):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(cell_module, "RanksWidgetView", Recording)
    shell.run_line_magic("config", "TrainJobMagics.widgets = 'on'")
    try:
        info, _out, _err = _run_until_named(shell, capsys, tmp_path)
    finally:
        shell.run_line_magic("config", "TrainJobMagics.widgets = 'off'")
    view = made[-1]
    by_rank = info.value.result.by_rank
    labels = {r: f"rank {r} · {by_rank[r].pod}" for r in (5, 17)}
    lines = view.text().splitlines()
    assert lines[0] == f"{MANY} ranks · 1 ✗ · {MANY - 1} ended · mpirun ended", lines
    rows = [ln for ln in lines[1:] if ln.startswith("  ")]
    assert [r for r in rows if "mpirun (launcher)" not in r] == _many_rows(
        lambda r: by_rank[r].pod
    ), rows
    body = lines[1 + len(rows) :]
    assert body[:2] == [
        f"[{labels[17]}] ready",
        f"[{labels[17]}] rank 17: CUDA error: out of memory",
    ]
    assert body[2:4] == [f"[output of {MANY - 2} ranks]", "ready"], body
    assert body[-2:] == [f"[{labels[5]}] ready", f"[{labels[5]}] rank 5: checkpoint written"]
    assert "pods" not in view.text()
    keys = [key for _label, key in view.selector.options]
    assert keys == ["rank 17", "mpirun", *(f"rank {r}" for r in range(MANY) if r != 17)], keys
    assert view.selector.value == "rank 17"
