"""Record what ``kubectl port-forward`` and an API server say to each other in the port-forward
tunnel (WebSocket ``SPDY/3.1+portforward.k8s.io``): a TLS-terminating relay between them that
keeps both byte streams, and the SPDY bytes taken out of the WebSocket messages.

The relay listens with a certificate of its own and dials the API server with the kubeconfig's
client certificate (if any); kubectl gets a kubeconfig that points at the relay without
verification and keeps the user's token. The fixture keeps no token: only the SPDY bytes, the
request line and the negotiated subprotocol.

    python -m tests.helpers.spdy_recorder --local OUT.json            # the local cluster
    python -m tests.helpers.spdy_recorder --kubeconfig K --namespace N --server TEXT OUT.json
    python -m tests.helpers.spdy_recorder --kubeconfig K --namespace N --pod P --port 8080 OUT.json
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml


class Relay:
    """TLS in (its own certificate), TLS out (to ``upstream``), both directions kept."""

    def __init__(self, upstream: tuple[str, int], client_ctx: ssl.SSLContext, workdir: Path):
        from trainjob_magics.localcluster.tls import make_tls

        self.upstream = upstream
        self.client_ctx = client_ctx
        self.server_ctx = make_tls(workdir).server_context()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sessions: list[dict[str, bytearray]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        record = {"up": bytearray(), "down": bytearray()}
        with self._lock:
            self.sessions.append(record)
        try:
            down = self.server_ctx.wrap_socket(raw, server_side=True)
            up = self.client_ctx.wrap_socket(
                socket.create_connection(self.upstream), server_hostname=self.upstream[0]
            )
        except (OSError, ssl.SSLError):
            raw.close()
            return
        threading.Thread(target=self._pipe, args=(up, down, record["down"]), daemon=True).start()
        self._pipe(down, up, record["up"])

    @staticmethod
    def _pipe(src: ssl.SSLSocket, dst: ssl.SSLSocket, keep: bytearray) -> None:
        try:
            while data := src.recv(1 << 16):
                keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def websocket_payloads(raw: bytes) -> bytes:
    """The binary messages' bytes after the HTTP head, unmasked and joined."""
    _head, _, rest = raw.partition(b"\r\n\r\n")
    out, pos = bytearray(), 0
    while len(rest) - pos >= 2:
        b0, b1 = rest[pos], rest[pos + 1]
        length, pos = b1 & 0x7F, pos + 2
        if length == 126:
            length, pos = int.from_bytes(rest[pos : pos + 2], "big"), pos + 2
        elif length == 127:
            length, pos = int.from_bytes(rest[pos : pos + 8], "big"), pos + 8
        mask = b""
        if b1 & 0x80:
            mask, pos = rest[pos : pos + 4], pos + 4
        payload = bytes(rest[pos : pos + length])
        pos += length
        if mask:
            payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        if b0 & 0x0F in (0x0, 0x2):
            out += payload
    return bytes(out)


def head_facts(raw: bytes) -> dict[str, str]:
    """The request or status line and the subprotocol header (no credentials)."""
    head = raw.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    facts = {"line": head[0]}
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() in ("sec-websocket-protocol", "upgrade"):
            facts[name.strip().lower()] = value.strip()
    return facts


def _contexts(kubeconfig: Path, workdir: Path) -> tuple[str, int, ssl.SSLContext, dict[str, Any]]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    ctx_name = cfg["current-context"]
    context = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == context["user"])
    server = cluster["server"].removeprefix("https://")
    host, _, port = server.rpartition(":")
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    if "client-certificate-data" in user:
        cert, key = workdir / "client.crt", workdir / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        client.load_cert_chain(cert, key)
    elif "client-certificate" in user:
        client.load_cert_chain(user["client-certificate"], user.get("client-key"))
    kept = {k: v for k, v in user.items() if k in ("token", "tokenFile", "exec")}
    # kubectl prompts for a user name when it has no credentials; the relay's client
    # certificate authenticates (kube-apiserver tries x509 before tokens)
    kept = kept or {"token": "unused-the-relay-authenticates"}
    return host.strip("[]"), int(port or 443), client, kept


def record(
    kubeconfig: Path, namespace: str, pod: str, port: int, requests: int = 3
) -> dict[str, Any]:
    """Run ``kubectl port-forward`` through a relay, make ``requests`` HTTP requests (0: one
    that is expected to fail, nothing listening), and return the SPDY bytes both ways and the
    handshake facts."""
    workdir = Path(tempfile.mkdtemp(prefix="spdy-rec-"))
    host, api_port, client_ctx, user = _contexts(kubeconfig, workdir)
    relay = Relay((host, api_port), client_ctx, workdir)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "relay",
                "cluster": {
                    "server": f"https://127.0.0.1:{relay.port}",
                    "insecure-skip-tls-verify": True,
                },
            }
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "relay", "context": {"cluster": "relay", "user": "u"}}],
        "current-context": "relay",
    }
    (workdir / "kubeconfig").write_text(yaml.safe_dump(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        local = s.getsockname()[1]
    env = dict(os.environ, KUBECONFIG=str(workdir / "kubeconfig"))
    argv = ["kubectl", "port-forward", "-n", namespace, f"pod/{pod}", f"{local}:{port}"]
    out, err = workdir / "kubectl.out", workdir / "kubectl.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{local}/"
    bodies = []
    try:
        deadline = time.monotonic() + 30
        while b"Forwarding from" not in out.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kubectl port-forward: {err.read_text()[-500:]}")
            time.sleep(0.05)
        try:
            bodies += [urllib.request.urlopen(url, timeout=10).read() for _ in range(requests)]
        except OSError as exc:
            raise RuntimeError(f"{exc}; kubectl port-forward: {err.read_text()[-500:]}") from None
        if not requests:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url, timeout=10).read()
        time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        time.sleep(0.3)
        relay.close()
    version = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True)
    tunnel = [s for s in relay.sessions if b"/portforward" in bytes(s["up"][:2000])]
    up, down = bytes(tunnel[-1]["up"]), bytes(tunnel[-1]["down"])
    return {
        "kubectl": version.stdout.splitlines()[0] if version.stdout else "",
        "request": head_facts(up),
        "response": head_facts(down),
        "client_to_server": base64.b64encode(websocket_payloads(up)).decode(),
        "server_to_client": base64.b64encode(websocket_payloads(down)).decode(),
        "bodies": [b.decode("utf-8", "replace") for b in bodies],
    }


def record_in_session(kubeconfig: Path, namespace: str, server: str) -> dict[str, Any]:
    """Connect a session (its trainer pod serves a page), record kubectl against it: three
    requests, then a port where nothing listens."""
    from trainjob_magics import connect

    session = connect("torch-distributed", config_file=str(kubeconfig), namespace=namespace)
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        session.execute("mkdir -p www && printf 'recorded page' > www/index.html")
        session.execute(
            f"cd www && nohup python3 -m http.server {port} --bind 127.0.0.1 "
            "> /dev/null 2>&1 < /dev/null &"
        )
        time.sleep(1.5)
        result = record(kubeconfig, session.namespace, session.pod, port)
        closed = port + 1
        refused = record(kubeconfig, session.namespace, session.pod, closed, 0)
        result["server"] = server
        result["port"] = port
        result["refused"] = {
            "port": closed,
            "client_to_server": refused["client_to_server"],
            "server_to_client": refused["server_to_client"],
        }
        return result
    finally:
        session.close(timeout=60)


def record_on_local_cluster() -> dict[str, Any]:
    """Start the local cluster and record kubectl against its tunnel."""
    from trainjob_magics.localcluster import LocalCluster

    with LocalCluster() as cluster:
        server = "trainjob_magics local cluster (portforward_spdy)"
        return record_in_session(Path(cluster.kubeconfig_path), "default", server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--local", action="store_true")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--pod")
    parser.add_argument("--port", type=int)
    parser.add_argument("--server", default="")
    args = parser.parse_args()
    if args.local:
        result = record_on_local_cluster()
    elif args.pod is None:  # a session of our own in --namespace serves the page
        result = record_in_session(Path(args.kubeconfig), args.namespace, args.server)
    else:
        result = record(Path(args.kubeconfig), args.namespace, args.pod, args.port)
        result["server"], result["port"] = args.server, args.port
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"recorded {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
