"""Copy files and directories to and from pods as tar streams over exec, like ``kubectl cp``.

One exec per pod each way (the scripts are in ``manifest.py`` and ``pod_python.py``; paths only
ever as argv). Upload: the tar stream is produced while it is sent (one pod) or once into a
temporary file that every pod reads (several pods), each file hashed as it is read; the pod
unpacks it, hashing each file as it writes it (python3; else ``tar xf -``, then the files that
landed are hashed), and reports the sha256 of every file, which must match. Download: the pod
packs ``NAME``, hashing each file as it reads it (python3; else ``tar cf -`` with the hashing
next to it); the stream is unpacked here as it arrives into a staging directory, every member
checked before it is written (no absolute names, no ``..``, nothing outside the target, no links
escaping it, no devices: the ``kubectl cp`` CVE-2019-1002101 family; then ``tarfile``'s ``data``
filter), each file hashed as it is written; it is moved into place only when every file's
sha256 equals the pod's. A mismatch names the file.

A stream that ends early (a dropped connection, an API server's 5xx) is retried up to
``retries`` times, each retry said in one line (``on_retry``), going on from where it ended by
file and byte (``resume.py``): an upload lands in a staging directory in the pod
(``.trainjob-upload-TOKEN`` beside the destination, one per pod) that is moved into place only
once every segment's sha256 matched; a download's staging directory here is kept between
attempts. A transfer that cannot finish fails in one line and leaves nothing half-written on
either side. So does one that is stopped (:class:`Stop`: Ctrl-C, a ``cancel`` event, the
session closed): its stream ends, the pod's attempt is stopped, the staging directories are
removed, and it raises :class:`TransferInterruptedError`. What a killed process leaves behind
is swept by the next transfer into the same directory (``staging.py``).

Destinations: ``dest`` is the path of the copy; a ``dest`` ending in ``/`` (or, on download, an
existing local directory when the source is a file) means "inside it, under the source's name".
Relative remote paths are relative to the container's working directory.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import posixpath
import queue
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    ExecTimeoutError,
    InvalidInputError,
    TransferError,
    TransferInterruptedError,
    UnsafeArchiveError,
)
from ..exec.client import ExecClient
from ..exec.fanout import PodCommand
from ..exec.frames import client_frame
from ..exec.pool import PodPool, run_each
from ..exec.stop import INTERRUPT_WAIT
from ..result import ExecResult
from . import staging
from .archive import STREAM_CHUNK, UNPACK_CHUNK, ChunkStream, TarStream, place, unpack
from .manifest import (
    NO_TOOLS,
    FileInfo,
    clean_argv,
    compare,
    download_argv,
    handover_argv,
    no_tools_message,
    parse_files,
    probe_argv,
    upload_argv,
    upload_tar_argv,
)
from .resume import (
    CUT,
    DEFAULT_RETRIES,
    NO_PYTHON,
    NO_STAGE,
    ReceiveLedger,
    SendLedger,
    backoff,
    check_retries,
    human,
    retry_line,
    transport_failure,
)
from .staging import LocalStage, no_interrupt, sweep_local

log = logging.getLogger(__name__)

TransferProgress = Callable[[int, int], None]  # (bytes done, bytes total)
OnRetry = Callable[[str], object]  # hears the one line of each retry


# write_file ("$1" path, "$2" bytes expected): into a file beside PATH (a copy of it first, for
# its mode), renamed onto it only once all of it arrived: a cut stream leaves PATH as it was
# ("#trainjob-short N", exit 3). A link is written through, as "cat > PATH" does.
WRITE_SH = (
    'f=$1; if [ -L "$f" ]; then f=$(readlink -f -- "$f") || exit; fi; '
    'if [ -d "$f" ]; then echo "$1: Is a directory" >&2; exit 1; fi; '
    'd=$(dirname -- "$f") && mkdir -p -- "$d" || exit; t="$d/.trainjob-write-$$"; '
    'if [ -e "$f" ]; then cp -p -- "$f" "$t" 2>/dev/null; fi; '
    'if ! cat > "$t"; then rm -f -- "$t"; exit 1; fi; n=$(( $(wc -c < "$t") )); '
    'if [ "$n" != "$2" ]; then rm -f -- "$t"; echo "#trainjob-short $n" >&2; exit 3; fi; '
    'mv -f -- "$t" "$f" || { rm -f -- "$t"; exit 1; }; echo "$n"'
)
CLEAN_TIMEOUT = 30.0  # seconds the removal of an upload's staging directory may take
STOP_WAIT = CLEAN_TIMEOUT + 10  # seconds a stopped upload's pods get to clean up
AGAIN = "run it again to copy it"


class _Stopped(Exception):
    """Raised inside a transfer that was stopped (:class:`Stop`)."""


class _PodStopped(Exception):
    """One pod's upload was stopped; ``left``: what it may have left there (empty: nothing)."""

    def __init__(self, why: str, left: str) -> None:
        super().__init__(f"stopped ({why})")
        self.left = left


class Stop:
    """Stops a transfer from another thread: :meth:`set` (or the ``cancel`` event it watches)
    ends its stream at the next piece and makes it clean up and raise
    :class:`TransferInterruptedError`. A transfer whose last bytes were sent already ends as
    it would have (an upload being moved into place is never cut short)."""

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self.event = threading.Event()
        self.cancel = cancel
        self.why = ""
        self.hint = ""
        self.ended = threading.Event()  # the transfer returned or raised

    def set(self, why: str, hint: str = AGAIN) -> None:
        """Stop the transfer (``why``: a few words, ``hint``: what to do next)."""
        if not self.event.is_set():
            self.why, self.hint = why, hint
        self.event.set()

    def is_set(self) -> bool:
        if not self.event.is_set() and self.cancel is not None and self.cancel.is_set():
            self.set(str(getattr(self.cancel, "why", "cancelled")))  # the magics: interrupted
        return self.event.is_set()

    def check(self) -> None:
        """Raise :class:`_Stopped` once stopped."""
        if self.is_set():
            raise _Stopped(self.why)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until stopped."""
        end = time.monotonic() + seconds
        while not self.is_set() and (left := end - time.monotonic()) > 0:
            self.event.wait(min(left, 0.05))


@dataclass
class TransferResult:
    """What a copy moved: per-pod errors, files and bytes, and how it was verified."""

    source: str
    destination: str
    pods: list[str]
    files: int = 0
    bytes: int = 0
    verified: str = "none"  # "sha256" | "size" | "none"
    duration: float = 0.0
    errors: dict[str, BaseException] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every pod succeeded."""
        return not self.errors

    @property
    def failed(self) -> list[str]:
        """Pods where the copy failed."""
        return [p for p in self.pods if p in self.errors]

    def summary(self) -> str:
        """One line describing the copy."""
        where = ", ".join(self.pods) if len(self.pods) <= 3 else f"{len(self.pods)} pods"
        what = f"{self.files} file{'s' if self.files != 1 else ''}, {_human(self.bytes)}"
        if self.errors:
            names = ", ".join(self.failed)
            return f"copy {self.source} -> {self.destination} failed on {names}"
        return (
            f"copied {self.source} -> {self.destination} ({what}) on {where} in "
            f"{self.duration:.2f}s, verified by {self.verified}"
        )


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def split_remote(path: str, source_name: str) -> tuple[str, str]:
    """``(parent dir, entry name)`` of a remote destination (``dir/`` -> inside, source name)."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidInputError(f"remote path must be a non-empty string, got {path!r}")
    if path.endswith("/"):
        parent, name = path.rstrip("/") or "/", source_name
    else:
        parent, name = posixpath.split(path)
        parent = parent or "."
    if name in ("", ".", ".."):
        raise InvalidInputError(f"remote path {path!r} does not name a file or directory")
    return parent, name


class _RangeReader:
    """A private read cursor over an open file descriptor (one per pod, thread-safe)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.offset = 0

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.offset if n < 0 else min(n, self.size - self.offset)
        data = os.pread(self.fd, n, self.offset) if n > 0 else b""
        self.offset += len(data)
        return data


class _ProgressTotal:
    """Thread-safe running total reported as (done, total)."""

    def __init__(self, total: int, callback: TransferProgress | None) -> None:
        self.total = total
        self.done = 0
        self.callback = callback
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        """``n`` more bytes done (fewer, when ``n`` is negative: a retry sends them again)."""
        with self.lock:
            self.done += n
            done = max(0, min(self.done, self.total))
        if self.callback is not None:
            self.callback(done, self.total)

    def set(self, done: int) -> None:
        self.add(done - self.done)

    def finish(self, final: int | None = None) -> None:
        """Report the end: ``(final, final)``, by default the total announced."""
        if self.callback is not None:
            self.total = self.total if final is None else final
            self.callback(self.total, self.total)


class _PodProgress:
    """One pod's share of an upload's total: the bytes of the archive it holds or was sent."""

    def __init__(self, total: _ProgressTotal, full: int) -> None:
        self.total = total
        self.full = full
        self.done = 0

    def start(self, size: int) -> None:
        """An attempt sends ``size`` bytes: the pod holds the rest of the archive already."""
        self.add(self.full - size - self.done)

    def add(self, n: int) -> None:
        self.done += n
        self.total.add(n)


def _say(on_retry: OnRetry | None, line: str) -> None:
    """A retry's line to the caller (``on_retry``), else to the log."""
    if on_retry is None:
        log.warning("%s", line)
        return
    try:
        on_retry(line)
    except Exception:
        log.warning("the on_retry callback failed", exc_info=True)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.001, deadline - time.monotonic())


def _check(result: ExecResult, what: str, pod: str) -> None:
    if result.returncode == 127 and NO_TOOLS in result.stderr:
        raise TransferError(no_tools_message(pod))
    if result.returncode != 0:
        detail = _one_line(result.stderr or result.stdout) or f"exit code {result.returncode}"
        raise TransferError(f"{what} failed in pod {pod}: {detail}")


def upload(
    client: ExecClient,
    namespace: str,
    targets: Sequence[PodCommand],
    local: str | os.PathLike[str],
    remote: str,
    *,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
    retries: int = DEFAULT_RETRIES,
    on_retry: OnRetry | None = None,
    stop: Stop | None = None,
) -> TransferResult:
    """Copy a local file or directory to ``remote`` on every target pod (concurrently, through
    the bounded pod pool), in one exec per pod.

    The tar stream is produced while it is sent (one pod) or once into a temporary file that
    every pod reads (several), hashed as it is produced; the pod hashes it as it unpacks it
    into its staging directory, and moves the files into place once they all match. A stream
    that ends early is resumed, up to ``retries`` times per pod (``on_retry`` hears a line
    for each). Raises :class:`TransferError` naming the pods that failed (``.result`` has the
    details); :class:`TransferInterruptedError` after a Ctrl-C or ``stop``."""
    retries = check_retries(retries)
    stop = stop if stop is not None else Stop()
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    src = Path(local).expanduser()
    if not src.exists() and not src.is_symlink():
        raise InvalidInputError(f"local path {str(local)!r} does not exist")
    parent, name = split_remote(remote, src.resolve().name if src.name in ("", ".") else src.name)
    result = TransferResult(str(local), remote, [t.pod for t in targets])
    stream = TarStream(src, name)
    result.files = len(stream.files)
    result.bytes = sum(f.size for f in stream.files.values())
    total = _ProgressTotal(stream.size * len(targets), progress)
    token = secrets.token_hex(6)
    methods: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(stream.close)
        if len(targets) == 1:
            first: Callable[[], Any] = lambda: stream  # noqa: E731
        else:
            tmp = stack.enter_context(tempfile.TemporaryFile(prefix="trainjob-upload-"))
            try:
                packed = _Trailed(stream, None, stop)
                while chunk := packed.read(STREAM_CHUNK):
                    tmp.write(chunk)
            except (KeyboardInterrupt, _Stopped):  # nothing sent yet; the file goes with it
                stop.set("interrupted")
                raise TransferInterruptedError(
                    f"{stop.why}: upload of {local} to {remote} stopped before anything was "
                    f"sent; {stop.hint}",
                    result,
                ) from None
            tmp.flush()
            first = lambda: _RangeReader(tmp.fileno(), stream.size)  # noqa: E731

        ended = _Countdown(len(targets))

        def one(item: tuple[int, PodCommand]) -> None:
            index, target = item
            job = _PodUpload(client, namespace, target, stream, first, parent, name)
            job.verify, job.deadline, job.timeout = verify, deadline, timeout
            job.token = token if len(targets) == 1 else f"{token}{index:x}"  # a shared volume
            job.retries, job.on_retry, job.stop = retries, on_retry, stop
            job.progress = _PodProgress(total, stream.size)
            job.label = "upload" if len(targets) == 1 else f"upload to {target.pod}"
            try:
                methods[target.pod] = job.run()
            except Exception as exc:
                result.errors[target.pod] = exc
            finally:
                ended.count()

        PodPool(one, list(enumerate(targets)), name="trainjob-upload").start()
        interrupted = False
        try:
            ended.wait()
        except KeyboardInterrupt:
            interrupted = True
            stop.set("interrupted")
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
                ended.wait(STOP_WAIT)
    total.finish()
    result.verified = _weakest(methods.values()) if verify and methods else "none"
    result.duration = time.monotonic() - started
    stopped = [p for p, e in result.errors.items() if isinstance(e, _PodStopped)]
    if stop.is_set() and (stopped or len(result.errors) + len(methods) < len(targets)):
        message = _stopped_upload(stop, local, remote, result, methods)
        raise TransferInterruptedError(message, result)
    if interrupted and not result.errors:  # too late to stop it: said, not swallowed
        raise TransferInterruptedError(
            f"interrupted after the upload of {local} to {remote} had ended: it is in place "
            f"on {', '.join(result.pods)}",
            result,
        )
    if result.errors:
        first_error = next(iter(result.errors.values()))
        raise TransferError(
            f"upload of {local} to {remote} failed on {', '.join(result.failed)}: "
            f"{_one_line(str(first_error))}",
            result,
        )
    return result


class _Countdown:
    """Set once ``n`` workers have ended. Waited for instead of joining their threads: before
    Python 3.12, a Ctrl-C inside ``Thread.join`` marks a running thread as ended."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.lock = threading.Lock()
        self.done = threading.Event()
        if n <= 0:
            self.done.set()

    def count(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left <= 0:
                self.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


def _stopped_upload(
    stop: Stop, local: Any, remote: str, result: TransferResult, landed: Collection[str]
) -> str:
    """The one line of a stopped upload: where it stopped, what it left, what to do."""
    left = [e.left for e in result.errors.values() if isinstance(e, _PodStopped)]
    left = [w for w in left if w != NOTHING_LEFT]
    still = [p for p in result.pods if p not in result.errors and p not in landed]
    where = "" if len(result.pods) == 1 else f" on {', '.join(result.failed + still)}"
    stopped = [e for e in result.errors.values() if isinstance(e, _PodStopped)]
    if still:  # a second Ctrl-C, or pods that did not answer in time
        what = "its staging directory may be left in the pod until the next upload there"
    elif left:
        what = left[0]
    else:
        what = NOTHING_LEFT + ("s" if len(stopped) > 1 else "")
    done = [p for p in result.pods if p in landed]
    had = f" (it had landed on {', '.join(done)})" if done else ""
    return f"{stop.why}: upload of {local} to {remote} stopped{where}{had}; {what}; {stop.hint}"


class _Trailed:
    """An upload's stdin: the tar stream, then its trailer (made when the stream has been read:
    only then is every file hashed). Frames when the stream makes frames (a TarStream)."""

    def __init__(
        self, source: Any, trailer: Callable[[], bytes] | None, stop: Stop | None = None
    ) -> None:
        self.source = source
        self.trailer: Callable[[], bytes] | None = trailer
        self.stop = stop
        if hasattr(source, "read_frame"):
            self.read_frame = self._read_frame

    def _tail(self) -> bytes:
        make, self.trailer = self.trailer, None
        return make() if make is not None else b""

    def _read_frame(self) -> tuple[bytes | bytearray, int]:
        if self.stop is not None:
            self.stop.check()  # the stream ends here: the pod sees its stdin end
        frame, n = self.source.read_frame()
        if n:
            return frame, n
        tail = self._tail()
        return (client_frame(b"\x00" + tail), len(tail)) if tail else (b"", 0)

    def read(self, n: int = -1) -> bytes:
        if self.stop is not None:
            self.stop.check()
        data = self.source.read(n)
        return data if data else self._tail()


class _PodUpload:
    """One pod's upload: the first attempt, then, while the stream ends early and retries are
    left, a probe of what the pod holds and a stream of the rest."""

    verify = True
    token = "0"
    deadline: float | None = None
    timeout: float | None = None
    retries = DEFAULT_RETRIES
    on_retry: OnRetry | None = None
    label = "upload"

    def __init__(
        self,
        client: ExecClient,
        namespace: str,
        target: PodCommand,
        stream: TarStream,
        first: Callable[[], Any],
        parent: str,
        name: str,
    ) -> None:
        self.client, self.namespace, self.target = client, namespace, target
        self.stream, self.first = stream, first
        self.parent, self.name = parent, name
        self.ledger = SendLedger()
        self.progress = _PodProgress(_ProgressTotal(0, None), stream.size)
        self.tar = False  # tar's way: no python3 in the pod, or verify=False (no resume)
        self.sent: TarStream = stream  # the stream of the last attempt
        self.first_used = False  # the first stream was sent (a later one is made afresh)
        self.stop = Stop()
        self.method = "none"  # how the copy a hand-over moved into place was checked

    def _run(self, argv: list[str], stdin: Any = None) -> ExecResult:
        t = self.target
        return self.client.run(
            self.namespace,
            t.pod,
            argv,
            container=t.container,
            stdin=stdin,
            on_stdin=self.progress.add if stdin is not None else None,
            timeout=_remaining(self.deadline),
        )

    def run(self) -> str:
        """Until it landed (the verification method) or failed for good (raised)."""
        self.tar = not self.verify
        self.method = "sha256" if self.verify else "none"
        retry = 0
        while True:
            cut: str | None = None
            try:
                self.stop.check()
                stream, mode = self._next(retry)
                res = self._send(stream, mode)
                cut = self._cut(res)
                if cut is None and res.returncode == 5 and NO_PYTHON in res.stderr:
                    self.tar = True  # no python3: tar's way, from the start (not a retry)
                    continue
                if cut is None:
                    _swept(res.stderr, self.parent, self.target.pod)
                    if self.verify and res.returncode and "integrity check" in res.stderr:
                        self._verified(res.stdout)  # names the files as sent (raises)
                    _check(res, f"unpacking into {self.parent}", self.target.pod)
                    self.method = self._verified(res.stdout) if self.verify else "none"
                    if self.tar:
                        self._hand_over()  # tar's way: moved into place once checked
                    return self.method
            except _Stopped:
                left = self._clean()
                if left == LANDED:  # its hand-over had begun: it ended first, the copy is whole
                    return self.method
                raise _PodStopped(self.stop.why, left) from None
            except ExecTimeoutError:
                left = self._clean()
                if left == LANDED:
                    return self.method
                raise TransferError(
                    f"it did not finish within {self.timeout:g}s (the timeout); {left}; run it "
                    "again with a longer timeout (or none)"
                ) from None
            except Exception as exc:
                cut = transport_failure(exc)
                if cut is None:
                    self._clean()
                    raise
            if retry >= self.retries:
                left = self._clean()
                if left == LANDED:
                    return self.method
                raise TransferError(
                    f"{cut}, {retry + 1} time{'s' if retry else ''} (retries: {self.retries}); "
                    f"{left}; {AGAIN_LATER}"
                )
            retry += 1
            how = "starting again (no resume without python3)" if self.tar else "resuming"
            reached, size = self.progress.done, self.stream.size
            _say(self.on_retry, retry_line(self.label, reached, size, retry, self.retries, how))
            self.stop.sleep(backoff(retry))

    def _hand_over(self) -> None:
        """Tar's way: move the checked copy from the staging directory into place."""
        self.stop.check()
        res = self._run(handover_argv(self.parent, self.token, self.name))
        if res.returncode == 4 and NO_STAGE in res.stderr:
            raise TransferError(
                f"the copy staged in pod {self.target.pod} went away before it was moved into "
                f"{self.parent} (removed by hand, or swept); {AGAIN}"
            )
        _check(res, f"moving the copy into {self.parent}", self.target.pod)

    def _next(self, retry: int) -> tuple[TarStream, str]:
        """The stream of attempt ``retry`` and its mode (``new``: the pod starts afresh)."""
        if not retry and not self.first_used:
            return self.stream, "new"
        if self.tar:
            return self.stream.resumed(set(), {}), "new"
        probe = self._run(probe_argv(self.parent, self.name, self.token))
        lines = probe.stdout.splitlines()
        if probe.returncode != 0 or NO_PYTHON in lines:
            self.tar = True
            return self.stream.resumed(set(), {}), "new"
        if NO_STAGE in lines:
            self.ledger = SendLedger()
            return self.stream.resumed(set(), {}), "new"
        self.ledger.absorb(lines)
        skip, offsets = self.ledger.plan()
        return self.stream.resumed(skip, offsets), "resume"

    def _send(self, stream: TarStream, mode: str) -> ExecResult:
        self.sent = stream
        inner: Any = stream
        if stream is self.stream:
            inner, self.first_used = self.first(), True
        stale = staging.STALE_AFTER  # the pod's sweep of uploads that never ended
        if self.tar:
            argv = upload_tar_argv(self.parent, self.name, self.token, self.verify, stale)
            source: Any = _Trailed(inner, None, self.stop)
        else:
            argv = upload_argv(self.parent, self.name, True, self.token, mode, stale)
            sizes = {n: f.size for n, f in stream.files.items()}
            self.ledger.adopt(stream.starts, sizes, stream.marks)
            source = _Trailed(inner, self.ledger.trailer, self.stop)
        self.progress.start(stream.size)
        try:
            return self._run(argv, source)
        finally:
            if stream is not self.stream:
                stream.close()

    @staticmethod
    def _cut(res: ExecResult) -> str | None:
        """Why the attempt's stream ended early (None: it did not)."""
        if res.returncode is None:
            return "the stream ended before the pod's exit status"
        if res.returncode == 3 and CUT in res.stderr:
            return "the pod's stdin ended early"
        if res.returncode == 4 and NO_STAGE in res.stderr:
            return "the pod's staging directory went away"
        return None

    def _verified(self, stdout: str) -> str:
        """Compare what landed with what was sent; return the method (sha256, size)."""
        method, landed = parse_files(stdout)
        if "#trainjob-python" in stdout.splitlines():  # segments (resume.py)
            problems = self.ledger.problems(stdout)
        else:
            problems = compare(self.sent.files, landed)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise TransferError(
                f"integrity check failed in pod {self.target.pod}: {'; '.join(problems[:3])}{more}"
            )
        return method

    def _clean(self) -> str:
        """Stop the pod's attempts and remove its staging directory (what attempts left); say
        what is left: nothing, :data:`LANDED` (a hand-over under way ended first: the checked
        copy is in place), or where a partial copy may be (the removal failed)."""
        try:
            res = self.client.run(
                self.namespace,
                self.target.pod,
                clean_argv(self.parent, self.name, self.token),
                container=self.target.container,
                timeout=CLEAN_TIMEOUT,
            )
        except Exception as exc:
            log.warning("could not remove the upload's staging directory: %s", exc)
            return _left_in(self)
        if res.returncode != 0:
            return _left_in(self)
        return LANDED if "#trainjob-handedover" in res.stdout.splitlines() else NOTHING_LEFT


AGAIN_LATER = "run it again once the connection is steady (or allow more retries)"
NOTHING_LEFT = "nothing was left in the pod"
LANDED = "landed"  # _clean(): a hand-over under way ended first


def _left_in(job: _PodUpload) -> str:
    where = posixpath.join(job.parent, f".trainjob-upload-{job.token}")
    return f"its partial copy may be left in {where} until the next upload there (or remove it)"


def _swept(stderr: str, parent: str, pod: str) -> None:
    """Log the staging directories the pod's sweep removed (``#trainjob-swept HEXNAME``)."""
    names = []
    for line in stderr.splitlines():
        if line.startswith("#trainjob-swept "):
            raw = line.split(" ", 1)[1].strip()
            try:
                names.append(bytes.fromhex(raw).decode("utf-8", "replace"))
            except ValueError:
                names.append(raw)
    if names:
        log.info(
            "removed %d staging director%s of uploads that never ended in %s in pod %s: %s",
            len(names),
            "y" if len(names) == 1 else "ies",
            parent,
            pod,
            ", ".join(names),
        )


def _weakest(methods: Any) -> str:
    found = set(methods)
    return "size" if "size" in found else "sha256"


def write_file(
    client: ExecClient,
    namespace: str,
    targets: Sequence[PodCommand],
    path: str,
    data: bytes,
    *,
    timeout: float | None = None,
) -> TransferResult:
    """Write ``data`` to ``path`` on every target (parent directories created), size-checked."""
    started = time.monotonic()
    split_remote(path, "")
    if path.endswith("/"):
        raise InvalidInputError(f"remote path {path!r} names a directory, not a file")
    result = TransferResult("<data>", path, [t.pod for t in targets], 1, len(data), "size")

    def one(target: PodCommand) -> None:
        try:
            res = client.run(
                namespace,
                target.pod,
                ["sh", "-c", WRITE_SH, "sh", path, str(len(data))],
                container=target.container,
                stdin=data,
                timeout=timeout,
            )
            short = res.stderr.partition("#trainjob-short ")[2].split()
            if res.returncode == 3 and short:
                raise TransferError(
                    f"integrity check failed in pod {target.pod}: {short[0]} of {len(data)} "
                    f"bytes of {path} arrived; {path} was left as it was; run it again"
                )
            _check(res, f"writing {path}", target.pod)
            written = res.stdout.strip()
            if written != str(len(data)):
                raise TransferError(
                    f"integrity check failed in pod {target.pod}: {path} has {written or '?'} "
                    f"bytes, expected {len(data)}"
                )
        except Exception as exc:
            result.errors[target.pod] = exc

    run_each(one, targets, name="trainjob-write")
    result.duration = time.monotonic() - started
    if result.errors:
        first = next(iter(result.errors.values()))
        raise TransferError(
            f"writing {path} failed on {', '.join(result.failed)}: {_one_line(str(first))}", result
        )
    return result


class _PodReport:
    """The download script's stderr: the kind and size of the source first, the stream's hash
    last, tar's own messages between them."""

    def __init__(self, total: _ProgressTotal) -> None:
        self.total = total
        self.buf = bytearray()
        self.kind = ""

    def write(self, data: memoryview) -> None:
        self.buf += data
        if not self.kind and b"\n" in self.buf:
            first = self.buf.split(b"\n", 1)[0].decode("utf-8", "replace").split()
            if first[:1] == ["#trainjob-kind"] and len(first) >= 3:
                self.kind = first[1]
                self.total.total = int(first[2]) if first[2].isdigit() else 0

    def lines(self) -> list[str]:
        return self.buf.decode("utf-8", "replace").splitlines()

    def marker(self, name: str) -> str | None:
        for line in self.lines():
            if line.startswith(f"#trainjob-{name}"):
                return line[len(f"#trainjob-{name}") :].strip()
        return None

    def messages(self) -> str:
        return " ".join(ln for ln in self.lines() if not ln.startswith("#trainjob-"))


class _Aborted(Exception):
    """Raised into the exec by the download's sink once unpacking failed: stop receiving."""


class _Unpacker:
    """The receiving end of a download: the tar stream is unpacked as it arrives, in one helper
    thread, into a staging directory (:class:`~.staging.LocalStage`, created with the first
    byte, or the one an earlier attempt made), each file hashed as it is written, off the
    socket's thread. The received bytes are copied once, into batches of ``UNPACK_CHUNK``
    handed over through a bounded queue (memory stays bounded)."""

    DEPTH = 16  # batches queued at most

    def __init__(
        self,
        root: str,
        staging_parent: Path,
        total: _ProgressTotal,
        ledger: ReceiveLedger | None = None,
        stage: LocalStage | None = None,
        stop: Stop | None = None,
    ) -> None:
        self.root = root
        self.staging_parent = staging_parent
        self.total = total
        self.ledger = ledger
        self.files: dict[str, FileInfo] = {} if ledger is None else ledger.files
        self.links: dict[str, str] = {} if ledger is None else ledger.links
        self.stage = stage
        self.staging: Path | None = stage.data if stage is not None else None
        self.halt = stop
        self.error: BaseException | None = None
        self._queue: queue.Queue[memoryview | None] = queue.Queue(self.DEPTH)
        self._thread: threading.Thread | None = None
        # Batches are reused: fresh memory costs page faults, on a VM often the host's too.
        self._spare: collections.deque[bytearray] = collections.deque()
        self._batch = bytearray(UNPACK_CHUNK)
        self._filled = 0
        self._current: memoryview | None = None  # the batch the unpacking thread reads
        self._ended = False
        self._finished = threading.Event()  # waited for, not joined (see _Countdown)

    def write(self, data: memoryview) -> None:
        """The stdout sink: copy the chunk into the current batch (the reader's buffer may be
        reused); a full batch goes to the unpacking thread. Once unpacking failed, the exec is
        stopped (:class:`_Aborted`)."""
        if self.halt is not None:
            self.halt.check()  # the exec ends here
        if self.error is not None:
            raise _Aborted
        if self._thread is None:
            if self.stage is None:
                self.stage = LocalStage(self.staging_parent)
                self.staging = self.stage.data
            self._thread = threading.Thread(target=self._work, daemon=True, name="trainjob-unpack")
            self._thread.start()
        n = len(data)
        if self._filled + n > UNPACK_CHUNK:
            self._hand_over()
            if n > UNPACK_CHUNK:
                self._queue.put(memoryview(bytes(data)))
                self.total.add(n)
                return
        self._batch[self._filled : self._filled + n] = data
        self._filled += n
        self.total.add(n)

    def _hand_over(self) -> None:
        if self._filled:
            self._queue.put(memoryview(self._batch)[: self._filled])
            self._batch = self._spare.pop() if self._spare else bytearray(UNPACK_CHUNK)
            self._filled = 0

    def _next_batch(self) -> memoryview | None:
        """The unpacking thread's next batch; the one before is done with and reused."""
        done, self._current = self._current, None
        if done is not None and isinstance(done.obj, bytearray):
            self._spare.append(done.obj)
        if self._ended:
            return None
        batch = self._queue.get()
        self._ended = batch is None
        self._current = batch
        return batch

    def _work(self) -> None:
        assert self.staging is not None
        stream = ChunkStream(self._next_batch)
        try:
            got = unpack(stream, self.root, self.staging, self.links, self.ledger)
            if self.ledger is None:
                self.files = got
        except BaseException as exc:  # reported by finish()
            self.error = exc
        try:
            while self._next_batch() is not None:  # tar's padding, or all of it after an error
                pass
        finally:
            self._finished.set()

    def finish(self, cut: bool = False) -> None:
        """Wait until everything received is unpacked; raise its error. ``cut``: the stream
        ended early, so a stream that ends inside a member is no error."""
        if self._thread is None:
            return
        self._hand_over()
        self._queue.put(None)
        self._finished.wait()
        error = self.error
        if error is None:
            return
        if cut and isinstance(error, TransferError) and not isinstance(error, UnsafeArchiveError):
            return  # the broken end of a cut stream: the next attempt goes on from its marks
        raise error

    def stop(self) -> None:
        """Stop the unpacking thread (if running), keeping the staging directory."""
        if self._thread is not None and not self._finished.is_set():
            self._queue.put(None)
            self._finished.wait(INTERRUPT_WAIT)


def download(
    client: ExecClient,
    namespace: str,
    target: PodCommand,
    remote: str,
    local: str | os.PathLike[str],
    *,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
    retries: int = DEFAULT_RETRIES,
    on_retry: OnRetry | None = None,
    stop: Stop | None = None,
) -> TransferResult:
    """Copy ``remote`` (file or directory) from one pod to ``local`` in one exec: the pod packs
    and hashes the tar stream, which is unpacked here as it arrives (every member checked
    before it is written), hashed, and compared with the pod's hash before it is moved into
    place. A stream that ends early is resumed from the last byte both sides agree on, up to
    ``retries`` times (``on_retry`` hears a line for each); nothing is moved into place until
    the whole copy is verified. A Ctrl-C or ``stop`` raises :class:`TransferInterruptedError`
    with nothing written. First, the staging directories of downloads into the same directory
    that never ended are swept (``staging.py``)."""
    retries = check_retries(retries)
    stop = stop if stop is not None else Stop()
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    parent, name = split_remote(remote.rstrip("/") or remote, "")
    dest = Path(local).expanduser()
    into = str(local).endswith(("/", os.sep))
    staging_parent = dest if into or dest.is_dir() else dest.parent
    total = _ProgressTotal(0, progress)
    token = secrets.token_hex(6)
    ledger = ReceiveLedger()  # verify=False: plain tar, a retry starts again
    stage: LocalStage | None = None
    sink: _Unpacker | None = None
    retry = 0
    placed = False
    try:
        sweep_local(staging_parent)  # what downloads that never ended left there
        while True:
            stop.check()
            spec: bytes | None = None
            if retry and verify and ledger.resumable:
                spec = ledger.plan(stage.data if stage is not None else None)
                total.set(ledger.kept())
            elif retry:  # nothing to go on from: start again
                if stage is not None:
                    stage.remove()
                stage, ledger = None, ReceiveLedger()
                total.set(0)
            report = _PodReport(total)
            sink = _Unpacker(name, staging_parent, total, ledger if verify else None, stage, stop)
            cut: str | None = None
            try:
                res = client.run(
                    namespace,
                    target.pod,
                    download_argv(parent, name, verify, token, "resume" if spec else "new"),
                    container=target.container,
                    stdin=spec,
                    stdout_sink=sink,
                    stderr_sink=report,
                    timeout=_remaining(deadline),
                )
                if res.returncode is None:
                    cut = "the stream ended before the pod's exit status"
            except _Aborted:
                sink.finish()  # raises what stopped the unpacking
                raise
            except ExecTimeoutError:
                raise TransferError(
                    f"download of {remote} from pod {target.pod} did not finish within "
                    f"{timeout:g}s (the timeout); nothing was written to {dest}; run it again "
                    "with a longer timeout (or none)"
                ) from None
            except Exception as exc:
                cut = transport_failure(exc)
                if cut is None or stop.is_set():
                    raise
            finally:
                stage = sink.stage
            ledger.resumable = ledger.resumable or report.marker("python") is not None
            if cut is None:
                break
            sink.finish(cut=True)
            ledger.absorb(report.lines())
            if retry >= retries:
                raise TransferError(
                    f"download of {remote} from pod {target.pod} failed: {cut}, {retry + 1} "
                    f"time{'s' if retry else ''} (retries: {retries}; the last at "
                    f"{human(total.done)} of {human(total.total)}); nothing was written to "
                    f"{dest}; {AGAIN_LATER}"
                )
            retry += 1
            how = "resuming" if verify and ledger.resumable else "starting again"
            _say(on_retry, retry_line("download", total.done, total.total, retry, retries, how))
            stop.sleep(backoff(retry))
        sink.finish()
        _check_download(res, report, remote, target.pod)
        received = dict(sink.files)
        if not any(f == name or f.startswith(f"{name}/") for f in received) and (
            stage is None or not (stage.data / name).exists()
        ):
            raise TransferError(f"the archive from pod {target.pod} does not contain {name!r}")
        method = "none"
        if verify:
            ledger.absorb(report.lines())
            method, listed = parse_files("\n".join(report.lines()))
            if ledger.resumable:  # segments (resume.py)
                problems = ledger.problems()
            else:
                # a file tar sent as a hard link has its target's bytes
                received.update({n: received[t] for n, t in sink.links.items() if t in received})
                problems = compare(listed, received)
            if problems:
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                raise TransferError(
                    f"integrity check failed for {remote} from pod {target.pod}: "
                    f"{'; '.join(problems[:3])}{more} (did files change during the copy?)"
                )
        if into or (report.kind == "file" and dest.is_dir()):
            dest = dest / name
        assert stage is not None
        with no_interrupt():  # placed whole: a Ctrl-C waits until it is
            stop.check()
            place(stage.data, name, dest)
            placed = True
    except (KeyboardInterrupt, _Stopped):
        if placed:  # too late to stop it: said, not swallowed
            raise TransferInterruptedError(
                f"interrupted after the download of {remote} from pod {target.pod} had ended: "
                f"it is in place in {dest}"
            ) from None
        stop.set("interrupted")  # (a stop set before keeps its reason)
        raise TransferInterruptedError(
            f"{stop.why}: download of {remote} from pod {target.pod} stopped; nothing was "
            f"written to {dest}; {stop.hint}"
        ) from None
    finally:
        with no_interrupt():
            if sink is not None:
                sink.stop()
            if stage is not None:
                stage.remove()
    files = {n: f for n, f in sink.files.items()}
    nbytes = sum(f.size for f in files.values())
    total.finish(nbytes)
    return TransferResult(
        remote,
        str(dest),
        [target.pod],
        files=len(files),
        bytes=nbytes,
        verified=method,
        duration=time.monotonic() - started,
    )


def _check_download(res: ExecResult, report: _PodReport, remote: str, pod: str) -> None:
    if report.marker("notools") is not None:
        raise TransferError(no_tools_message(pod))
    if report.marker("missing") is not None:
        raise TransferError(f"{remote} does not exist in pod {pod}")
    if report.marker("other") is not None:
        raise TransferError(f"{remote} in pod {pod} is not a regular file or directory")
    if res.returncode != 0:
        detail = _one_line(report.messages()) or f"exit code {res.returncode}"
        raise TransferError(f"archiving {remote} failed in pod {pod}: {detail}")
