"""The panels a restarted (or killed) kernel left live are marked ended by the kernel after it
(magics/restarts.py): the front end dropped the old kernel's last updates, and no kernel can
update them any more. The browser test restarts from JupyterLab's menu
(tests/browser/test_many_pods.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainjob_magics.engine.result import JobStatus
from trainjob_magics.magics import restarts
from trainjob_magics.magics.views.status import KERNEL_MARK, StatusWidget


def kernel_shell(connection: Path) -> Any:
    return SimpleNamespace(
        kernel=SimpleNamespace(parent=SimpleNamespace(connection_file=str(connection)))
    )


def test_a_live_panel_carries_the_kernels_mark_and_hidden_ended_forms() -> None:
    panel = StatusWidget(JobStatus("j", "ns", "mpi", "Running", "", elapsed=3.0), show=False)
    page = panel.bundle()["text/html"]
    assert f'class="tjm-live tjm-k-{KERNEL_MARK}"' in page
    for kind, state in (("closed", "Closed at kernel exit"), ("gone", "Kernel gone")):
        assert re.search(rf'class="tjm-when-{kind}" style="display:none">.*{state}', page)
    assert "Closed at kernel exit" not in panel.bundle()["text/plain"]
    panel.final("Deleted")
    assert "tjm-live" not in panel.bundle()["text/html"]  # final: nothing left to mark
    assert "tjm-when-" not in panel.bundle()["text/html"]


def test_the_kernel_after_a_restart_marks_the_panels_of_the_one_before(
    tmp_path: Path, published: list[dict[str, Any]]
) -> None:
    shell = kernel_shell(tmp_path / "kernel-1.json")
    note = tmp_path / "kernel-1.json.trainjob-panels"
    # what the kernel before wrote: a live panel, then its sessions closed on the restart
    note.write_text(json.dumps({"mark": "0123abcd", "closed": True}))
    restarts.mark_panels_of_the_kernel_before(shell)
    assert not note.exists()
    (bundle,) = [o["data"] for o in published]
    assert bundle["text/plain"] == (
        "The kernel before this one restarted and closed its sessions: its status panels now "
        "say 'closed at kernel exit'."
    )
    rules = re.search(r"<style>(.*)</style>", bundle["text/html"]).group(1)
    assert rules == (
        ".trainjob-status .tjm-live.tjm-k-0123abcd .tjm-when-live{display:none!important}"
        ".trainjob-status .tjm-live.tjm-k-0123abcd .tjm-when-closed{display:revert!important}"
    )
    published.clear()
    note.write_text(json.dumps({"mark": "4567ef", "closed": False}))  # killed: never closed
    restarts.mark_panels_of_the_kernel_before(shell)
    (bundle,) = [o["data"] for o in published]
    assert "without closing its sessions" in bundle["text/plain"]
    assert "now say 'Kernel gone'" in bundle["text/plain"]
    assert ".tjm-k-4567ef .tjm-when-gone{display:revert!important}" in bundle["text/html"]
    published.clear()
    restarts.mark_panels_of_the_kernel_before(shell)  # no note: nothing shown
    assert published == []


def test_the_line_quotes_what_the_ended_panels_say() -> None:
    """Issue 36, defect 6: the next kernel's line quotes words each ended panel shows: in its
    ended form (the kernel's HTML, shown by the next kernel's rule) and, for a job closed at
    kernel exit, in the lab extension's live line ("Gone: " + the sessions API's reason)."""
    from trainjob_magics.engine.inventory.namespace_watch import KERNEL_EXIT
    from trainjob_magics.engine.inventory.records import gone_reason
    from trainjob_magics.magics.views.status import ENDED_ALTERNATIVES, ENDED_QUOTES

    panel = StatusWidget(JobStatus("j", "ns", "mpi", "Running", "", elapsed=3.0), show=False)
    page = panel.bundle()["text/html"]
    for kind, quote in ENDED_QUOTES.items():
        shown = re.findall(rf'class="tjm-when-{kind}[ "][^>]*>(.*?)</(?:span|div)>', page)
        assert any(quote in re.sub(r"<[^>]+>", "", part) for part in shown), (kind, shown)
        assert quote in " ".join(ENDED_ALTERNATIVES[kind])
    assert ENDED_QUOTES["closed"] in gone_reason(None, closed_by=KERNEL_EXIT)


def test_a_kernel_notes_its_mark_once_it_shows_a_live_panel_and_says_how_it_exited(
    tmp_path: Path,
) -> None:
    shell = kernel_shell(tmp_path / "kernel-2.json")
    note = tmp_path / "kernel-2.json.trainjob-panels"
    restarts.note_exit(shell, restart=True)
    assert not note.exists()  # no live panel shown: nothing to tell
    restarts.note_live_panels(shell)
    assert json.loads(note.read_text()) == {"mark": KERNEL_MARK, "closed": False}
    restarts.note_exit(shell, restart=True)
    assert json.loads(note.read_text()) == {"mark": KERNEL_MARK, "closed": True}
    restarts.note_exit(shell, restart=False)  # shut down for good: no kernel comes after it
    assert not note.exists()
    restarts.forget(shell)
    assert restarts.note_path(SimpleNamespace()) is None  # terminal IPython: no kernel
