"""What the frames of one exec mean: output routed to sinks or bounded buffers (with
incremental UTF-8 decoding for ``on_output``), the channel-3 exit status, fragments reassembled
and pings answered. A wrapped command's end marks (scripts.WRAPPER) are cut out of its streams
before anything sees them (:class:`EndMark`)."""

from __future__ import annotations

import codecs
import json
import struct
import time
from collections.abc import Callable
from typing import Any

from ..result import EMPTY, CapturedOutput, ExecResult
from .frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    STATUS,
    STDERR,
    STDOUT,
    ConnectionDropped,
    StdinSender,
    client_frame,
)
from .output import MAX_MEMORY_OUTPUT, OutputBuffer, Sink, SpillDir, sink_writer

STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}


CLOSE_GRACE = 1.0  # wait this long for the close frame after the status arrived


OnOutput = Callable[[str, str], None]


def parse_exec_status(payload: bytes | bytearray | memoryview) -> tuple[int | None, str]:
    """``(returncode, message)`` from a channel-3 metav1.Status; returncode None = no exit code."""
    try:
        data = json.loads(bytes(payload).decode("utf-8", "replace"))
    except ValueError:
        return None, bytes(payload).decode("utf-8", "replace").strip()[:300]
    if not isinstance(data, dict):
        return None, str(data)[:300]
    if data.get("status") == "Success":
        return 0, ""
    message = str(data.get("message") or data.get("reason") or "command failed")
    for cause in (data.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message")).strip()), message
            except ValueError:
                break
    return None, message


MARK_START = b"\x1e"  # the first byte of an end mark (scripts.end_mark_head)


MARK_TAIL = 4  # after the head: the exit code's 3 digits and a newline


class EndMark:
    """The wrapper's end mark in one output stream: found and cut out wherever it comes (a
    background process may write after it), its exit code kept. A frame's last bytes that
    could be the start of the mark are held back until the next frame or :meth:`release`
    tells. A frame without the mark's first byte passes as it is after one ``find`` (memchr),
    one that has it after a search for the whole head (output tagged with that byte on every
    line, as torchrun's is, stays a C-speed scan)."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.size = len(head) + MARK_TAIL
        self.code: int | None = None  # the command's exit code, once the mark came
        self.held = b""

    def clear(self, payload: bytes | bytearray | memoryview) -> bool:
        """Whether a frame (channel byte first) passes untouched: nothing held, and neither
        the mark nor what may begin it in it."""
        if self.code is not None:
            return True
        if self.held:
            return False
        if not isinstance(payload, (bytes, bytearray)):
            payload = bytes(payload)
        if payload.find(MARK_START, 1) < 0:
            return True
        return payload.find(self.head, 1) < 0 and self._tail(payload, 1) < 0

    def _could_be(self, piece: bytes | bytearray) -> bool:
        """Whether ``piece`` (at most :attr:`size` bytes) is the mark or its beginning."""
        n = len(self.head)
        if not self.head.startswith(piece[:n]):
            return False
        code, end = piece[n : n + 3], piece[n + 3 :]
        return (not code or code.isdigit()) and (not end or end == b"\n")

    def _tail(self, buf: bytes | bytearray, start: int = 0) -> int:
        """Where, among ``buf``'s last bytes, what may begin the mark starts (-1: nowhere)."""
        at = buf.find(MARK_START, max(start, len(buf) - self.size + 1))
        while at >= 0 and not self._could_be(buf[at:]):
            at = buf.find(MARK_START, at + 1)
        return at

    def cut(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The stream's bytes of this frame, without the mark (or what may begin it)."""
        buf = self.held + bytes(data)
        self.held = b""
        out: list[bytes] = []
        start = at = 0
        while self.code is None:
            at = buf.find(self.head, at)
            if at < 0 or len(buf) - at < self.size:
                break
            if self._could_be(buf[at : at + self.size]):
                out.append(buf[start:at])
                self.code = int(buf[at + self.size - 4 : at + self.size - 1])
                start = at + self.size
            else:
                at += 1
        if self.code is None:
            at = self._tail(buf, start)
            if at >= 0:
                self.held, buf = buf[at:], buf[:at]
        out.append(buf[start:])
        return [p for p in out if p]

    def release(self) -> bytes:
        """The held bytes, when the stream ended without completing the mark: the command's."""
        held, self.held = self.held, b""
        return held


class Collector:
    """Routes each output frame: to the stream's sink when it has one, else into a bounded
    :class:`OutputBuffer`; feeds ``on_output`` with incrementally decoded text (collected
    streams only), in the order the frames came; records that order across the streams (runs
    of ``(channel, bytes)``, for ``ExecResult.output``). Nothing else is decoded while the
    command runs."""

    def __init__(
        self,
        on_output: OnOutput | None,
        *,
        pod: str = "",
        limit: int | None = MAX_MEMORY_OUTPUT,
        spill_dir: SpillDir | None = None,
        sinks: dict[int, Sink | None] | None = None,
    ) -> None:
        self.on_output = on_output
        self.received = 0  # output bytes seen (stdout + stderr, sinks included)
        self.sinks = {ch: sink_writer(s) for ch, s in (sinks or {}).items() if s is not None}
        self.buffers = {
            ch: OutputBuffer(limit, spill_dir, f"{pod or 'exec'}-{STREAM_NAMES[ch]}-")
            for ch in (STDOUT, STDERR)
            if ch not in self.sinks
        }
        self.decoders = (
            {ch: codecs.getincrementaldecoder("utf-8")(errors="replace") for ch in self.buffers}
            if on_output is not None
            else {}
        )
        self.runs: list[list[int]] = []  # [channel, bytes] per run of one stream's frames
        self.marks: dict[int, EndMark] = {}  # channel -> the wrapper's end mark in it

    def expect_end(self, head: bytes | None) -> None:
        """The command runs under the wrapper: cut its end mark (``head``...) out of both
        streams (None: no mark is expected)."""
        self.marks = {ch: EndMark(head) for ch in (STDOUT, STDERR)} if head else {}

    def add_frame(self, channel: int, payload: bytes | bytearray | memoryview) -> None:
        """One output frame (the channel byte first), without the end mark."""
        mark = self.marks.get(channel)
        if mark is None or mark.clear(payload):
            self.add(channel, memoryview(payload)[1:])
            return
        for piece in mark.cut(memoryview(payload)[1:]):
            self.add(channel, memoryview(piece))

    def ended(self) -> int | None:
        """The exit code the end marks carry when both streams reached the command's end, else
        None (no marks expected, or a stream ended before its mark came)."""
        codes = [mark.code for mark in self.marks.values()]
        return codes[0] if codes and None not in codes else None

    def add(self, channel: int, data: memoryview) -> None:
        self.received += len(data)
        sink = self.sinks.get(channel)
        if sink is not None:
            sink(data)
            return
        self.buffers[channel].add(data)
        if self.runs and self.runs[-1][0] == channel:
            self.runs[-1][1] += len(data)
        else:
            self.runs.append([channel, len(data)])
        if self.on_output is not None:
            text = self.decoders[channel].decode(data)
            if text:
                self.on_output(STREAM_NAMES[channel], text)

    def flush(self) -> None:
        """Take what may have begun an end mark (the stream ended without it), then emit what
        the decoders still hold (a truncated multi-byte sequence)."""
        for channel, mark in self.marks.items():
            held = mark.release()
            if held:
                self.add(channel, memoryview(held))
        if self.on_output is None:
            return
        for channel, decoder in self.decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                self.on_output(STREAM_NAMES[channel], text)

    def order(self) -> tuple[tuple[int, int], ...]:
        return tuple((channel, size) for channel, size in list(self.runs))

    def snapshot(self, started: float, pod: str) -> ExecResult:
        """The output so far, without an exit code (safe while the command still runs)."""
        order = self.order()  # before the buffers: the runs never cover bytes not taken
        stdout, stderr = (
            self.buffers[ch].snapshot() if ch in self.buffers else EMPTY for ch in (STDOUT, STDERR)
        )
        return ExecResult.from_captured(
            stdout,
            stderr,
            None,
            time.monotonic() - started,
            pod,
            order=order,
        )

    def result(self, returncode: int | None, started: float, pod: str) -> ExecResult:
        def captured(channel: int) -> CapturedOutput:
            buffer = self.buffers.get(channel)
            return buffer.freeze() if buffer is not None else EMPTY

        return ExecResult.from_captured(
            captured(STDOUT),
            captured(STDERR),
            returncode,
            time.monotonic() - started,
            pod,
            order=self.order(),
        )


class FrameHandler:
    """What the frames of one exec mean: output to the collector, the channel-3 status,
    fragments reassembled, pings answered."""

    def __init__(self, collector: Collector, sender: StdinSender) -> None:
        self.collector = collector
        self.sender = sender
        self.returncode: int | None = None
        self.message = ""
        self.got_status = False
        self.close_by = 0.0  # after the status: wait until then for the close frame
        self.fragments: list[Any] = []
        self.fragment_op = OP_BINARY

    def outcome(self) -> tuple[int | None, str, bool]:
        return self.returncode, self.message, self.got_status

    def handle(self, fin: bool, opcode: int, payload: bytes | bytearray | memoryview) -> bool:
        """Act on one frame; True for the close frame (:class:`ConnectionDropped` when it closes
        abnormally before the status)."""
        if opcode == OP_CONT:
            self.fragments.append(payload)
            if not fin:
                return False
            payload, opcode = b"".join(self.fragments), self.fragment_op
            self.fragments = []
        elif opcode in (OP_TEXT, OP_BINARY) and not fin:
            self.fragments, self.fragment_op = [payload], opcode
            return False
        if opcode in (OP_TEXT, OP_BINARY):
            if not payload:
                return False
            channel = payload[0]
            data = memoryview(payload)[1:]
            if channel in (STDOUT, STDERR):
                if data:
                    self.collector.add_frame(channel, payload)
            elif channel == STATUS:
                self.returncode, self.message = parse_exec_status(data)
                self.got_status = True
                self.close_by = time.monotonic() + CLOSE_GRACE
                self.sender.abandon_stdin()  # the command has ended
        elif opcode == OP_CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            if not self.got_status and code not in (1000, 1005):
                reason = bytes(payload[2:]).decode("utf-8", "replace")
                self.sender.abandon_stdin()
                raise ConnectionDropped(f"WebSocket closed with code {code} {reason}".strip())
            return True
        elif opcode == OP_PING:
            self.sender.queue_control(client_frame(bytes(payload), OP_PONG))
        return False
