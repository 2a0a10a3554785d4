"""Bad input: one clear line each and nothing sent to the cluster; odd bytes and shell syntax
reach the pod and come back byte-exact."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(60)


# (kind, magic, line, cell, expected exception name, message fragment)
MAGIC_CASES = [
    ("empty cell", "cell", "", "   \n\t\n", "TrainJobUsageError", "the cell is empty"),
    ("unknown option", "line", "trainjob_connect mpi-interactive --bogus", None,
     "TrainJobUsageError", "unrecognized arguments: --bogus"),
    ("unknown cell option", "cell", "--frobnicate", "echo x", "TrainJobUsageError",
     "unrecognized arguments: --frobnicate"),
    ("invalid name", "line", "trainjob_connect mpi-interactive --name Bad_Name", None,
     "InvalidInputError", "Bad_Name"),
    ("name too long", "line", "trainjob_connect mpi-interactive --name a" + "b" * 70, None,
     "InvalidInputError", "63"),
    ("nodes < 1", "line", "trainjob_connect mpi-interactive --nodes 0", None,
     "TrainJobUsageError", "--nodes must be at least 1"),
    ("nodes not a number", "line", "trainjob_connect mpi-interactive --nodes two", None,
     "TrainJobUsageError", "invalid int value"),
    ("bad cpu", "line", "trainjob_connect mpi-interactive --cpu 2x", None,
     "InvalidInputError", "cpu"),
    ("bad memory", "line", "trainjob_connect mpi-interactive --memory lots", None,
     "InvalidInputError", "memory"),
    ("negative gpu", "line", "trainjob_connect mpi-interactive --gpu -1", None,
     "TrainJobUsageError", "--gpu must not be negative"),
    ("bad env", "line", "trainjob_connect mpi-interactive --env NOEQUALS", None,
     "TrainJobUsageError", "--env expects KEY=VALUE"),
    ("unknown alias (cell)", "cell", "nosuch", "echo x", "TrainJobUsageError",
     "no TrainJob session in this kernel"),
    ("unknown alias (status)", "line", "trainjob_status nosuch", None, "TrainJobUsageError",
     "no TrainJob session in this kernel"),
    ("bad --out variable", "cell", "--out 1x", "echo x", "TrainJobUsageError",
     "Python variable name"),
    ("no runtime", "line", "trainjob_connect", None, "TrainJobUsageError", "no runtime"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "magic", "line", "cell", "ename", "fragment"),
    MAGIC_CASES,
    ids=[c[0] for c in MAGIC_CASES],
)
def test_magic_bad_input(shell, cluster, kind, magic, line, cell, ename, fragment) -> None:
    before = cluster.faults.request_count
    with pytest.raises(Exception) as info:
        if magic == "cell":
            shell.run_cell_magic("trainjob", line, cell)
        else:
            name, _, rest = line.partition(" ")
            shell.run_line_magic(name, rest)
    exc = info.value
    assert type(exc).__name__ == ename, (kind, exc)
    assert fragment in str(exc), (kind, str(exc))
    rendered = exc._render_traceback_() if hasattr(exc, "_render_traceback_") else [str(exc)]
    assert len(rendered) == 1 and "\n" not in rendered[0]  # one clear line
    assert cluster.faults.request_count == before, f"{kind}: a request reached the cluster"


def test_unknown_alias_with_a_session_lists_known_ones(shell, cluster) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as first")
    try:
        before = cluster.faults.request_count
        with pytest.raises(Exception) as info:
            shell.run_cell_magic("trainjob", "nosuch", "echo x")
        assert "no session named 'nosuch'; open sessions: first" in str(info.value)
        assert cluster.faults.request_count == before
    finally:
        shell.run_line_magic("trainjob_close", "--all")


ENGINE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("invalid name", {"name": "-bad"}, "-bad"),
    ("nodes < 1", {"num_nodes": 0}, "at least 1"),
    ("bad cpu", {"cpu": "1.5.2"}, "cpu"),
    ("bad memory", {"memory": "8GiB"}, "memory"),
    ("bad idle_timeout", {"idle_timeout": -5}, "idle_timeout"),
    ("bad timeout", {"timeout": -1}, "timeout"),
]


@pytest.mark.parametrize(
    ("kind", "kwargs", "fragment"), ENGINE_CASES, ids=[c[0] for c in ENGINE_CASES]
)
def test_engine_bad_input(cluster, kind, kwargs, fragment) -> None:
    before = cluster.faults.request_count
    with pytest.raises(E.InvalidInputError) as info:
        connect("mpi-interactive", config_file=str(cluster.kubeconfig_path), **kwargs)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert cluster.faults.request_count == before


def test_unknown_runtime_lists_available_and_creates_nothing(cluster) -> None:
    with pytest.raises(E.InvalidInputError) as info:
        connect("no-such-runtime", config_file=str(cluster.kubeconfig_path))
    msg = str(info.value)
    assert "unknown runtime 'no-such-runtime'" in msg
    for rt in ("mpi-interactive", "torch-distributed", "deepspeed-distributed"):
        assert rt in msg


# ------------------------------------------------------------------ bytes and shell syntax


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    s = connect("mpi-interactive", config_file=str(local_cluster.kubeconfig_path), timeout=30)
    yield s
    s.close(timeout=20)


def test_binary_nul_and_invalid_utf8_output(session) -> None:
    r = session.execute(r"printf 'a\000b\377\376c\303'; printf '\000\001' >&2")
    assert r.stdout_bytes == b"a\x00b\xff\xfec\xc3"
    assert r.stderr_bytes == b"\x00\x01"
    assert r.stdout == "a\x00b\ufffd\ufffdc\ufffd"  # invalid bytes replaced, nothing lost


def test_huge_line(session) -> None:
    r = session.execute("head -c 8000000 /dev/zero | tr '\\0' x")
    assert r.ok and len(r.stdout_bytes) == 8_000_000 and set(r.stdout) == {"x"}


def test_utf8_split_across_frames_streams_intact(session) -> None:
    chunks: list[str] = []
    r = session.execute(
        "i=0; while [ $i -lt 30000 ]; do printf 'é€😀'; i=$((i+1)); done",
        on_output=lambda _p, s, t: chunks.append(t),
    )
    assert "".join(chunks) == r.stdout == "é€😀" * 30000


SHELL_BODIES = {
    "quotes": """echo "double $HOME-ish" 'single $HOME' "it's" 'say "hi"'""",
    "heredoc": "cat <<'EOF'\nraw $HOME `date` \\n\nEOF\ncat <<EOF\nexpanded ${X:-dflt}\nEOF\n",
    "backslashes": r"""printf '%s\n' 'a\b\\c' "d\\e" x\ y; echo \$notvar""",
    "command substitution": "echo $(echo inner $(echo deeper)) `echo back`; echo $((6*7))",
    "dashes and globs": "set -- -n '*' '?' '[a]'; for a; do printf '<%s>' \"$a\"; done; echo",
    "trailing backslash-newline": "echo one \\\n  two",
    "percent and tabs": "printf '%%s\\t%%d\\n' x 1 | cat -A 2>/dev/null || true",
}


@pytest.mark.parametrize("body", list(SHELL_BODIES.values()), ids=list(SHELL_BODIES))
def test_cell_body_reaches_pod_byte_exact(shell, cluster, body) -> None:
    """The pod runs the body exactly as local `sh -c` does (it travels as one argv element)."""
    local = subprocess.run(
        ["sh", "-c", body], capture_output=True, env={"HOME": "/h", "PATH": "/usr/bin:/bin"}
    )
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as bytes")
    try:
        shell.run_cell_magic("trainjob", "bytes --quiet --result r", "export HOME=/h\n" + body)
        r = shell.user_ns["r"]
        assert r.stdout_bytes == local.stdout, body
        assert r.returncode == local.returncode
    finally:
        shell.run_line_magic("trainjob_close", "bytes")
