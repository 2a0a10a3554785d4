"""Every magic: options documented in its help, the session chosen the same way; the
``%trainjob_sessions`` table widget."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.shell import magics_shell
from trainjob_magics.magics.views.sessions import render_sessions_html
from trainjob_magics.magics.views.status_text import SessionRow

MAGICS = {
    "line": (
        "trainjob_connect",
        "trainjob_sessions",
        "trainjob_status",
        "trainjob_close",
        "trainjob_upload",
        "trainjob_download",
        "trainjob_logs",
    ),
    "cell": ("trainjob", "trainjob_writefile"),
}
USES_A_SESSION = (
    "trainjob",
    "trainjob_status",
    "trainjob_close",
    "trainjob_writefile",
    "trainjob_upload",
    "trainjob_download",
    "trainjob_logs",
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with magics_shell(widgets="off") as sh:
        yield sh


def _magic(sh: InteractiveShell, name: str) -> object:
    kind = "cell" if name in MAGICS["cell"] else "line"
    return sh.magics_manager.magics[kind][name]


def test_help_documents_every_option_of_every_magic(shell: InteractiveShell) -> None:
    for names in MAGICS.values():
        for name in names:
            fn = _magic(shell, name)
            doc = fn.__doc__ or ""
            for action in fn.parser._actions:
                if action.help == "==SUPPRESS==":
                    continue
                for opt in action.option_strings or [action.metavar or action.dest]:
                    assert opt in doc, f"%{name}? does not document {opt}"
                assert action.help, f"%{name}: {action.option_strings or action.dest} has no help"


def test_every_session_magic_takes_session_option(shell: InteractiveShell) -> None:
    for name in USES_A_SESSION:
        opts = _magic(shell, name).parser._option_string_actions
        assert "--session" in opts, name
    assert _magic(shell, "trainjob_connect").parser._option_string_actions["--session"].dest == (
        "alias"
    )


def test_cluster_options_on_status(shell: InteractiveShell) -> None:
    for name in ("trainjob_connect", "trainjob_sessions", "trainjob_status", "trainjob_close"):
        opts = _magic(shell, name).parser._option_string_actions
        assert {"--namespace", "--context", "--kubeconfig"} <= set(opts), name


def test_sessions_table_html() -> None:
    rows = [
        SessionRow("a", "j1", "default", "mpi-interactive", "Running", False),
        SessionRow("b<x>", "j2", "team", "", "Deleted", True),
    ]
    html = render_sessions_html(rows)
    assert html.count("<tr") == 3 and "b&lt;x&gt; (default)" in html and "font-weight:bold" in html
    assert "Running" in html and "mpi-interactive" in html and ">-<" in html
    assert "No TrainJob sessions" in render_sessions_html([])


def test_sessions_widget_shown_when_widgets_are_on(capsys: pytest.CaptureFixture[str]) -> None:
    with magics_shell(widgets="on") as sh:
        capsys.readouterr()
        sh.run_line_magic("trainjob_sessions", "")
        # a plain shell prints the widget's text/plain fallback
        assert "No TrainJob sessions in this kernel" in capsys.readouterr().out
