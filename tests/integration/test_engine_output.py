"""Output fidelity of execute() over the real exec WebSocket of the local cluster: large output,
UTF-8 split across frames, stream separation and order, stdin, byte-exact command bodies,
timeouts and dropped connections."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.proctools import marker_processes, wait_dead
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

SIZE_64MB = 64 * 1024 * 1024
SIZE_32MB = 32 * 1024 * 1024


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect("torch-distributed", config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


def test_64mb_stdout_is_complete_and_byte_exact(local_cluster, session) -> None:
    # Random bytes: every byte value, invalid UTF-8 included, must survive untouched.
    prep = session.execute(f"head -c {SIZE_64MB} /dev/urandom > big.bin")
    assert prep.ok, prep.stderr
    expected = hashlib.sha256(
        (local_cluster.pod_dir("default", session.pod) / "big.bin").read_bytes()
    ).hexdigest()
    res = session.execute(["cat", "big.bin"])
    assert res.ok
    assert len(res.stdout_bytes) == SIZE_64MB
    assert hashlib.sha256(res.stdout_bytes).hexdigest() == expected
    assert len(res.stdout) >= 1  # decoded with replacement, no exception
    # Its speed (linear-time capture vs the stock WSClient loop) is benchmarks/ row ``large``.
    (local_cluster.pod_dir("default", session.pod) / "big.bin").unlink()


def test_large_multibyte_output_with_on_output(session) -> None:
    text = "é" * 3_000_000 + "ü€𝄞" * 300_000 + "\n"
    chunks: list[str] = []
    res = session.execute(
        [
            "python3",
            "-c",
            "import sys; sys.stdout.write('é' * 3_000_000 + 'ü€𝄞' * 300_000 + '\\n')",
        ],
        on_output=lambda pod, stream, chunk: chunks.append(chunk),
    )
    assert res.ok, res.stderr
    assert res.stdout == text
    assert "".join(chunks) == text
    assert len(chunks) > 10


def test_multibyte_utf8_split_across_frames(session) -> None:
    # Separate writes with pauses make separate frames, splitting the characters.
    script = (
        "printf '\\342\\202'; sleep 0.1; printf '\\254 \\360\\235'; sleep 0.1; "
        "printf '\\204\\236 '; sleep 0.1; printf '\\346\\227\\245\\n'"
    )
    chunks: list[str] = []
    res = session.execute(script, on_output=lambda pod, stream, text: chunks.append(text))
    assert res.stdout == "€ 𝄞 日\n"
    assert res.stdout_bytes == "€ 𝄞 日\n".encode()
    assert "".join(chunks) == "€ 𝄞 日\n"
    assert "\ufffd" not in "".join(chunks)
    assert len(chunks) >= 3  # it really arrived in pieces


def test_stderr_is_separate_and_on_output_keeps_order(session) -> None:
    events: list[tuple[str, str]] = []
    res = session.execute(
        "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; sleep 0.1; echo d >&2; exit 5",
        on_output=lambda pod, stream, text: events.append((stream, text)),
    )
    assert (res.stdout, res.stderr, res.returncode) == ("a\nc\n", "b\nd\n", 5)
    assert events == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n"), ("stderr", "d\n")]


def test_output_arrives_live(session) -> None:
    arrivals: list[float] = []
    started = time.monotonic()
    session.execute(
        "echo first; sleep 0.5; echo second",
        on_output=lambda pod, stream, text: arrivals.append(time.monotonic() - started),
    )
    assert len(arrivals) == 2 and arrivals[0] < 0.4 <= arrivals[1]


def test_stdin_round_trip(session) -> None:
    data = bytes(range(256)) * 16 + b"\x00end"
    res = session.execute(["cat"], stdin=data)
    assert res.ok and res.stdout_bytes == data
    assert session.execute("cat", stdin="héllo\n").stdout == "héllo\n"
    assert session.execute("wc -c", stdin=b"").stdout.strip() == "0"


def test_large_stdin_while_output_flows(session) -> None:
    """4 MB in, 4 MB out at the same time over one TLS connection (one thread does both)."""
    data = bytes(range(256)) * (4 * 4096)
    res = session.execute(["cat"], stdin=data, timeout=60)
    assert res.ok and res.stdout_bytes == data


def test_32mb_stdin_and_32mb_stdout_at_once(local_cluster, session) -> None:
    """Both directions full at the same time: what the pod read and what came back are both
    byte-exact."""
    data = random.Random(32).randbytes(SIZE_32MB)
    expected = hashlib.sha256(data).hexdigest()
    res = session.execute(["tee", "stdin-copy.bin"], stdin=data, timeout=90)
    assert res.ok, res.stderr
    assert res.stdout_size == SIZE_32MB
    assert hashlib.sha256(res.stdout_bytes).hexdigest() == expected
    copy = local_cluster.pod_dir("default", session.pod) / "stdin-copy.bin"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == expected
    copy.unlink()


def test_slow_stdin_reader_does_not_deadlock(session) -> None:
    """The command reads nothing for a second, then echoes 8 MB: the sender waits for the
    socket instead of blocking, and output keeps being read meanwhile."""
    data = random.Random(8).randbytes(8 * 1024 * 1024)
    started = time.monotonic()
    res = session.execute(["sh", "-c", "sleep 1; cat"], stdin=data, timeout=60)
    elapsed = time.monotonic() - started
    assert res.ok and res.stdout_bytes == data
    assert 1 <= elapsed < 20, f"took {elapsed:.1f}s"


def test_stdin_file_object_progress_in_the_calling_thread(session, tmp_path) -> None:
    """A file object is streamed in chunks; ``on_stdin`` reports every byte, from the thread
    that called ``run`` (no helper thread touches the socket)."""
    src = tmp_path / "stdin.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    progress: list[int] = []
    threads: set[str] = set()

    def on_stdin(n: int) -> None:
        progress.append(n)
        threads.add(threading.current_thread().name)

    with src.open("rb") as f:
        res = session._exec.run(
            session.namespace, session.pod, ["sha256sum"], stdin=f, on_stdin=on_stdin, timeout=60
        )
    assert res.ok, res.stderr
    assert res.stdout.split()[0] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert sum(progress) == src.stat().st_size and len(progress) > 1
    assert threads == {threading.current_thread().name}


def test_command_ignoring_stdin_ends_promptly(session) -> None:
    """The command exits without reading its 32 MB of stdin: its status ends the exec."""
    started = time.monotonic()
    res = session.execute(["head", "-c", "5"], stdin=b"hello" + bytes(SIZE_32MB), timeout=60)
    assert res.ok and res.stdout_bytes == b"hello"
    assert time.monotonic() - started < 15


def test_timeout_while_stdin_is_blocked(session) -> None:
    """The command never reads its stdin: the timeout still fires on time and stops it."""
    marker = f"30.{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"
    started = time.monotonic()
    with pytest.raises(E.ExecTimeoutError) as info:
        session.execute(f"echo before; sleep {marker}", stdin=bytes(16 * 1024 * 1024), timeout=1)
    assert time.monotonic() - started < 8
    assert info.value.partial is not None and info.value.partial.stdout == "before\n"
    assert [r.stopped for r in info.value.reports] == [True]
    assert wait_dead(marker_processes(f"sleep {marker}"), 5) == []


def test_ctrl_c_while_stdin_is_blocked(session) -> None:
    """Ctrl-C lands while the loop waits to write stdin the command never reads: the command
    is stopped, the output so far kept, and the session stays usable."""
    marker = f"30.{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"
    started = threading.Event()

    def ctrl_c() -> None:
        started.wait(10)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(E.CommandInterruptedError) as info:
        session.execute(
            f"echo before; sleep {marker}",
            stdin=bytes(16 * 1024 * 1024),
            on_output=lambda pod, stream, text: started.set(),
        )
    assert time.monotonic() - t0 < 8
    assert info.value.partial is not None and info.value.partial.stdout == "before\n"
    assert wait_dead(marker_processes(f"sleep {marker}"), 5) == []
    assert session.execute("echo still-usable").stdout == "still-usable\n"


def test_timeout_while_output_trickles(session) -> None:
    """Output arriving now and then does not postpone the timeout."""
    started = time.monotonic()
    with pytest.raises(E.ExecTimeoutError) as info:
        session.execute("while :; do echo tick; sleep 0.1; done", timeout=1)
    assert time.monotonic() - started < 6
    assert info.value.partial is not None and "tick" in info.value.partial.stdout


BODIES = [
    'echo "it\'s" \'a "quoted" word\' $(echo sub) `echo bt` \\$HOME',
    "cat <<'EOF'\n$(not run) `nor this` \\n \\\\ \"x\"\nEOF\ncat <<EOF\n$((1 + 2)) \\$x\nEOF",
    "printf '%s|' a\\ b 'c  d' \"e\\tf\"; echo",
    "x='multi\nline'; echo \"$x\"; echo ünïcödé €",
    "for i in 1 2 3; do printf '%s;' \"$i\"; done && echo ' & | > < ; # done'",
]


@pytest.mark.parametrize("body", BODIES)
def test_cell_bodies_reach_the_pod_byte_exact(local_cluster, session, body: str) -> None:
    # 1. The body is one argv element: the pod receives exactly these bytes.
    res = session.execute(["sh", "-c", 'printf %s "$1" > body.txt', "sh", body])
    assert res.ok, res.stderr
    pod_file = local_cluster.pod_dir("default", session.pod) / "body.txt"
    assert pod_file.read_bytes() == body.encode()
    # 2. Run as a string it behaves exactly like `sh -c BODY` does locally.
    local = subprocess.run(["sh", "-c", body], capture_output=True, check=False)
    remote = session.execute(body)
    assert remote.stdout_bytes == local.stdout
    assert remote.returncode == local.returncode


def test_exec_timeout_keeps_partial_output_and_stops_the_command(session) -> None:
    marker = f"30.{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"
    started = time.monotonic()
    with pytest.raises(E.ExecTimeoutError) as info:
        session.execute(f"echo before; sleep {marker}", timeout=0.5)
    assert time.monotonic() - started < 5
    assert isinstance(info.value, TimeoutError)
    assert info.value.partial is not None and info.value.partial.stdout == "before\n"
    assert "stopped the remote command" in str(info.value)
    assert [r.stopped for r in info.value.reports] == [True]
    assert wait_dead(marker_processes(f"sleep {marker}"), 5) == []


def test_dropped_connection_keeps_partial_output(cluster, session) -> None:
    cluster.faults.drop_exec(session.pod, after_bytes=100_000)
    with pytest.raises(E.ConnectionLostError) as info:
        session.execute("head -c 1000000 /dev/zero")
    partial = info.value.partial
    assert partial is not None
    assert 0 < len(partial.stdout_bytes) < 1_000_000
    assert set(partial.stdout_bytes) == {0}
    # the engine stops the command once the connection is lost, or says that it may still run
    message = str(info.value)
    assert "stopped the remote command" in message or "may still be running" in message
    assert info.value.stopped == ("stopped the remote command" in message)
    cluster.faults.clear()
    assert session.execute("true").ok
