"""Stopping a Jupyter server stops the server extension's inventory: a ServerApp with only our
extension, run in this process against the local cluster (its watches blocked in reads of
the API server), stopped as Ctrl-C or /api/shutdown stop it; no watch thread is left."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.polling import wait_until
from trainjob_magics.jupyter.app import INVENTORY_KEY
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def _watch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("tjm-watch-")}


@pytest.fixture
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR"):
        path = tmp_path / var.lower()
        path.mkdir()
        monkeypatch.setenv(var, str(path))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    return tmp_path


class InProcessServer:
    """A ServerApp serving in a thread of this process (its own event loop)."""

    def __init__(self, argv: list[str]) -> None:
        self.app: Any = None
        self.failed: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(argv,), daemon=True)
        self._thread.start()

    def _serve(self, argv: list[str]) -> None:
        from jupyter_server.serverapp import ServerApp

        asyncio.set_event_loop(asyncio.new_event_loop())
        try:
            app = ServerApp(jpserver_extensions={"trainjob_magics.jupyter": True})
            app.init_signal = lambda: None  # signal handlers belong to the main thread
            app.initialize(argv=argv, find_extensions=False)
            self.app = app
            app.io_loop.add_callback(self._ready.set)
            app.start()
        except BaseException as exc:  # raised again by wait_ready
            self.failed = exc
            self._ready.set()

    def wait_ready(self, timeout: float) -> Any:
        assert self._ready.wait(timeout), "the server did not start"
        if self.failed is not None:
            raise self.failed
        return self.app

    def stop(self, timeout: float) -> bool:
        """Stop as Ctrl-C does (cleanup, extensions' stop hooks, loop stop); True once ended."""
        self.app.io_loop.add_callback(self.app.stop)  # on the server's own thread
        self._thread.join(timeout)
        return not self._thread.is_alive()


@pytest.fixture
def cluster_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    # bookmarks as rare as a real API server's (about one a minute): an idle watch blocks
    with LocalCluster(root_dir=tmp_path / "cluster", bookmark_interval=600) as cluster:
        yield cluster.write_kubeconfig(tmp_path / "kubeconfig")


def test_stopping_the_server_ends_every_watch_thread(
    jupyter_dirs: Path, cluster_kubeconfig: Path
) -> None:
    before = _watch_threads()
    server = InProcessServer(
        [
            "--ServerApp.port=0",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.open_browser=False",
            "--ServerApp.allow_root=True",
            "--ServerApp.token=t",
            f"--ServerApp.root_dir={jupyter_dirs}",
            f"--TrainJobSessions.kubeconfig={cluster_kubeconfig}",
            "--TrainJobSessions.namespaces=other",
        ]
    )
    app = server.wait_ready(90)
    inventory = app.web_app.settings[INVENTORY_KEY]
    assert inventory.namespaces() == ["default", "other"]
    # both namespaces read: each watch thread now waits in a watch request
    wait_until(
        lambda: all(inventory.job(ns, "none")["state"] == "Gone" for ns in ("default", "other")), 30
    )
    ours = _watch_threads() - before
    assert len(ours) == 4 and all(t.is_alive() for t in ours)

    assert server.stop(60), "the server's loop did not stop"
    assert [t.name for t in ours if t.is_alive()] == []
    # a page asking for another namespace afterwards starts no new watch
    assert inventory.add_namespace("late") is False
    assert _watch_threads() - before == set()
