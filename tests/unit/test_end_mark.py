"""The wrapper's end marks: cut out of the streams wherever the frames split them, never taking a
byte the command printed, and a "Success" without both of them failing as a connection that ended
before the command (kube-apiserver's stream translator reports a stream cut behind it, a kubelet
restart, as Success: tests/realcluster/test_node_real.py::test_the_kubelet_restarted_mid_cell)."""

from __future__ import annotations

import itertools
import os
import random
import subprocess

import pytest

from tests.helpers.end_marks import unmark
from trainjob_magics.engine.errors import ConnectionLostError
from trainjob_magics.engine.exec.client import exec_outcome
from trainjob_magics.engine.exec.frames import STDERR, STDOUT
from trainjob_magics.engine.exec.scripts import ARGV0, end_mark_head, end_mark_of, wrap
from trainjob_magics.engine.exec.streams import Collector, EndMark

ID = "x42-0123456789ab"
HEAD = end_mark_head(ID)
MARK = HEAD + b"000\n"


def frames_of(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def cut_all(data: bytes, cuts: list[int]) -> tuple[bytes, int | None]:
    """``data`` through an EndMark in frames cut at ``cuts``, as the Collector feeds it."""
    mark = EndMark(HEAD)
    kept = b""
    for frame in frames_of(data, cuts):
        payload = bytes([STDOUT]) + frame
        kept += frame if mark.clear(payload) else b"".join(mark.cut(frame))
    return kept + mark.release(), mark.code


LOOKALIKES = [
    b"",
    b"plain text\n",
    b"no newline at the end",
    b"\x1e",  # the mark's first byte, alone and last
    b"a\x1e\x1e\x1eb",
    HEAD,  # the head without its code
    HEAD + b"00",
    HEAD + b"0a0\n",  # not digits
    HEAD + b"0000",  # no newline after 3 digits
    end_mark_head("x42-000000000000") + b"000\n",  # another command's mark
    b"\x1etjm0123 begin 1 openmpi4\n\x1e3@host\x1f",  # the ranks' and Hydra's markers
]


@pytest.mark.parametrize("user", LOOKALIKES)
def test_the_commands_bytes_pass_whole_at_every_split(user: bytes) -> None:
    for tail in (b"", b"late output of a background process\n"):
        data = user + MARK + tail
        for at in range(len(data) + 1):
            assert cut_all(data, [at]) == (user + tail, 0), (user, tail, at)
        for at in range(len(user) + 1):  # no mark: everything is the command's
            assert cut_all(user, [at]) == (user, None)


def test_random_frames_and_exit_codes() -> None:
    rng = random.Random(7)
    for _ in range(400):
        user = bytes(rng.choice(b"ab\n\x1e \xe2\x82\xac") for _ in range(rng.randrange(60)))
        code = rng.randrange(256)
        data = user + HEAD + b"%03d\n" % code
        cuts = [rng.randrange(len(data) + 1) for _ in range(rng.randrange(6))]
        assert cut_all(data, cuts) == (user, code)


def test_a_frame_without_the_marks_first_byte_passes_untouched() -> None:
    mark = EndMark(HEAD)
    assert mark.clear(bytearray(b"\x01" + b"x" * 100_000))
    assert not mark.clear(b"\x01abc\x1e")
    assert mark.clear(b"\x1e" + b"abc")  # the channel byte is not output
    assert mark.clear(memoryview(b"\x01abc"))


def test_end_mark_of_knows_only_the_wrapper() -> None:
    assert end_mark_of(wrap(ID, ["sh", "-c", "true"])) == HEAD
    assert end_mark_of(tuple(wrap(ID, ["sh", "-c", "true"]))) == HEAD
    assert end_mark_of(["sh", "-c", "echo hi", ARGV0, ID]) is None
    assert end_mark_of(["mpirun", "hostname"]) is None


def collect(frames: list[tuple[int, bytes]], *, wrapped: bool = True) -> tuple[Collector, list]:
    seen: list[tuple[str, str]] = []
    collector = Collector(lambda stream, text: seen.append((stream, text)), limit=None)
    collector.expect_end(HEAD if wrapped else None)
    for channel, data in frames:
        collector.add_frame(channel, bytes([channel]) + data)
    return collector, seen


def test_the_collector_shows_and_keeps_only_what_the_command_printed() -> None:
    # stderr's last byte begins its mark, whose rest comes in the next frame
    frames = [(STDOUT, b"tick 1\n"), (STDERR, b"warn\n\x1e"), (STDOUT, MARK[:5])]
    collector, seen = collect([*frames, (STDOUT, MARK[5:]), (STDERR, MARK[1:])])
    assert collector.ended() == 0
    result = exec_outcome((0, "", True), collector, 0.0, "p")
    assert (result.returncode, result.stdout, result.stderr) == (0, "tick 1\n", "warn\n")
    assert "".join(t for s, t in seen if s == "stdout") == "tick 1\n"
    assert "".join(t for s, t in seen if s == "stderr") == "warn\n"
    assert result.output == "tick 1\nwarn\n"


def test_success_without_both_marks_is_a_connection_that_ended_first() -> None:
    for frames in (
        [(STDOUT, b"tick 1\ntick 2\n")],  # the kubelet restarted: neither mark
        [(STDOUT, b"tick 1\n" + MARK)],  # stdout ended, stderr's mark never came
        [(STDERR, MARK), (STDOUT, b"tick 1\n\x1e")],  # stdout cut in what looked like one
    ):
        collector, _seen = collect(frames)
        with pytest.raises(ConnectionLostError) as lost:
            exec_outcome((0, "", True), collector, 0.0, "pod-a")
        text = str(lost.value)
        assert "\n" not in text and text.startswith(
            "the connection to pod pod-a ended before the command did"
        )
        assert "may still be running" in text
        assert lost.value.partial.stdout.startswith("tick 1\n")
        assert lost.value.partial.returncode is None
    collector, _seen = collect([(STDOUT, b"tick 1\n\x1e")])  # the held byte is the command's
    with pytest.raises(ConnectionLostError) as lost:
        exec_outcome((0, "", True), collector, 0.0, "pod-a")
    assert lost.value.partial.stdout == "tick 1\n\x1e"


def test_what_the_marks_say_and_what_needs_no_mark() -> None:
    # a cut after both marks: the command's own exit code, not the translator's Success
    collector, _ = collect([(STDOUT, HEAD + b"003\n"), (STDERR, HEAD + b"003\n")])
    assert exec_outcome((0, "", True), collector, 0.0, "p").returncode == 3
    # an exit code on channel 3 is the kubelet's: no cut produces one
    collector, _ = collect([(STDOUT, b"x")])
    assert exec_outcome((7, "", True), collector, 0.0, "p").returncode == 7
    # a close without a status: the marks tell how it ended, or nothing does
    collector, _ = collect([(STDOUT, MARK), (STDERR, MARK)])
    assert exec_outcome((None, "", False), collector, 0.0, "p").returncode == 0
    collector, _ = collect([(STDOUT, b"x")])
    assert exec_outcome((None, "", False), collector, 0.0, "p").returncode is None
    # a command not under the wrapper (argv without a shell, the engine's own scripts)
    collector, _ = collect([(STDOUT, b"x" + MARK)], wrapped=False)
    assert exec_outcome((0, "", True), collector, 0.0, "p").stdout == "x" + MARK.decode()


@pytest.mark.parametrize("shell", ["dash", "bash"])
@pytest.mark.parametrize(
    "body,code",
    [
        ("printf 'no newline'; printf 'err' >&2", 0),
        ("echo out; echo err >&2; exit 3", 3),
        ("printf '\\036'; exit 255", 255),  # ends in the mark's first byte
        ("yes | head -c 4", 0),  # SIGPIPE stays the command's
        ("(sleep 0.3; echo late) & echo now", 0),  # a background writer after the mark
    ],
)
def test_the_wrapper_marks_each_stream_with_the_exit_code(
    shell: str, body: str, code: int, tmp_path
) -> None:
    if not os.path.exists(f"/bin/{shell}"):
        pytest.skip(f"no {shell}")
    argv = wrap(ID, ["sh", "-c", body])
    argv[0] = shell
    done = subprocess.run(argv, capture_output=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    out, out_code = unmark(done.stdout, ID)
    err, err_code = unmark(done.stderr, ID)
    assert done.returncode == out_code == err_code == code, done
    plain = subprocess.run(["sh", "-c", body], capture_output=True)
    assert (out, err) == (plain.stdout, plain.stderr)


def test_a_detached_start_cut_before_it_answered_may_have_started() -> None:
    """The detach start runs its own script (no wrapper): its last line, ``started N``, is its
    proof; a Success without it says the run may have started, not that it could not."""
    from trainjob_magics.engine.detach.control import _start_failure
    from trainjob_magics.engine.result import ExecResult

    error = _start_failure("tj", "p", ExecResult("", "", 0, 0.1, pod="p"), started=[])
    text = str(error)
    assert "\n" not in text and "ended before the detached run's start answered" in text
    assert "it may have started" in text
