"""JupyterLab + Chromium (Playwright) harness for the browser tests.

The same server also serves Notebook 7 (``/notebooks/...``, the ``notebook`` package), so a
test can open one notebook in either front end (``open_notebook(lab, path, "notebook7")``).

JupyterLab runs as a subprocess with a private settings, workspaces and runtime dir (news
fetching off, no virtual scrolling of cells), a random token and a free port. Chromium is the
system one (``shutil.which("chromium")``), driven by Python Playwright; ``playwright install``
is never used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = REPO / "artifacts" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
    # Render every cell: with virtual scrolling, cells out of view have no DOM to assert on.
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    """All descendant process ids of ``pid`` (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class JupyterLab:
    """A running JupyterLab server."""

    url: str
    token: str
    root_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    _pids: set[int] = field(default_factory=set)

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """Call the Jupyter server REST API and return the decoded JSON (or None)."""
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def api_until(self, path: str, ok: Callable[[Any], bool], timeout: float = 30.0) -> Any:
        """GET ``path`` until ``ok(answer)``; the answer (fails after ``timeout`` with the last)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = self.api(path)
            if ok(last):
                return last
            time.sleep(0.1)
        raise AssertionError(f"{path} never satisfied the test: {json.dumps(last)[:2000]}")

    def lab_url(self, notebook: str) -> str:
        """URL opening ``notebook`` in a fresh (reset) workspace."""
        return f"{self.url}/lab/tree/{notebook}?reset&token={self.token}"

    def notebook7_url(self, notebook: str) -> str:
        """URL opening ``notebook`` in Notebook 7 (served by the same server)."""
        return f"{self.url}/notebooks/{notebook}?token={self.token}"

    def set_theme(self, theme: str) -> None:
        """Choose the theme ("JupyterLab Light", "JupyterLab Dark") for pages opened next."""
        raw = json.dumps({"theme": theme})
        self.api("/lab/api/settings/@jupyterlab/apputils-extension:themes", "PUT", {"raw": raw})

    def wait_kernel_ready(self, notebook: str, timeout: float = 120) -> dict[str, Any]:
        """Poll /api/sessions until the notebook's kernel has a connection and is idle.

        A Run sent before the kernel's websocket is connected is dropped silently.
        """
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = self.api("/api/sessions")
            for session in last:
                kernel = session.get("kernel") or {}
                if (
                    session.get("path", "").endswith(notebook)
                    and kernel.get("connections", 0) >= 1
                    and kernel.get("execution_state") == "idle"
                ):
                    self._pids.update(_children(self.proc.pid))
                    return kernel
            time.sleep(0.5)
        raise AssertionError(f"kernel for {notebook} not ready after {timeout}s: {last}")

    def kernel_state(self, notebook: str) -> str | None:
        """The execution_state of the notebook's kernel, or None without a session."""
        for session in self.api("/api/sessions"):
            if session.get("path", "").endswith(notebook):
                return (session.get("kernel") or {}).get("execution_state")
        return None

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Shut the server and its kernels down; kill whatever is left."""
        self._pids.update(_children(self.proc.pid))
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self.api("/api/shutdown", method="POST")
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
        for pid in self._pids:  # kernels run in their own process group
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"ipykernel" in cmdline:  # still our kernel, not a reused pid
                    os.kill(pid, signal.SIGKILL)


def start_jupyterlab(root_dir: Path, state_dir: Path, env: dict[str, str]) -> JupyterLab:
    """Start JupyterLab serving ``root_dir`` with private settings under ``state_dir``."""
    settings = state_dir / "settings"
    for name, value in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    (state_dir / "workspaces").mkdir(parents=True, exist_ok=True)
    (state_dir / "runtime").mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    port = _free_port()
    full_env = {
        **os.environ,
        **env,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(state_dir / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(state_dir / "runtime"),
        "PYTHONUNBUFFERED": "1",
    }
    log_path = state_dir / "jupyterlab.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        f"--ServerApp.token={token}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=root_dir,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lab = JupyterLab(
        url=f"http://127.0.0.1:{port}",
        token=token,
        root_dir=root_dir,
        proc=proc,
        log_path=log_path,
    )
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{lab.log()}")
        try:
            lab.api("/api/status")
            return lab
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                lab.stop()
                raise RuntimeError(f"JupyterLab did not start in 90s:\n{lab.log()}") from None
            time.sleep(0.5)


@pytest.fixture
def jupyterlab_factory(
    tmp_path: Path,
) -> Iterator[Callable[[Path, dict[str, str]], JupyterLab]]:
    """Start JupyterLab servers on demand; every one is stopped at teardown."""
    if importlib.util.find_spec("jupyterlab") is None:  # the server runs as sys.executable -m
        pytest.skip("JupyterLab (jupyter lab) is not installed; run scripts/setup.sh")
    started: list[JupyterLab] = []

    def start(root_dir: Path, env: dict[str, str]) -> JupyterLab:
        lab = start_jupyterlab(root_dir, tmp_path / f"lab{len(started)}", env)
        started.append(lab)
        return lab

    yield start
    for lab in started:
        lab.stop()


@pytest.fixture
def browser_page() -> Iterator[Any]:
    """A Playwright page in the system Chromium (headless, 1400x1000)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium; scripts/test.sh does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Python Playwright is not installed (pip install playwright)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, timeout=60_000
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(60_000)
            yield page
            context.close()
        finally:
            browser.close()


@pytest.fixture
def screenshot_path() -> Callable[[str, str], Path]:
    """``screenshot_path(test, label)``: where a screenshot goes (artifacts/screenshots/)."""
    return _screenshot_path


def _screenshot_path(test_name: str, label: str) -> Path:
    """Where a test's screenshot goes (artifacts/screenshots/, gitignored)."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{test_name}-{label}")
    return SCREENSHOT_DIR / f"{safe}.png"


_RUN_FINISHED = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .map(p => p.textContent || '');
  return prompts.some(t => /\\[\\d+\\]/.test(t)) && !prompts.some(t => t.includes('*'));
}"""


@dataclass
class NotebookPage:
    """A notebook opened in JupyterLab in a Playwright page."""

    lab: JupyterLab
    page: Any
    notebook: str
    frontend: str = "lab"  # or "notebook7"

    def open(self) -> NotebookPage:
        """Open the notebook and wait until its kernel is connected and idle."""
        if self.frontend == "notebook7":
            self.page.goto(self.lab.notebook7_url(self.notebook))
        else:
            self.page.goto(self.lab.lab_url(self.notebook))
        self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for()
        self.lab.wait_kernel_ready(self.notebook)
        return self

    def cells(self) -> Any:
        """Locator of every cell (markdown included), in notebook order."""
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")

    def run_all(self) -> None:
        """Run > Run All Cells, through the menu bar."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()

    def wait_all_ran(self, timeout: float = 240) -> None:
        """Wait until the run is over (no ``[*]`` prompt, kernel idle); fail unless every code
        cell ran, naming the first cell that did not and the error shown above it."""
        self.page.wait_for_function(_RUN_FINISHED, timeout=timeout * 1000, polling=500)
        deadline = time.monotonic() + 30
        while self.lab.kernel_state(self.notebook) != "idle":
            assert time.monotonic() < deadline, "kernel still busy after the run finished"
            time.sleep(0.5)
        self.page.wait_for_timeout(1000)  # let the last widget updates render
        prompts = self.page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_inner_texts()
        missing = [i for i, text in enumerate(prompts) if not re.search(r"\[\d+\]", text)]
        if missing:
            errors = self.page.locator(
                '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
            ).all_inner_texts()
            raise AssertionError(
                f"code cell #{missing[0]} did not run (prompts {prompts}); errors shown: {errors}"
            )

    def output_text(self, index: int) -> str:
        """The rendered text of cell ``index``'s output area ('' when it has none)."""
        area = self.cells().nth(index).locator(".jp-Cell-outputArea")
        return area.inner_text() if area.count() else ""

    def save(self) -> None:
        """Save the notebook as the front end holds it (Ctrl+S) and wait until it is saved."""
        before = self.lab.api(f"/api/contents/{self.notebook}?content=0")["last_modified"]
        self.cells().first.click()
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while self.lab.api(f"/api/contents/{self.notebook}?content=0")["last_modified"] == before:
            assert time.monotonic() < deadline, "the notebook was not saved"
            time.sleep(0.3)

    def screenshot_cell(self, index: int, path: Path) -> Path:
        """Screenshot cell ``index`` (scrolled into view) to ``path``."""
        cell = self.cells().nth(index)
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(path))
        return path


@pytest.fixture
def open_notebook(browser_page: Any) -> Callable[[JupyterLab, str], NotebookPage]:
    """Open a notebook of a running JupyterLab in the test's Chromium page."""

    def opener(lab: JupyterLab, notebook: str, frontend: str = "lab") -> NotebookPage:
        return NotebookPage(lab, browser_page, notebook, frontend).open()

    return opener
