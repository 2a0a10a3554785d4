"""engine/exec/oom.py: reading the container's OOM counter and limit (cgroup v1 and v2), and the
note a command killed by the OOM killer gets."""

from __future__ import annotations

from trainjob_magics.engine.exec.oom import format_bytes, oom_note, parse_probe

V1 = """oom_kill_disable 0
under_oom 0
oom_kill 2
---
167772160
"""
V2 = """low 0
high 0
max 14
oom 1
oom_kill 1
oom_group_kill 0
---
max
"""
NONE = "---\n"


def test_v1_counter_and_limit() -> None:
    assert parse_probe(V1) == (2, 167772160)


def test_v2_counter_and_no_limit() -> None:
    assert parse_probe(V2) == (1, None)


def test_v1_unlimited_reads_as_no_limit() -> None:
    assert parse_probe("oom_kill 0\n---\n9223372036854771712\n") == (0, None)


def test_nothing_readable() -> None:
    assert parse_probe(NONE) == (None, None)


def test_limits_read_as_quantities() -> None:
    assert format_bytes(167772160) == "160Mi"
    assert format_bytes(2 << 30) == "2Gi"
    assert format_bytes(1000) == "1000 bytes"


def test_a_new_kill_is_named_with_the_limit() -> None:
    note = oom_note(0, 1, 167772160)
    assert note.startswith("out of memory") and "160Mi" in note and "--memory" in note


def test_no_new_kill_no_note() -> None:
    assert oom_note(2, 2, 167772160) == ""
    assert oom_note(0, None, None) == ""
