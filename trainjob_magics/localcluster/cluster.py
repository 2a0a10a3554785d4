"""LocalCluster: the API server, store and controller in a background thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from .apiserver import (
    AdmissionHook,
    ApiServer,
    AuthStats,
    Listener,
    ServerContext,
    SubresourceGetter,
    User,
    new_token,
    trainjob_schema,
)
from .apiserver.authn import Authenticator
from .controller import Controller, core_objects
from .controller.versions import (
    DEFAULT_TRAINER_VERSION,
    check_trainer_version,
    check_version_pair,
)
from .controller.webhook import trainer_webhook
from .core import exec_credential
from .core.faults import Faults
from .core.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    NAMESPACES,
    TRAINING_RUNTIMES,
    Registry,
    default_registry,
)
from .core.store import Store
from .kubeconfig_file import cert_user, exec_user, write_kubeconfig
from .kubelet.image_pull import ImageService
from .kubelet.node import node_resources
from .kubelet.volumes import PodIdentity
from .kueue import KueueConfig, KueueSimulation
from .tls import make_tls

log = logging.getLogger(__name__)
ADMIN_USER = "local-admin"
START_TIMEOUT = 30.0
# "pre-upgrade": exec into a container that is not running gets HTTP 400 before the WebSocket
# upgrade; "translated": a 101, then the failure as a Status on channel 3 (1.30+ apiserver).
EXEC_ERROR_MODES = ("pre-upgrade", "translated")
# How the written kubeconfig's user authenticates (docs/local-cluster.md, "Credentials").
AUTH_KINDS = ("token", "client-cert", "exec")
ADMIN_GROUPS = ["system:masters"]
DEFAULT_TOKEN_TTL = 900.0  # an EKS token's 15 minutes


class LocalCluster:
    """A local Kubernetes-API-compatible cluster for TrainJobs.

    Use as a context manager, or call start()/stop(). run_forever() blocks (for the CLI).
    ``exec_errors="translated"`` reports an exec into a container that is not running after the
    WebSocket upgrade, as a 1.30+ apiserver does (see docs/local-cluster.md).

    The one node holds ``cpus`` (a cpu quantity; default 64), ``memory`` (a memory quantity or
    bytes; default 256Gi) and ``gpus`` ``nvidia.com/gpu`` (default 8), whatever the machine;
    pods that do not fit stay Pending as kube-scheduler leaves them (``self.node``).
    ``self.images`` is the node's image manager: ``images.fail_pulls(glob)`` makes pulls fail,
    registry hosts under ``.invalid`` never resolve, and a failed pull backs off from
    ``image_pull_backoff`` seconds, doubling to ``image_pull_backoff_max``.
    ``trainer_version`` ("2.0" ... "2.3") picks the Kubeflow Trainer release it imitates: the
    TrainJob schema it serves and how the controller builds the JobSet (docs/local-cluster.md,
    "Trainer versions").
    ``auth`` picks how the kubeconfig's user authenticates: a bearer ``token``, a
    ``client-cert`` (signed by the cluster's CA, CN = user, O = groups), or an ``exec``
    credential plugin whose tokens expire after ``token_ttl`` seconds (then 401).
    ``node_labels`` are added to the node's own (``kubernetes.io/hostname``, ``/os``,
    ``/arch``) and ``node_taints`` (``[{"key", "value", "effect"}]``) put on it, for the
    scheduler's node selector, affinity and toleration checks.
    """

    def __init__(
        self,
        kubeconfig_path: str | Path | None = None,
        port: int = 0,
        pending_delay: float = 0.05,
        start_delay: float = 0.1,
        delete_grace: float = 0.05,
        ancestor_label_on_pods: bool = False,
        root_dir: str | Path | None = None,
        bookmark_interval: float = 1.0,
        load_builtin_runtimes: bool = True,
        kueue: bool | KueueConfig = False,
        kueue_version: str | None = None,
        exec_errors: str = "pre-upgrade",
        cpus: str | int | float | None = None,
        memory: str | int | None = None,
        gpus: int | str | None = None,
        image_pull_backoff: float = 0.5,
        image_pull_backoff_max: float = 8.0,
        trainer_version: str = DEFAULT_TRAINER_VERSION,
        auth: str = "token",
        token_ttl: float = DEFAULT_TOKEN_TTL,
        node_labels: dict[str, str] | None = None,
        node_taints: list[dict[str, str]] | None = None,
    ) -> None:
        if auth not in AUTH_KINDS:
            raise ValueError(f"auth must be one of {AUTH_KINDS}, not {auth!r}")
        if not token_ttl > 0:
            raise ValueError(f"token_ttl must be a positive number of seconds, not {token_ttl!r}")
        self.auth = auth
        self.token_ttl = float(token_ttl)
        if exec_errors not in EXEC_ERROR_MODES:
            raise ValueError(f"exec_errors must be one of {EXEC_ERROR_MODES}, not {exec_errors!r}")
        self.exec_errors = exec_errors
        self.trainer_version = check_trainer_version(trainer_version)
        self._own_root = root_dir is None
        self.root = Path(root_dir) if root_dir else Path(tempfile.mkdtemp(prefix="tjm-cluster-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._own_kubeconfig = kubeconfig_path is None
        self.kubeconfig_path = Path(kubeconfig_path or self.root / "kubeconfig")
        self.port = port
        self.namespace = "default"
        self.token = new_token()
        self.faults = Faults()
        self.store = Store()
        # The one node: what it can hold (the scheduler's view) and its images (the kubelet's).
        self.node = node_resources(
            cpus, memory, gpus, ephemeral_storage=shutil.disk_usage(self.root).total
        )
        self.images = ImageService(
            self.store, backoff=image_pull_backoff, max_backoff=image_pull_backoff_max
        )
        self.registry: Registry = default_registry()
        self._tls = make_tls(self.root / "tls")
        self.controller = Controller(
            self.store,
            self.root,
            self.faults,
            pending_delay=pending_delay,
            start_delay=start_delay,
            delete_grace=delete_grace,
            ancestor_label_on_pods=ancestor_label_on_pods,
            node=self.node,
            images=self.images,
            trainer_version=self.trainer_version,
            identity=PodIdentity(
                mint_token=self._mint_pod_token,
                revoke_token=self._revoke_pod_token,
                ca_pem=self._tls.ca_pem,
                address=lambda: f"127.0.0.1:{self.port}",
            ),
            node_labels=node_labels,
            node_taints=node_taints,
        )
        self._users: dict[str, User] = {self.token: User(ADMIN_USER)}
        self._exec_key_path = self._tls.cert_path.parent / "exec-signing.key"
        self._write_private(self._exec_key_path, new_token().encode())
        self._sa_users: dict[Path, str] = {}
        self._authn = Authenticator(self._users, self._exec_key_path.read_bytes())
        self.admission_hooks: list[AdmissionHook] = [
            core_objects.admit,
            trainer_webhook(self.trainer_version, self.store, self.controller.resolve_runtime),
        ]
        self.subresource_getters: dict[tuple[str, str, str], SubresourceGetter] = {}
        self._bookmark_interval = bookmark_interval
        self._load_builtins = load_builtin_runtimes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ctx: ServerContext | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.url = ""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.store.create(NAMESPACES, {"metadata": {"name": ns}, "status": {"phase": "Active"}})
        self.kueue: KueueSimulation | None = None
        self.version_warnings: list[str] = []
        if kueue or kueue_version is not None:
            config = kueue if isinstance(kueue, KueueConfig) else KueueConfig()
            if kueue_version is not None:
                config.version = kueue_version
                config.__post_init__()  # checks the version
            config.trainer_version = self.trainer_version  # Kueue's writes depend on it
            # an impossible Kueue/Trainer pair raises here; a lossy one warns
            self.version_warnings = check_version_pair(config.version, self.trainer_version)
            for line in self.version_warnings:
                log.warning("%s", line)
            self._enable_kueue(config)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        if self._thread is not None:
            return self
        if self._load_builtins:
            from .runtimes import load_builtin_runtimes

            for rt in load_builtin_runtimes():
                self._store_runtime(rt)
        self._thread = threading.Thread(target=self._thread_main, name="local-cluster", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT) or self._start_error is not None:
            raise RuntimeError(f"local cluster failed to start: {self._start_error}")
        self.write_kubeconfig(self.kubeconfig_path, auth=self.auth)
        return self

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        # The API server validates TrainJobs with this Trainer version's schema: every task of
        # this thread's loop starts from this context.
        trainjob_schema.SERVED_VERSION.set(self.trainer_version)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # report start failures to start()
            self._start_error = exc
            self._ready.set()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        ctx = ServerContext(
            store=self.store,
            registry=self.registry,
            resolve_runtime=self.controller.resolve_runtime,
            sandbox=self.controller.sandbox,
            faults=self.faults,
            authenticator=self._authn,
            stopping=asyncio.Event(),
            bookmark_interval=self._bookmark_interval,
            admission_hooks=self.admission_hooks,
            subresource_getters=self.subresource_getters,
            exec_errors=self.exec_errors,
            node_allocatable=self.node.quantities(),
        )
        self._ctx = ctx
        app = ApiServer(ctx).make_app()
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        listener = Listener(self._runner, self.port, self._tls.server_context())
        self.port = await listener.start()
        self.faults.set_apiserver_restarter(listener.restart)
        self.url = f"https://127.0.0.1:{self.port}"
        ctx.address = f"127.0.0.1:{self.port}"
        self.controller.start(asyncio.get_running_loop())
        if self.kueue is not None:
            self.kueue.start(asyncio.get_running_loop())
        self._ready.set()
        await self._stop_event.wait()
        self.faults.set_apiserver_restarter(None)
        ctx.stopping.set()
        self.store.close_all()
        if self.kueue is not None:
            await self.kueue.shutdown()
        await self.controller.shutdown()
        await self._runner.cleanup()

    def stop(self) -> None:
        """Stop the server, kill every pod process, remove temporary files."""
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(timeout=15)
        self._thread = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        elif self._own_kubeconfig:
            self.kubeconfig_path.unlink(missing_ok=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_forever(self, restart_downtime: float = 5.0) -> None:
        """Start (if needed) and block until Ctrl-C or SIGTERM, then stop. SIGUSR1 restarts the
        API server (``faults.restart_apiserver(restart_downtime)``)."""
        self.start()
        done = threading.Event()
        restarts = threading.Event()

        def on_signal(signum: int, frame: Any) -> None:
            done.set()

        def on_restart(signum: int, frame: Any) -> None:
            restarts.set()  # handled by the loop below, outside the signal handler

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_restart)
        try:
            while not done.wait(0.2):
                if restarts.is_set():
                    restarts.clear()
                    self.faults.restart_apiserver(restart_downtime)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.stop()

    # -- helpers for tests and the CLI -----------------------------------------------------

    def _store_runtime(self, rt: dict[str, Any]) -> dict[str, Any]:
        kind = CLUSTER_TRAINING_RUNTIMES
        if rt.get("kind") == "TrainingRuntime":
            kind = TRAINING_RUNTIMES
        ns = (rt.get("metadata") or {}).get("namespace") or self.namespace
        name = rt["metadata"]["name"]
        existing = self.store.try_get(kind, ns if kind.namespaced else None, name)
        if existing is not None:
            rt = {**rt, "metadata": {**rt["metadata"], "resourceVersion": None}}
            rt["metadata"].pop("resourceVersion")
            rt["metadata"]["namespace"] = existing["metadata"].get("namespace")
            if not kind.namespaced:
                rt["metadata"].pop("namespace")
            return self.store.replace(kind, rt, check_rv=False)
        return self.store.create(kind, rt, ns if kind.namespaced else None)

    def load_runtime_yaml(self, text_or_path: str | Path) -> list[dict[str, Any]]:
        """Load (create or replace) ClusterTrainingRuntimes/TrainingRuntimes from YAML."""
        from .runtimes import parse_runtime_yaml

        text = str(text_or_path)
        if isinstance(text_or_path, Path) or ("\n" not in text and Path(text).exists()):
            text = Path(text_or_path).read_text()
        return [self._store_runtime(rt) for rt in parse_runtime_yaml(text)]

    def pod_dir(self, namespace: str, pod_name: str) -> Path:
        return self.root / "namespaces" / namespace / "pods" / pod_name

    def add_user(
        self,
        name: str,
        token: str | None = None,
        deny: list[tuple[str, str]] | None = None,
        deny_namespaces: list[str] | None = None,
    ) -> str:
        """Add a user (returns its token); `deny` holds (verb, resource) pairs answered 403,
        `deny_namespaces` namespaces where every request is (a Role covering only others)."""
        token = token or new_token()
        self._users[token] = User(name, set(deny or []), set(deny_namespaces or []))
        return token

    def write_kubeconfig(
        self,
        path: str | Path,
        token: str | None = None,
        *,
        auth: str = "token",
        user: str = ADMIN_USER,
        groups: list[str] | None = None,
        token_ttl: float | None = None,
        report_expiry: bool = True,
        proxy_url: str | None = None,
    ) -> Path:
        """Write a kubeconfig for this cluster: a bearer ``token`` (default the admin's), or
        for ``user`` (in ``groups``) a ``client-cert`` or an ``exec`` plugin whose tokens last
        ``token_ttl`` seconds (without ``report_expiry`` the plugin does not say when they
        expire). ``proxy_url`` goes into the cluster entry (``proxy-url``)."""
        if auth not in AUTH_KINDS:
            raise ValueError(f"auth must be one of {AUTH_KINDS}, not {auth!r}")
        groups = ADMIN_GROUPS if groups is None else groups
        credentials = None
        if auth == "token":
            token = token or self.token
            user = self._users.get(token, User(ADMIN_USER)).name
        elif auth == "client-cert":
            credentials = cert_user(*self._tls.client_cert(user, groups))
        else:
            ttl = self.token_ttl if token_ttl is None else token_ttl
            args = ["-I", exec_credential.__file__, "--key-file", str(self._exec_key_path)]
            args += ["--user", user, "--ttl", str(ttl)]
            args += [a for g in groups for a in ("--group", g)]
            args += [] if report_expiry else ["--no-expiry"]
            credentials = exec_user(sys.executable, args)
        return write_kubeconfig(
            Path(path),
            self.url,
            self._tls.ca_pem,
            token,
            user,
            credentials=credentials,
            proxy_url=proxy_url,
        )

    # -- credentials: revocation, service-account token files --------------------------------

    @property
    def auth_stats(self) -> AuthStats:
        """What the API server's authenticator saw: exec tokens accepted, 401s, ..."""
        return self._authn.stats

    def exec_token_expiry(self, token: str) -> float | None:
        """When (unix time) a token of the exec plugin expires; None for any other token."""
        identity = exec_credential.verify(self._authn.exec_key, token.removeprefix("Bearer "))
        return None if identity is None else identity.expires

    def revoke(self, user: str) -> None:
        """Refuse every credential of ``user`` from now on (401), as when a cloud account
        loses access to the cluster."""
        self._authn.revoked.add(user)

    def write_service_account(
        self, directory: str | Path, name: str = "default", namespace: str = "default"
    ) -> dict[str, str]:
        """Write what a pod's service account mount holds (``token``, ``ca.crt``,
        ``namespace``) into ``directory``; return the environment the engine's in-cluster
        loader reads (``KUBERNETES_SERVICE_HOST``/``PORT`` and the mount's location)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.crt").write_bytes(self._tls.ca_pem)
        (directory / "namespace").write_text(namespace)
        self._sa_users[directory] = f"system:serviceaccount:{namespace}:{name}"
        self.rotate_service_account_token(directory)
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "TRAINJOB_MAGICS_SERVICE_ACCOUNT_DIR": str(directory),
        }

    def rotate_service_account_token(self, directory: str | Path) -> None:
        """Replace the token in ``directory`` (atomically, as the kubelet's projected volume
        does) and refuse the old one."""
        directory = Path(directory)
        path = directory / "token"
        old = path.read_text().strip() if path.is_file() else ""
        token = self.add_user(self._sa_users[directory])
        tmp = directory / ".token.tmp"
        self._write_private(tmp, token.encode())
        os.replace(tmp, path)
        if old:
            self._users.pop(old, None)

    def _mint_pod_token(self, namespace: str, service_account: str) -> str:
        """A token for a pod's projected service-account volume (refused once the pod goes)."""
        return self.add_user(f"system:serviceaccount:{namespace}:{service_account}")

    def _revoke_pod_token(self, token: str) -> None:
        self._users.pop(token, None)

    @staticmethod
    def _write_private(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def compact(self) -> int:
        """Drop the watch history: watches from an older resourceVersion get 410 Expired."""
        return self.store.compact()

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        """Run `hook(kind, op, obj, old)` on API creates/updates (may mutate, or raise ApiError)."""
        self.admission_hooks.append(hook)

    def add_subresource_getter(
        self, group: str, plural: str, sub: str, fn: SubresourceGetter
    ) -> None:
        """Serve GET .../PLURAL/NAME/SUB with fn(version, plural, namespace, name, query)."""
        self.subresource_getters[(group, plural, sub)] = fn

    def _enable_kueue(self, config: KueueConfig) -> None:
        """Kueue simulation: its kinds, the TrainJob webhook, the visibility endpoints."""
        from .kueue.kinds import PENDING_WORKLOADS, VISIBILITY_GROUP

        self.kueue = KueueSimulation(
            self.store, self.registry, config, self.controller.resolve_runtime
        )
        self.add_admission_hook(self.kueue.webhook)
        for plural in ("localqueues", "clusterqueues"):
            self.add_subresource_getter(
                VISIBILITY_GROUP, plural, PENDING_WORKLOADS, self.kueue.pending_workloads
            )

    @property
    def ca_pem(self) -> bytes:
        return self._tls.ca_pem


__all__ = ["LocalCluster"]
