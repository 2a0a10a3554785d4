"""``%%trainjob`` with a real torchrun (Debian's python3-torch, tests/helpers/torch.py) on the
local cluster: the footer says which tagging was added, the ranks follow as for mpirun, the
failed rank is the cell's last line, and the ranks' panel takes torchrun's ranks unchanged."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.shell import magics_shell
from tests.helpers.torch import require_torch, torchrun_launcher
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics import TrainJobCellError
from trainjob_magics.magics import cell as cell_module
from trainjob_magics.magics.views.ranks import RanksWidgetView

pytestmark = pytest.mark.timeout(180)

NOTE = "ranks tagged by torchrun --tee 3"
SCRIPT = """\
import os, sys
rank = int(os.environ["RANK"])
print(f"hello {rank}")
if rank == int(sys.argv[1]):
    print(f"last words of {rank}")
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def shell(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_torch()
    launcher = torchrun_launcher(tmp_path_factory.mktemp("torchrun")).parent
    with magics_shell(local_cluster.kubeconfig_path, widgets="off") as sh:
        sh.run_line_magic("trainjob_connect", "torch-distributed --nodes 1")
        sh.run_cell_magic("trainjob_writefile", "ranks.py", SCRIPT)
        sh.user_ns["_launcher"] = launcher
        try:
            yield sh
        finally:
            sh.run_line_magic("trainjob_close", "--all")


def torchrun(sh: InteractiveShell, failing: int) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher: Path = sh.user_ns["_launcher"]
    return (
        f"export PATH={shlex.quote(str(launcher))}:$PATH\n"
        f"torchrun --nproc_per_node 4 --master_addr 127.0.0.1 --master_port {port} "
        f"--monitor_interval 1 ranks.py {failing}"
    )


def trainer_pod(sh: InteractiveShell) -> str:
    host = sh.find_line_magic("trainjob_connect").__self__
    return host.registry.find().session.pods("trainer")[0].name


def test_footer_and_ranks_as_text(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "", torchrun(shell, -1))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert sorted(lines[:4]) == [f"hello {r}" for r in range(4)], out  # untagged, as printed
    footer = next(i for i, ln in enumerate(lines) if ln.startswith("exit code 0"))
    assert lines[footer].endswith(NOTE), lines[footer]
    pod = trainer_pod(shell)
    assert lines[footer + 1] == "4 ranks", out
    rows = lines[footer + 2 : footer + 6]
    assert rows == [f"  ✓ rank {r} · {pod} · exit 0  | hello {r}" for r in range(4)], rows


def test_the_failed_rank_is_the_cells_last_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = trainer_pod(shell)
    capsys.readouterr()
    with pytest.raises(TrainJobCellError) as info:
        shell.run_cell_magic("trainjob", "", torchrun(shell, 2))
    message = str(info.value)
    assert message.endswith(
        f"torchrun: rank 2 (local rank 2, pod {pod}) failed first: exit code 3; "
        "last lines: hello 2 | last words of 2"
    ), message
    out = capsys.readouterr().out
    assert "4 ranks · 1 ✗" in out and "[default" not in out


def test_ranks_panel_takes_torchruns_ranks(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []

    class Recording(RanksWidgetView):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(cell_module, "RanksWidgetView", Recording)
    shell.run_line_magic("config", "TrainJobMagics.widgets = 'on'")
    try:
        with pytest.raises(TrainJobCellError):
            shell.run_cell_magic("trainjob", "", torchrun(shell, 1))
    finally:
        shell.run_line_magic("config", "TrainJobMagics.widgets = 'off'")
    (view,) = made
    text = view.text()
    lines = text.splitlines()
    assert lines[0].startswith("4 ranks · 1 ✗"), text
    assert lines[1].startswith("  ✗ rank 1 · ") and "exit 3" in lines[1], text
    assert any("torchrun (launcher)" in ln for ln in lines), text
    assert view.selector.value == "rank 1"
