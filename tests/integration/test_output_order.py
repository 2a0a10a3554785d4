"""stdout and stderr keep the order they were written in, end to end: a command alternating the
two streams 1,000 times shows exactly that order in ``ExecResult.output`` and ``on_output``,
in the text view (widgets off: the kernel's stream messages), in the widget's live model and
in the frozen output; a ``--python`` cell likewise."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code, shown_text
from trainjob_magics import connect
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(300)

N = 1000
ALTERNATE = f"for i in $(seq {N}); do echo out$i; echo err$i >&2; done"
PY_ALTERNATE = (
    "import sys\n"
    f"for i in range(1, {N + 1}):\n"
    "    print(f'out{i}')\n"
    "    print(f'err{i}', file=sys.stderr)\n"
)
LINES = [(s, f"{w}{i}") for i in range(1, N + 1) for s, w in (("stdout", "out"), ("stderr", "err"))]
TEXT = "".join(f"{line}\n" for _, line in LINES)


def lines_of(chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(stream, line) of the chunks in the order they came (a line may span chunks)."""
    out: list[tuple[str, str]] = []
    partial: dict[str, str] = {}
    for stream, text in chunks:
        text = partial.pop(stream, "") + text
        *done, rest = text.split("\n")
        out.extend((stream, line) for line in done)
        if rest:
            partial[stream] = rest
    return out


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    with connect(
        "torch-distributed", config_file=str(local_cluster.kubeconfig_path), cpu="100m"
    ) as s:
        yield s


def test_exec_result_and_on_output_keep_the_order(session: Any) -> None:
    seen: list[tuple[str, str]] = []
    result = session.execute(ALTERNATE, on_output=lambda pod, s, t: seen.append((s, t)))
    assert result.returncode == 0
    assert result.output == TEXT
    assert result.stdout == "".join(f"{line}\n" for s, line in LINES if s == "stdout")
    assert lines_of(seen) == LINES


def test_python_result_keeps_the_order(session: Any) -> None:
    seen: list[tuple[str, str]] = []
    result = session.python(PY_ALTERNATE, on_output=lambda pod, s, t: seen.append((s, t)))
    assert result.ok, result.error
    assert result.output == TEXT
    assert lines_of(seen) == LINES


@pytest.fixture(scope="module")
def kernel(local_cluster: LocalCluster) -> Iterator[Kernel]:
    with Kernel() as k:
        yield k


def streamed(msgs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The lines of the stream messages, as a terminal shows them (an unfinished line the view
    showed early is overwritten with ``\r`` once it ends)."""
    chunks = [
        (m["content"]["name"], m["content"]["text"]) for m in msgs if m["msg_type"] == "stream"
    ]
    return [(s, line.split("\r")[-1].rstrip(" ")) for s, line in lines_of(chunks)]


@pytest.mark.parametrize("python", [False, True], ids=["shell", "python"])
def test_text_view_keeps_the_order(
    kernel: Kernel, local_cluster: LocalCluster, python: bool
) -> None:
    """Widgets off: the kernel's stdout and stderr stream messages come in the command's order
    (what terminal IPython and a notebook without widgets show)."""
    setup = load_magics_code(local_cluster.kubeconfig_path, widgets="off", display_max_lines=5000)
    reply, msgs = kernel.run(setup + "\n%trainjob_connect torch-distributed --cpu 100m", 120)
    assert reply["status"] == "ok", shown_text(msgs)
    try:
        cell = f"%%trainjob --python\n{PY_ALTERNATE}" if python else f"%%trainjob\n{ALTERNATE}"
        reply, msgs = kernel.run(cell, 120)
        assert reply["status"] == "ok", shown_text(msgs)
        assert streamed(msgs)[: 2 * N] == LINES
    finally:
        kernel.run("%trainjob_close", 120)


SPAN = re.compile(r'<span class="tjm-(stdout|stderr)"[^>]*>([^<]*)</span>')


def html_lines(value: str) -> list[tuple[str, str]]:
    return [(s, html.unescape(t)) for s, t in SPAN.findall(value)]


@pytest.mark.parametrize("python", [False, True], ids=["shell", "python"])
def test_widget_view_and_frozen_output_keep_the_order(
    kernel: Kernel, local_cluster: LocalCluster, python: bool
) -> None:
    """Widgets on: the live model's last HTML and the frozen ``text/html`` and ``text/plain``
    show the lines in the command's order."""
    setup = load_magics_code(local_cluster.kubeconfig_path, widgets="on", display_max_lines=5000)
    reply, msgs = kernel.run(setup + "\n%trainjob_connect torch-distributed --cpu 100m", 120)
    assert reply["status"] == "ok", shown_text(msgs)
    try:
        cell = f"%%trainjob --python\n{PY_ALTERNATE}" if python else f"%%trainjob\n{ALTERNATE}"
        reply, msgs = kernel.run(cell, 120)
        assert reply["status"] == "ok", shown_text(msgs)
        live = [
            m["content"]["data"]["state"]["value"]
            for m in msgs
            if m["msg_type"] == "comm_msg"
            and "tjm-output" in str(m["content"]["data"].get("state", {}).get("value", ""))
        ]
        assert live and html_lines(live[-1]) == LINES
        frozen = [
            m["content"]["data"]
            for m in msgs
            if m["msg_type"] == "update_display_data"
            and "tjm-output" in m["content"]["data"].get("text/html", "")
        ]
        assert frozen, shown_text(msgs)
        assert html_lines(frozen[-1]["text/html"]) == LINES
        assert frozen[-1]["text/plain"].startswith(TEXT)
    finally:
        kernel.run("%trainjob_close", 120)
