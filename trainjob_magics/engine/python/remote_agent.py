"""The pod-side interpreter of ``%%trainjob --python`` (stdlib only, Python 3.8+).

Never imported by the engine: ``scripts.py`` reads this file and passes it (compressed) as one
argv element, ``python3 -c BOOTSTRAP <source> boot NAME``. Boot forks the agent and returns once
it listens; the agent stays in the boot exec's process group (not a session of its own), so the
pod's end kills it like every other process of the pod.

State lives in ``${TMPDIR:-/tmp}/trainjob-magics/NAME.HOSTNAME/`` (mode 0700; the pod's
HOSTNAME, so that pods sharing /tmp have an agent each): ``sock`` (the Unix socket
the per-cell clients connect to), ``agent.pid`` (for the interrupt and the stopper), ``exe``
(this interpreter, so clients skip PATH shims), ``lock`` (one agent per directory), ``log``.

Two kinds of client. The fast one is a POSIX sh script (``scripts.CELL``, no interpreter to
start): it writes its request to ``q.PID``, makes the FIFO ``c.PID``, writes its PID to the
FIFO ``ctl`` and waits on ``c.PID``; the agent writes the output straight into the client's
stdout and stderr (the exec's pipes, which the client copied to fds 7 and 8:
``/proc/PID/fd/7``), ends stdout with ``NONCE + JSON result``, then writes ``done`` to
``c.PID`` (``fallback`` when it cannot open those pipes: the engine then uses the other
client). The other client (``remote_client.py``, for big requests) talks over ``sock``: frames
of 1 kind byte + 4-byte big-endian length + payload. Client to agent: ``x`` (a JSON request),
``i`` (interrupt). Agent to client: ``o``/``e`` (stdout/stderr bytes, file descriptors 1 and 2
included), ``r`` (the JSON result).
"""

from __future__ import annotations

import ast
import base64
import builtins
import fcntl
import io
import json
import linecache
import os
import pickle
import queue
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
import traceback
import types

HEADER = struct.Struct("!cI")
AGENT_FILE = "<trainjob-magics-agent>"
MAX_TEXT = 1 << 20  # characters of a repr (or rich form) sent back
PICKLE_PROTOCOL = 4
RICH = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_latex_", "text/latex"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
)


def state_dir(name: str) -> str:
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "trainjob-magics", name)


def send_frame(sock: socket.socket, kind: bytes, payload: bytes) -> None:
    sock.sendall(HEADER.pack(kind, len(payload)) + payload)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        data = sock.recv(min(n, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> tuple[bytes, bytes] | None:
    head = recv_exact(sock, HEADER.size)
    if head is None:
        return None
    kind, size = HEADER.unpack(head)
    body = recv_exact(sock, size) if size else b""
    return None if body is None else (kind, body)


def block_sigint() -> None:
    """Helper threads never take SIGINT: it is for the code in the main thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def pending(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"... [{len(text) - MAX_TEXT} more characters not shown]"


class Conn:
    """One client connection (one cell)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.alive = True

    def send(self, kind: bytes, payload: bytes) -> None:
        if not self.alive:
            return
        try:
            send_frame(self.sock, kind, payload)
        except OSError:
            self.alive = False  # the exec is gone: the code goes on, its output is dropped

    def close(self) -> None:
        try:  # noqa: SIM105 (no contextlib import in the pod)
            self.sock.close()
        except OSError:
            pass


class PipeConn:
    """A sh client: its stdout and stderr pipes, opened through /proc, and its FIFO."""

    def __init__(self, pid: int, nonce: bytes, done_fd: int, done_path: str) -> None:
        self.nonce = nonce
        self.done_fd = done_fd
        self.done_path = done_path
        self.alive = True
        self.out = reopen(pid, 7)
        try:
            self.err = reopen(pid, 8)
        except OSError:
            os.close(self.out)
            raise

    def send(self, kind: bytes, payload: bytes) -> None:
        if not self.alive:
            return
        if kind == b"r":
            kind, payload = b"o", self.nonce + payload + b"\n"
        fd = self.out if kind == b"o" else self.err
        try:
            while payload:
                payload = payload[os.write(fd, payload) :]
        except OSError:
            self.alive = False

    def close(self) -> None:
        for fd in (self.out, self.err):
            try:  # noqa: SIM105 (no contextlib import in the pod)
                os.close(fd)
            except OSError:
                pass
        try:  # noqa: SIM105 (no contextlib import in the pod)
            os.write(self.done_fd, b"done\n")  # stays in the FIFO: the client holds it open
        except OSError:
            pass
        os.close(self.done_fd)
        remove(self.done_path)


class Agent:
    def __init__(self, directory: str, out_fd: int, err_fd: int) -> None:
        self.dir = directory
        self.fds = {out_fd: b"o", err_fd: b"e"}
        self.lock = threading.Lock()  # guards current and every frame sent
        self.current: Conn | None = None
        self.running = False
        self.cells = 0
        self.instance = base64.b32encode(os.urandom(10)).decode().lower()
        self.requests: queue.Queue = queue.Queue()
        self.main_thread = threading.get_ident()
        user = types.ModuleType("__main__")
        user.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = user  # classes defined in cells pickle as __main__.X
        self.ns = user.__dict__

    # -- output ------------------------------------------------------------------------
    def pump(self) -> None:
        """Forward fd 1 and 2 in the order the code wrote them: one edge-triggered epoll over
        both pipes, whose events come in write order while each pipe holds one write (see
        ``capture``). One read empties a pipe (it is at most 64 KiB)."""
        block_sigint()
        poller = select.epoll()
        for fd in self.fds:
            os.set_blocking(fd, False)
            poller.register(fd, select.EPOLLIN | select.EPOLLET)
        while True:
            for fd, _events in poller.poll():
                with self.lock:
                    try:
                        data = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if self.current is not None:
                        self.current.send(self.fds[fd], data)

    def drain(self) -> None:
        """Wait until everything the cell wrote to fd 1/2 went to its client."""
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 (no contextlib import in the pod)
                stream.flush()
            except Exception:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self.lock:
                if not any(pending(fd) for fd in self.fds):
                    return
            time.sleep(0.001)

    # -- connections -------------------------------------------------------------------
    def accept(self, server: socket.socket) -> None:
        block_sigint()
        while True:
            sock, _ = server.accept()
            threading.Thread(target=self.serve, args=(sock,), daemon=True).start()

    def serve(self, sock: socket.socket) -> None:
        block_sigint()
        conn = Conn(sock)
        first = recv_frame(sock)
        if first is None or first[0] != b"x":
            sock.close()
            return
        if self.running or not self.requests.empty():
            conn.send(b"e", b"(waiting: this interpreter still runs earlier code)\n")
        self.requests.put((conn, json.loads(first[1].decode("utf-8"))))
        while True:
            try:
                frame = recv_frame(sock)
            except OSError:
                frame = None
            if frame is None:
                conn.alive = False
                return
            if frame[0] == b"i" and conn is self.current and self.running:
                signal.pthread_kill(self.main_thread, signal.SIGINT)

    def control(self, ctl: int) -> None:
        """Requests of sh clients: one PID per line on the FIFO ``ctl``."""
        block_sigint()
        buffer = b""
        while True:
            select.select([ctl], [], [])
            buffer += os.read(ctl, 4096)
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.isdigit():
                    self.pickup(int(line))

    def pickup(self, pid: int) -> None:
        request_path = os.path.join(self.dir, f"q.{pid}")
        done_path = os.path.join(self.dir, f"c.{pid}")
        try:
            with open(request_path, "rb") as fh:
                nonce, body = fh.read().split(b"\n")[:2]
            remove(request_path)
            request = json.loads(body.decode("utf-8"))
        except (OSError, ValueError):
            return
        done_fd = done_writer(done_path, pid)
        if done_fd is None:  # the client went away
            remove(done_path)
            return
        try:
            conn = PipeConn(pid, nonce, done_fd, done_path)
        except OSError:
            os.write(done_fd, b"fallback\n")
            os.close(done_fd)
            remove(done_path)
            return
        if self.running or not self.requests.empty():
            conn.send(b"e", b"(waiting: this interpreter still runs earlier code)\n")
        self.requests.put((conn, request))

    def on_sigint(self, signum: int, frame: object) -> None:
        if self.running:
            raise KeyboardInterrupt

    def loop(self) -> None:
        while True:
            try:
                conn, request = self.requests.get()
            except KeyboardInterrupt:
                continue
            with self.lock:
                self.current = conn
            try:
                result = self.handle(request)
            except KeyboardInterrupt as exc:
                self.running = False
                result = self.error(exc)
            self.drain()
            result["instance"] = self.instance
            payload = json.dumps(result).encode("utf-8")
            with self.lock:
                conn.send(b"r", payload)
                self.current = None
            conn.close()

    # -- requests ----------------------------------------------------------------------
    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "run":
            return self.run(request["code"])
        if op == "push":
            return self.push(request["values"])
        if op == "pull":
            return self.pull(request["names"], int(request["max_bytes"]))
        if op == "ping":
            return {"ok": True}
        return {"ok": False, "error": {"type": "ValueError", "message": f"unknown op {op!r}"}}

    def run(self, code: str) -> dict:
        self.cells += 1
        filename = f"<cell-{self.cells}>"
        try:
            tree = ast.parse(code, filename, "exec")
        except (SyntaxError, ValueError) as exc:
            return self.error(exc, syntax=True)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        last = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr) and not code.rstrip().endswith(";"):
            tree.body.pop()
            last = ast.Expression(tail.value)
        try:
            self.running = True
            exec(compile(tree, filename, "exec"), self.ns)
            value = eval(compile(last, filename, "eval"), self.ns) if last else None
            result = self.value(value)
        except BaseException as exc:
            self.running = False
            return self.error(exc)
        finally:
            self.running = False
        return result

    def value(self, value: object) -> dict:
        if value is None:
            return {"ok": True}
        self.ns["_"] = value
        try:
            text = repr(value)
        except Exception as exc:
            text = f"<repr failed: {type(exc).__name__}: {exc}>"
        data = {"text/plain": clip(text)}
        for attr, mime in RICH:
            try:
                method = getattr(value, attr, None)
                form = method() if callable(method) and not isinstance(value, type) else None
            except Exception:
                continue
            if isinstance(form, tuple):
                form = form[0]
            if isinstance(form, bytes):
                form = base64.b64encode(form).decode("ascii")
            if isinstance(form, str) and len(form) <= MAX_TEXT:
                data[mime] = form
        return {"ok": True, "data": data}

    def error(self, exc: BaseException, syntax: bool = False) -> dict:
        if syntax:
            lines = traceback.format_exception_only(type(exc), exc)
        else:
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == AGENT_FILE:
                tb = tb.tb_next
            lines = traceback.format_exception(type(exc), exc, tb)
        return {
            "ok": False,
            "error": {
                "type": type(exc).__name__,
                "message": clip(str(exc)),
                "traceback": clip("".join(lines)),
            },
        }

    def push(self, values: dict) -> dict:
        for name, blob in values.items():
            try:
                self.ns[name] = pickle.loads(base64.b64decode(blob))
            except Exception as exc:
                return failure(
                    "UnpicklingError",
                    f"cannot unpickle {name!r} in the pod: {type(exc).__name__}: {exc}",
                )
        return {"ok": True}

    def pull(self, names: list, max_bytes: int) -> dict:
        values = {}
        for name in names:
            if name not in self.ns:
                return failure("NameError", f"name {name!r} is not defined in the interpreter")
            try:
                blob = pickle.dumps(self.ns[name], protocol=PICKLE_PROTOCOL)
            except Exception as exc:
                kind = type(self.ns[name]).__name__
                return failure(
                    "PicklingError",
                    f"cannot pickle {name!r} (a {kind}): {type(exc).__name__}: {exc}",
                )
            if len(blob) > max_bytes:
                return failure(
                    "ValueError",
                    f"{name!r} is {len(blob):,} bytes pickled, over the limit of {max_bytes:,}",
                )
            values[name] = base64.b64encode(blob).decode("ascii")
        return {"ok": True, "values": values}


def reopen(pid: int, fd: int) -> int:
    """Open the client's ``fd`` for writing: a new open file of the pipe, which gets the
    client's packet mode (``O_DIRECT``: the local cluster's exec pipes keep stdout and stderr
    in order with it)."""
    out = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY)
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
            if int(fh.read().split("flags:")[1].split()[0], 8) & os.O_DIRECT:
                fcntl.fcntl(out, fcntl.F_SETFL, os.O_WRONLY | os.O_DIRECT)
    except (OSError, ValueError, IndexError):
        pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def done_writer(path: str, pid: int) -> int | None:
    """Open the client's FIFO once the client reads it (so that our end, closed by our exit,
    is what it waits on); None when the client is gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(pid):
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: the client has not opened it yet
            time.sleep(0.001)
    return None


def remove(path: str) -> None:
    try:  # noqa: SIM105 (no contextlib import in the pod)
        os.unlink(path)
    except OSError:
        pass


def failure(kind: str, message: str) -> dict:
    return {"ok": False, "error": {"type": kind, "message": message, "traceback": ""}}


def capture(fd: int) -> int:
    """Point ``fd`` at a new pipe; return the pipe's read end. The pipe is in packet mode and
    one page big: a write then waits until the last one was read, which keeps the order of
    stdout and stderr knowable."""
    try:
        r, w = os.pipe2(os.O_DIRECT)
    except (OSError, AttributeError):
        r, w = os.pipe()
    try:  # noqa: SIM105 (no contextlib import in the pod)
        fcntl.fcntl(r, 1031, 4096)  # F_SETPIPE_SZ (named in Python 3.10+)
    except OSError:
        pass
    os.dup2(w, fd)
    os.close(w)
    return r


def serve(directory: str, lock: object, ready: int) -> None:
    """The agent process: capture fd 1/2, listen, signal ``ready``, run requests forever."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out_r, err_r = capture(1), capture(2)
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
        write_through=True,
    )  # fmt: skip
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
        write_through=True,
    )  # fmt: skip
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    agent = Agent(directory, out_r, err_r)
    signal.signal(signal.SIGINT, agent.on_sigint)
    cwd = os.getcwd()
    os.chdir(directory)  # a relative socket path: pod paths may exceed sun_path's 108 bytes
    try:
        if os.path.exists("sock"):
            os.unlink("sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind("sock")
        server.listen(16)
        if os.path.exists("ctl"):
            os.unlink("ctl")
        os.mkfifo("ctl", 0o600)
        ctl = os.open("ctl", os.O_RDWR)  # never sees EOF, never blocks a writer
        with open("agent.pid", "w") as fh:
            fh.write(f"{os.getpid()}\n")
        if os.path.isabs(sys.executable) and os.access(sys.executable, os.X_OK):
            with open("exe", "w") as fh:
                fh.write(sys.executable + "\n")
    finally:
        os.chdir(cwd)
    threading.Thread(target=agent.pump, daemon=True).start()
    threading.Thread(target=agent.accept, args=(server,), daemon=True).start()
    threading.Thread(target=agent.control, args=(ctl,), daemon=True).start()
    hello = {"status": "started", "pid": os.getpid(), "instance": agent.instance}
    hello["python"] = sys.version.split()[0]
    os.write(ready, json.dumps(hello).encode("utf-8"))
    os.close(ready)
    os.write(log, f"agent {os.getpid()} started ({sys.executable})\n".encode())
    agent.loop()


def boot(name: str) -> int:
    """Start the agent of ``name`` unless one runs; print one JSON line saying what happened."""
    directory = state_dir(name)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    if os.stat(directory).st_uid != os.getuid():
        print(json.dumps({"status": "error", "message": f"{directory} belongs to another user"}))
        return 1
    lock = open(os.path.join(directory, "lock"), "a")  # noqa: SIM115 (held, and inherited by the agent)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(json.dumps({"status": "running"}))
        return 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the agent: same process group as this exec, so the pod's end kills it
        os.close(r)
        try:
            serve(directory, lock, w)
        except BaseException:
            os.write(w, json.dumps({"status": "error", "message": traceback.format_exc()}).encode())
        os._exit(1)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 1 << 16)
        if not data:
            break
        chunks.append(data)
    text = b"".join(chunks).decode("utf-8", "replace") or '{"status": "error", "message": ""}'
    print(text)
    return 0 if json.loads(text).get("status") == "started" else 1


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[-2] == "boot":
    sys.exit(boot(sys.argv[-1]))
