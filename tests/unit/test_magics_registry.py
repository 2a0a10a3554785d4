"""Per-kernel registry: default session, close, close_all, reset hook."""

from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError

from trainjob_magics.magics.registry import SessionRegistry, install_hooks, uninstall_hooks


class S:
    def __init__(self, name: str, fail: bool = False, delay: float = 0.0) -> None:
        self.name, self.fail, self.delay, self.closed = name, fail, delay, False

    def close(self, timeout: float = 180) -> None:
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("forbidden")
        self.closed = True


def test_default_is_last_connected() -> None:
    r = SessionRegistry()
    assert r.default_alias is None
    r.add("a", S("ja"))
    r.add("b", S("jb"))
    assert r.default_alias == "b" and r.get().alias == "b"
    r.add("a", S("ja2"))  # re-connect moves it to the end
    assert r.default_alias == "a"
    assert r.get("b").session.name == "jb"


def test_unknown_alias_is_one_line_usage_error() -> None:
    r = SessionRegistry()
    with pytest.raises(UsageError, match="start one with %trainjob_connect"):
        r.get()
    r.add("a", S("ja"))
    with pytest.raises(UsageError, match="no session named 'zz'; open sessions: a"):
        r.get("zz")


def test_close_moves_default_back() -> None:
    r = SessionRegistry()
    a, b = S("ja"), S("jb")
    r.add("a", a)
    r.add("b", b)
    rep = r.close()
    assert b.closed and rep.line() == "Closed session 'b' (TrainJob jb deleted)."
    assert r.default_alias == "a"


def test_close_all_parallel_and_reports_failures() -> None:
    r = SessionRegistry()
    sessions = [S(f"j{i}", delay=0.3) for i in range(4)]
    for i, s in enumerate(sessions):
        r.add(f"s{i}", s)
    r.add("bad", S("jbad", fail=True))
    t0 = time.monotonic()
    reports = r.close_all(timeout=5)
    assert time.monotonic() - t0 < 1.0  # concurrently
    assert all(s.closed for s in sessions) and len(r) == 0
    bad = [x for x in reports if x.error]
    assert len(bad) == 1 and "RuntimeError: forbidden" in bad[0].line()


def test_reset_hook_closes_then_unhooks() -> None:
    class Shell:
        def __init__(self) -> None:
            self.resets = 0

        def reset(self, new_session: bool = True) -> None:
            self.resets += 1

    shell = Shell()
    reasons: list[str] = []
    install_hooks(shell, reasons.append)
    install_hooks(shell, reasons.append)  # idempotent
    shell.reset(new_session=False)
    assert reasons == ["reset"] and shell.resets == 1
    uninstall_hooks(shell)
    shell.reset()
    assert reasons == ["reset"] and shell.resets == 2
