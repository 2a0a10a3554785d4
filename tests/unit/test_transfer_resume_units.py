"""Resuming a transfer whose stream ended early (files/resume.py): the segment hashes, the
ledgers, and upload/download end to end through the real pod-side scripts run here in ``sh``
by a stand-in exec client that can cut the stream after a number of bytes, the way a dropped
API connection does (the pod's process sees its stdin end, its output goes nowhere)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainjob_magics.engine.errors import (
    ApiServerError,
    ConnectionLostError,
    ExecTimeoutError,
    PermissionDeniedError,
    PodNotRunningError,
    TransferError,
)
from trainjob_magics.engine.exec.fanout import PodCommand
from trainjob_magics.engine.files import manifest, resume, transfer
from trainjob_magics.engine.files.archive import TarStream
from trainjob_magics.engine.files.resume import (
    CHECKPOINT,
    Chain,
    Mark,
    ReceiveLedger,
    SegmentHasher,
    SendLedger,
    retry_line,
    transport_failure,
)
from trainjob_magics.engine.result import ExecResult

MIB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def random_file(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


# ------------------------------------------------------------------ segments and marks


def test_a_segment_is_marked_at_every_checkpoint_and_at_its_end() -> None:
    data = os.urandom(2 * CHECKPOINT + 12345)
    marks: dict[int, str] = {}
    hasher = SegmentHasher(0, marks)
    for i in range(0, len(data), 300_001):  # pieces that straddle the checkpoints
        hasher.update(memoryview(data)[i : i + 300_001])
    assert hasher.finish() == sha(data)
    assert marks == {
        CHECKPOINT: sha(data[:CHECKPOINT]),
        2 * CHECKPOINT: sha(data[: 2 * CHECKPOINT]),
        len(data): sha(data),
    }
    later: dict[int, str] = {}
    resumed = SegmentHasher(CHECKPOINT, later)  # a segment that starts where a retry resumed
    resumed.update(data[CHECKPOINT:])
    resumed.finish()
    assert later == {
        2 * CHECKPOINT: sha(data[CHECKPOINT : 2 * CHECKPOINT]),
        len(data): sha(data[CHECKPOINT:]),
    }


def test_marks_travel_as_lines_with_any_name() -> None:
    mark = Mark("dir/new\nline \xff", 8, 16, "ab" * 32, "16:123", final=True)
    assert resume.parse_mark(mark.line().rstrip("\n")) == mark
    assert resume.parse_mark("tar: x: Permission denied") is None
    assert resume.parse_mark("#trainjob-part 1 x") is None


def test_a_chain_is_verified_from_byte_0_segment_by_segment() -> None:
    chain = Chain(total=30)
    chain.local[0].update({8: "a8", 16: "a16", 20: "a20"})
    chain.remote.update({(0, 8): "a8", (0, 16): "a16"})  # the pod's mark of 20 never came
    assert chain.verified() == (16, False, False)
    chain.resume_at(16)
    assert chain.starts == [0, 16] and chain.local[16] == {}
    chain.local[16].update({24: "b24", 30: "b30"})
    chain.remote.update({(16, 24): "b24", (16, 30): "b30"})
    assert chain.verified() == (30, True, False)
    assert chain.segments("f") == [("f", 0, 16, "a16"), ("f", 16, 30, "b30")]
    chain.remote[(16, 24)] = "other"  # a mark the two sides disagree on
    assert chain.verified()[2] is True


def test_transport_failures_are_told_from_the_users_own() -> None:
    assert transport_failure(ConnectionLostError("lost")) == "the connection was lost"
    assert transport_failure(ApiServerError("x", status=503)) == "the API server answered 503"
    unreachable = ApiServerError("x", reason="ConnectionError")
    assert transport_failure(unreachable) == "the API server could not be reached"
    ended = ApiServerError("x", reason="InternalError", partial=ExecResult("", "", None))
    assert transport_failure(ended) == "the API server ended the stream"
    for not_transport in (
        ApiServerError("x", reason="TLSError"),
        ApiServerError("x", status=401),
        PermissionDeniedError("x", status=403),
        PodNotRunningError("x"),
        ExecTimeoutError("x"),
        TransferError("x does not exist in pod p"),
        OSError(28, "No space left on device"),
        KeyboardInterrupt(),
    ):
        assert transport_failure(not_transport) is None, not_transport


def test_the_retry_line() -> None:
    line = retry_line("download", 412 * MIB, 1 << 30, 1, 3, "resuming")
    assert line == ("download: the stream ended at 412.0 MiB of 1.0 GiB; resuming (retry 1 of 3)")


def test_retries_must_be_a_whole_number() -> None:
    assert resume.check_retries(0) == 0
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="retries must be a whole number"):
            resume.check_retries(bad)


# ------------------------------------------------------------------ a stand-in exec client


class LocalExec:
    """``ExecClient.run`` over local processes in ``pod`` (its working directory): the real
    pod-side scripts, with the stream cut after ``cuts[0]`` bytes of stdin (upload) or stdout
    (download) of an attempt, as a dropped API connection cuts it."""

    def __init__(self, pod: Path, cuts: list[int] | None = None, limit: int = 0) -> None:
        self.pod = pod
        self.cuts = list(cuts or [])
        self.limit = limit  # KiB a pod's process may write into one file (ulimit -f), 0: any
        self.calls: list[list[str]] = []
        self.moved = 0  # bytes of stdin and stdout that went through

    def run(
        self,
        namespace: str,
        pod: str,
        argv: list[str],
        *,
        container: str | None = None,
        stdin: Any = None,
        timeout: float | None = None,
        on_stdin: Callable[[int], None] | None = None,
        stdout_sink: Any = None,
        stderr_sink: Any = None,
        **_: Any,
    ) -> ExecResult:
        self.calls.append(argv)
        mode = next((a for a in argv if re.fullmatch(r"(new|resume|probe):\w+", a)), "")
        big = (stdin is not None and not isinstance(stdin, bytes)) or stdout_sink is not None
        cut = self.cuts[0] if self.cuts and big and not mode.startswith("probe") else None
        if self.limit:  # as a full disk: a write that fails (EFBIG: python3 ignores SIGXFSZ)
            argv = ["sh", "-c", f'ulimit -f {self.limit} && exec "$@"', "sh", *argv]
        proc = subprocess.Popen(
            argv,
            cwd=self.pod,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.reached = False  # the cut came (not the process's own end first)
        errs: list[bytes] = []
        err_thread = threading.Thread(target=lambda: errs.append(proc.stderr.read()))
        err_thread.start()
        outs: list[bytes] = []
        feeder = threading.Thread(target=self._feed, args=(proc, stdin, cut, on_stdin))
        feeder.start()
        if stdout_sink is None:
            outs.append(proc.stdout.read())
        else:
            got = 0
            while chunk := proc.stdout.read1(1 << 16):
                if cut is not None and got + len(chunk) >= cut:
                    stdout_sink.write(memoryview(chunk[: cut - got]))
                    self.moved += cut - got
                    self.reached = True
                    proc.kill()  # its children may write on: drained, as a kubelet does
                    while proc.stdout.read1(1 << 16):
                        pass
                    break
                stdout_sink.write(memoryview(chunk))
                got += len(chunk)
                self.moved += len(chunk)
        feeder.join()
        code = proc.wait()
        err_thread.join()
        if stderr_sink is not None:
            stderr_sink.write(memoryview(errs[0]))
        if self.reached:
            self.cuts.pop(0)
            raise ConnectionLostError(f"the connection to pod {pod} was lost (cut)")
        return ExecResult(
            stdout_bytes=outs[0] if outs else b"", stderr_bytes=errs[0], returncode=code
        )

    def _feed(self, proc: Any, stdin: Any, cut: int | None, on_stdin: Any) -> None:
        if stdin is None:
            return
        sent = 0
        try:
            if isinstance(stdin, bytes):
                proc.stdin.write(stdin)
            else:
                while data := stdin.read(1 << 16):
                    if cut is not None and sent + len(data) >= cut:
                        proc.stdin.write(data[: cut - sent])
                        self.moved += cut - sent
                        self.reached = True
                        break
                    proc.stdin.write(data)
                    sent += len(data)
                    self.moved += len(data)
                    if on_stdin is not None:
                        on_stdin(len(data))
            proc.stdin.close()
        except BrokenPipeError:
            pass


TARGET = PodCommand("pod-0", "node")


def tree(root: Path) -> dict[str, bytes]:
    """A directory of a few small files, a link and two large files (several checkpoints)."""
    (root / "sub").mkdir(parents=True)
    files = {
        "small.txt": b"small\n",
        "sub/empty": b"",
        "sub/a.bin": os.urandom(2 * CHECKPOINT + 777),
        "sub/b.bin": os.urandom(3 * CHECKPOINT + 5),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "ln").symlink_to("small.txt")
    return files


def contents(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


# ------------------------------------------------------------------ downloads


def test_a_download_cut_three_times_resumes_by_file_and_byte(tmp_path: Path) -> None:
    pod = tmp_path / "pod"
    files = tree(pod / "data")
    total = sum(len(d) for d in files.values())
    client = LocalExec(pod, cuts=[CHECKPOINT + 5000, 2 * CHECKPOINT + 17, 3 * CHECKPOINT])
    lines: list[str] = []
    out = tmp_path / "local" / "data"
    out.parent.mkdir()
    res = transfer.download(client, "ns", TARGET, "data", str(out), on_retry=lines.append)  # type: ignore[arg-type]
    assert res.verified == "sha256" and res.files == 4 and res.bytes == total
    assert contents(out) == files and (out / "ln").readlink() == Path("small.txt")
    assert len(lines) == 3
    for i, line in enumerate(lines, 1):
        assert re.fullmatch(
            rf"download: the stream ended at [\d.]+ MiB of [\d.]+ MiB; resuming \(retry {i} of 3\)",
            line,
        ), line
    resumed = [argv for argv in client.calls if any(a.startswith("resume:") for a in argv)]
    assert len(resumed) == 3
    # what was received whole or up to a mark both sides agreed on was not sent again: at most
    # one checkpoint per cut (and the headers) went twice
    assert client.moved < total + 3 * (CHECKPOINT + (1 << 16)) + 64 * 1024
    assert os.listdir(tmp_path / "local") == ["data"]  # no staging directory left


def test_a_download_without_retries_left_fails_in_one_line_leaving_nothing(
    tmp_path: Path,
) -> None:
    pod = tmp_path / "pod"
    pod.mkdir()
    random_file(pod / "big.bin", 3 * CHECKPOINT)
    client = LocalExec(pod, cuts=[CHECKPOINT + 1, 2 * CHECKPOINT + 1, 2 * CHECKPOINT + 9])
    lines: list[str] = []
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(TransferError) as info:
        transfer.download(
            client,  # type: ignore[arg-type]
            "ns",
            TARGET,
            "big.bin",
            str(local / "big.bin"),
            retries=2,
            on_retry=lines.append,
        )
    message = str(info.value)
    assert "\n" not in message and "the connection was lost, 3 times (retries: 2" in message
    assert f"nothing was written to {local / 'big.bin'}" in message
    assert len(lines) == 2 and len(client.calls) == 3
    assert os.listdir(local) == []


def test_a_download_of_a_missing_file_is_not_retried(tmp_path: Path) -> None:
    (tmp_path / "pod").mkdir()
    client = LocalExec(tmp_path / "pod")
    lines: list[str] = []
    with pytest.raises(TransferError, match="does not exist in pod pod-0"):
        transfer.download(client, "ns", TARGET, "nope", str(tmp_path / "x"), on_retry=lines.append)  # type: ignore[arg-type]
    assert len(client.calls) == 1 and lines == []


def test_a_pod_file_that_changed_between_attempts_is_sent_whole(tmp_path: Path) -> None:
    pod = tmp_path / "pod"
    pod.mkdir()
    random_file(pod / "f.bin", 3 * CHECKPOINT)
    client = LocalExec(pod, cuts=[2 * CHECKPOINT + 100])
    changed: list[bytes] = []

    def change(line: str) -> None:  # between the cut and the next attempt
        changed.append(random_file(pod / "f.bin", 3 * CHECKPOINT + 1))

    out = tmp_path / "f.bin"
    transfer.download(client, "ns", TARGET, "f.bin", str(out), on_retry=change)  # type: ignore[arg-type]
    assert out.read_bytes() == changed[0]  # not the old start with the new end


# ------------------------------------------------------------------ uploads


def test_an_upload_cut_three_times_resumes_by_file_and_byte(tmp_path: Path) -> None:
    src = tmp_path / "data"
    files = tree(src)
    total = sum(len(d) for d in files.values())
    pod = tmp_path / "pod"
    pod.mkdir()
    client = LocalExec(pod, cuts=[CHECKPOINT + 5000, 2 * CHECKPOINT + 17, 3 * CHECKPOINT])
    lines: list[str] = []
    res = transfer.upload(client, "ns", [TARGET], src, "dst/", on_retry=lines.append)  # type: ignore[arg-type]
    assert res.verified == "sha256" and res.files == 4
    assert contents(pod / "dst" / "data") == files
    assert (pod / "dst" / "data" / "ln").readlink() == Path("small.txt")
    assert os.listdir(pod / "dst") == ["data"]  # the staging directory went
    assert [re.sub(r"[\d.]+ MiB", "N", line) for line in lines] == [
        f"upload: the stream ended at N of N; resuming (retry {i} of 3)" for i in (1, 2, 3)
    ]
    probes = [argv for argv in client.calls if any(a.startswith("probe:") for a in argv)]
    assert len(probes) == 3
    assert client.moved < total + 3 * (CHECKPOINT + (1 << 16)) + 64 * 1024


def test_an_upload_without_retries_left_leaves_nothing_in_the_pod(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    random_file(src, 3 * CHECKPOINT)
    pod = tmp_path / "pod"
    (pod / "dst").mkdir(parents=True)
    (pod / "dst" / "big.bin").write_bytes(b"the old copy stays as it was")
    client = LocalExec(pod, cuts=[CHECKPOINT + 1, CHECKPOINT + 2])
    with pytest.raises(TransferError) as info:
        transfer.upload(client, "ns", [TARGET], src, "dst/big.bin", retries=1, on_retry=print)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and "failed on pod-0: the connection was lost, 2 times" in message
    assert "nothing was left in the pod" in message
    assert os.listdir(pod / "dst") == ["big.bin"]  # no staging directory
    assert (pod / "dst" / "big.bin").read_bytes() == b"the old copy stays as it was"


def test_a_local_file_that_changed_between_attempts_is_sent_whole(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    random_file(src, 3 * CHECKPOINT)
    pod = tmp_path / "pod"
    pod.mkdir()
    client = LocalExec(pod, cuts=[2 * CHECKPOINT + 100])
    changed: list[bytes] = []

    def change(line: str) -> None:
        changed.append(random_file(src, 3 * CHECKPOINT))  # same size, new bytes and mtime
        os.utime(src, ns=(1, 1))

    transfer.upload(client, "ns", [TARGET], src, "f.bin", on_retry=change)  # type: ignore[arg-type]
    assert (pod / "f.bin").read_bytes() == changed[0]


def test_an_upload_the_pod_cannot_write_fails_at_once(tmp_path: Path) -> None:
    src = tmp_path / "f.txt"
    src.write_text("x")
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "notadir").write_text("plain")
    client = LocalExec(pod)
    lines: list[str] = []
    with pytest.raises(TransferError, match="unpacking into notadir failed") as info:
        transfer.upload(client, "ns", [TARGET], src, "notadir/f.txt", on_retry=lines.append)  # type: ignore[arg-type]
    assert "\n" not in str(info.value) and lines == []
    scripts = [argv[2] for argv in client.calls]
    assert scripts == [manifest.UPLOAD_SH, manifest.CLEAN_SH]  # one attempt, then the cleanup
    assert (pod / "notadir").read_text() == "plain"


def test_an_upload_the_pod_cannot_store_fails_at_once_leaving_nothing(tmp_path: Path) -> None:
    """A write that fails in the pod (a file size limit here, a full disk there) is no transport
    failure: one line at once, no retry, no staging directory, nothing in place."""
    src = tmp_path / "big.bin"
    random_file(src, 2 * MIB)
    pod = tmp_path / "pod"
    pod.mkdir()
    client = LocalExec(pod, limit=1024)
    lines: list[str] = []
    with pytest.raises(TransferError) as info:
        transfer.upload(client, "ns", [TARGET], src, "big.bin", on_retry=lines.append)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and "File too large" in message and lines == [], message
    scripts = [argv[2] for argv in client.calls]
    assert scripts == [manifest.UPLOAD_SH, manifest.CLEAN_SH]  # one attempt, then the cleanup
    assert os.listdir(pod) == []


def test_a_tar_upload_cut_between_two_members_places_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tar xf -`` ends without an error when its stream stops between two members: tar's way
    (no python3 in the pod, or verify=False) moves the copy into place only once the client
    saw the whole stream land (and checked it), so a cut leaves nothing half-written."""
    monkeypatch.setattr(manifest, "PYTHONS", ("/nonexistent/python3",))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(3000))
    (src / "b.bin").write_bytes(os.urandom(5000))
    with tarfile.open(fileobj=io.BytesIO(TarStream(src, "src").read())) as tar:
        boundary = tar.getmembers()[-1].offset  # the last member's header: a shorter archive
    pod = tmp_path / "pod"
    pod.mkdir()
    for verify in (False, True):
        client = LocalExec(pod, cuts=[boundary])
        with pytest.raises(TransferError) as info:
            transfer.upload(client, "ns", [TARGET], src, "dst", verify=verify, retries=0)  # type: ignore[arg-type]
        assert os.listdir(pod) == []  # nothing in place, no staging directory
        message = str(info.value)
        assert "\n" not in message and "the connection was lost, 1 time" in message, message
        assert "nothing was left in the pod; run it again" in message


def test_an_upload_to_pods_sharing_a_volume_lands_whole_on_each(tmp_path: Path) -> None:
    """Pods of one job often share a volume (here: one directory): each pod's copy stages in a
    directory of its own, so none removes another's."""
    data = random_file(tmp_path / "f.bin", 2 * CHECKPOINT + 3)
    pod = tmp_path / "shared"
    pod.mkdir()
    targets = [PodCommand(f"pod-{i}", "node") for i in range(4)]
    res = transfer.upload(LocalExec(pod), "ns", targets, tmp_path / "f.bin", "f.bin")  # type: ignore[arg-type]
    assert res.ok and res.verified == "sha256"
    assert os.listdir(pod) == ["f.bin"] and (pod / "f.bin").read_bytes() == data


class ShortStdin:
    """A stand-in exec client whose stdin stream ends after ``keep`` bytes (a dropped stream)."""

    def __init__(self, pod: Path, keep: int) -> None:
        self.pod, self.keep = pod, keep

    def run(self, namespace: str, pod: str, argv: list[str], **kw: Any) -> ExecResult:
        done = subprocess.run(
            argv, cwd=self.pod, input=kw["stdin"][: self.keep], capture_output=True, check=False
        )
        return ExecResult(
            stdout_bytes=done.stdout, stderr_bytes=done.stderr, returncode=done.returncode
        )


def test_a_write_cut_short_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """write_file (``%%trainjob_writefile``) writes beside the file and renames it onto it only
    once every byte arrived; a short stream fails in one line and changes nothing."""
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "train.py").write_text("the old script\n")
    os.chmod(pod / "train.py", 0o750)
    data = b"print('the new one')\n" * 100
    with pytest.raises(TransferError) as info:
        transfer.write_file(ShortStdin(pod, 1000), "ns", [TARGET], "train.py", data)  # type: ignore[arg-type]
    assert (pod / "train.py").read_text() == "the old script\n"
    assert os.listdir(pod) == ["train.py"]  # no temporary file left
    message = str(info.value)
    assert "\n" not in message and f"1000 of {len(data)} bytes of train.py arrived" in message
    assert message.endswith("train.py was left as it was; run it again")
    transfer.write_file(ShortStdin(pod, len(data)), "ns", [TARGET], "train.py", data)  # type: ignore[arg-type]
    assert (pod / "train.py").read_bytes() == data
    assert (pod / "train.py").stat().st_mode & 0o777 == 0o750 and os.listdir(pod) == ["train.py"]


# ------------------------------------------------------------------ the ledgers by hand


def test_the_receive_ledger_cuts_back_to_the_agreed_byte_and_asks_for_the_rest(
    tmp_path: Path,
) -> None:
    ledger = ReceiveLedger()
    data = os.urandom(2 * CHECKPOINT + 10)
    staged = tmp_path / "f"
    staged.write_bytes(data[: CHECKPOINT + 99])  # what arrived before the cut
    hasher = ledger.open_file("f", 0, len(data))
    hasher.update(data[: CHECKPOINT + 99])
    done = ledger.open_file("g", 0, 3)
    done.update(b"abc")
    done.finish()
    ledger.absorb(
        [
            Mark("f", 0, CHECKPOINT, sha(data[:CHECKPOINT]), "9:9").line(),
            Mark("g", 0, 3, sha(b"abc"), "3:1", True).line(),
        ]
    )
    assert ledger.kept() == CHECKPOINT + 3
    spec = ledger.plan(tmp_path)
    head, body = spec.split(b"\n", 1)
    assert int(head) == len(body)
    assert sorted(body.decode().split("\n")) == sorted(
        [f"o {CHECKPOINT} 9:9 {b'f'.hex()}", f"s {b'g'.hex()}"]
    )
    assert staged.stat().st_size == CHECKPOINT
    with pytest.raises(TransferError, match="was not asked for"):
        ledger.open_file("f", 5, len(data))


def test_the_send_ledger_reads_the_journal_and_writes_the_trailer(tmp_path: Path) -> None:
    data = os.urandom(CHECKPOINT + 10)
    (tmp_path / "f").write_bytes(data)
    stream = TarStream(tmp_path / "f", "f")
    stream.read()
    ledger = SendLedger()
    ledger.adopt(stream.starts, {"f": len(data)}, stream.marks)
    journal = [
        "#trainjob-seg 0 " + b"f".hex(),
        Mark("f", 0, CHECKPOINT, sha(data[:CHECKPOINT])).line().strip(),
    ]
    ledger.absorb(journal)
    assert ledger.plan() == (set(), {"f": CHECKPOINT})
    rest = stream.resumed(set(), {"f": CHECKPOINT})
    assert len(rest.read()) == rest.size < 8 * 1024  # the last 10 bytes, headers, the end
    ledger.adopt(rest.starts, {"f": len(data)}, rest.marks)
    assert ledger.trailer().decode().splitlines() == [
        "#trainjob-expect",
        f"0 {CHECKPOINT} {sha(data[:CHECKPOINT])} {b'f'.hex()}",
        f"{CHECKPOINT} {len(data)} {sha(data[CHECKPOINT:])} {b'f'.hex()}",
        "#trainjob-end",
    ]


# ------------------------------------------------------------------ tar's way: start again


def test_without_python3_or_verify_a_cut_transfer_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without python3 in the pod (or with verify=False: plain tar) nothing can resume from a
    byte: a retry starts again, said so, and the copy still lands whole, through the staging
    directory."""
    monkeypatch.setattr(manifest, "PYTHONS", ("/nonexistent/python3",))
    data = random_file(tmp_path / "f.bin", 2 * CHECKPOINT)
    pod = tmp_path / "pod"
    pod.mkdir()
    for verify in (True, False):
        client = LocalExec(pod, cuts=[CHECKPOINT])
        lines: list[str] = []
        up = transfer.upload(
            client,  # type: ignore[arg-type]
            "ns",
            [TARGET],
            tmp_path / "f.bin",
            f"up-{verify}.bin",
            verify=verify,
            on_retry=lines.append,
        )
        assert (pod / f"up-{verify}.bin").read_bytes() == data
        assert up.verified == ("sha256" if verify else "none")
        assert len(lines) == 1 and "starting again" in lines[0], lines
        client = LocalExec(pod, cuts=[CHECKPOINT])
        lines = []
        out = tmp_path / f"down-{verify}.bin"
        transfer.download(
            client,  # type: ignore[arg-type]
            "ns",
            TARGET,
            f"up-{verify}.bin",
            str(out),
            verify=verify,
            on_retry=lines.append,
        )
        assert out.read_bytes() == data
        assert len(lines) == 1 and "starting again" in lines[0], lines
    assert sorted(os.listdir(pod)) == ["up-False.bin", "up-True.bin"]
    assert sorted(os.listdir(tmp_path)) == ["down-False.bin", "down-True.bin", "f.bin", "pod"]
