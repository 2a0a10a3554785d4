"""The engine's wrapper run on this machine: its end marks checked and cut out of the output, as
the engine does (``streams.EndMark``), for tests that look at what the wrapped command printed."""

from __future__ import annotations

import subprocess
from typing import Any

from trainjob_magics.engine.exec.scripts import end_mark_head
from trainjob_magics.engine.exec.streams import EndMark


def unmark(data: Any, exec_id: str) -> tuple[Any, int | None]:
    """``data`` (bytes or str) without the wrapper's end mark for ``exec_id``, and its code."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    mark = EndMark(end_mark_head(exec_id))
    kept = b"".join(mark.cut(raw)) + mark.release()
    return (kept.decode("utf-8", "surrogateescape") if isinstance(data, str) else kept), mark.code


def unmarked(done: subprocess.CompletedProcess[Any], exec_id: str) -> subprocess.CompletedProcess:
    """``done`` with the end marks cut out of both streams; each stream must carry one, with
    the wrapper's exit code."""
    stdout, out_code = unmark(done.stdout, exec_id)
    stderr, err_code = unmark(done.stderr, exec_id)
    assert out_code == err_code == done.returncode, (out_code, err_code, done)
    return subprocess.CompletedProcess(done.args, done.returncode, stdout, stderr)
