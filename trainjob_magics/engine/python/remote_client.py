"""The per-cell client of ``%%trainjob --python`` (stdlib only, Python 3.8+, runs with -I -S).

Never imported by the engine: ``scripts.py`` passes this file's text as one argv element,
``python3 -I -S -c <source> NAME``. stdin: ``!II`` (nonce length, request length), the nonce,
the JSON request. The client hands the request to the agent of NAME, relays its output to
stdout/stderr as it comes, and ends stdout with ``NONCE + JSON result + newline`` (or a
``status`` the engine acts on: ``no-agent``, ``agent-gone``). SIGINT/SIGTERM ask the agent to
raise KeyboardInterrupt in the running code. Only built-in modules (``_socket``, ``_signal``,
``_struct``): the client starts in about 10 ms.
"""

import _signal
import _socket
import _struct
import os
import sys

HEADER = _struct.Struct("!cI")


def read_exact(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise SystemExit("trainjob-magics: the request ended early")
        data += chunk
    return data


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def main():
    stdin, out, err = sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer
    nonce_len, size = _struct.unpack("!II", read_exact(stdin, 8))
    nonce = read_exact(stdin, nonce_len)
    request = read_exact(stdin, size)
    directory = os.path.join(os.environ.get("TMPDIR") or "/tmp", "trainjob-magics", sys.argv[1])
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        os.chdir(directory)  # relative path: sun_path holds only 108 bytes
        sock.connect("sock")
    except OSError:
        out.write(nonce + b'{"status": "no-agent"}\n')
        return

    def interrupt(signum, frame):
        try:  # noqa: SIM105 (no contextlib import in the pod)
            sock.sendall(HEADER.pack(b"i", 0))
        except OSError:
            pass

    _signal.signal(_signal.SIGINT, interrupt)
    _signal.signal(_signal.SIGTERM, interrupt)
    sock.sendall(HEADER.pack(b"x", len(request)) + request)
    while True:
        head = recv_exact(sock, HEADER.size)
        kind, length = HEADER.unpack(head) if head else (b"", 0)
        body = recv_exact(sock, length) if head else None
        if body is None:
            out.write(nonce + b'{"status": "agent-gone"}\n')
            return
        if kind == b"o":
            out.write(body)
            out.flush()
        elif kind == b"e":
            err.write(body)
            err.flush()
        elif kind == b"r":
            out.write(nonce + body + b"\n")
            return


try:
    main()
    sys.stdout.flush()
except BrokenPipeError:  # the exec connection is gone; the agent keeps the state
    os._exit(0)
