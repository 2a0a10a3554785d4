"""A user on the real stack's JupyterHub, in Chromium (issue 34's acceptance): log in with the
hub's shared password, the server spawns as a pod on the real node, a notebook there connects
an MPI TrainJob of three pods through Kueue, runs ``mpirun hostname`` across them, shows the
session in the sidebar, forwards a pod's page through ``/user/NAME/proxy/PORT/``, uploads and
downloads a file, sees a second session's queue position; then "Stop My Server" leaves no
TrainJob within a minute. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from devtools.realstack import controllers
from devtools.realstack.jupyterhub import Hub, users
from tests.helpers.hub import STOP_BOUND, HubUser, trainjobs, until
from tests.helpers.live_panels import serve_cell

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
PORT = 8000  # the pod's page


@pytest.fixture
def page() -> Iterator[Any]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium; scripts/test.sh does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            pg = context.new_page()
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()


def _cpu_quota_m(hub: Hub) -> int:
    """The ClusterQueue's cpu quota in millicores (the node's cpus, fixtures.kueue_objects)."""
    cpus = str(hub.ctx.nodes.cpus)
    value = int(cpus[:-1]) if cpus.endswith("m") else int(float(cpus) * 1000)
    return value * hub.ctx.nodes.count


def _notebook(text: str, cpu_a: int, cpu_b: int) -> dict[str, Any]:
    sources = [
        "%load_ext trainjob_magics",
        f"%trainjob_connect mlx-distributed --nodes 3 --cpu {cpu_a}m --queue {users.LOCAL_QUEUE}",
        "%%trainjob\nmpirun hostname",
        serve_cell(PORT, text),
        f"%trainjob_forward {PORT} --show",
        f"open('local.txt', 'w').write({text!r})",
        "%trainjob_upload local.txt up/local.txt",
        "%trainjob_download up/local.txt back.txt",
        f"assert open('back.txt').read() == {text!r}\nprint('round trip ok')",
        f"%trainjob_connect torch-distributed --as waiting --cpu {cpu_b}m "
        f"--queue {users.LOCAL_QUEUE} --timeout 40",
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in sources],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    return json.loads(nbformat.writes(nb))


def _run_cell(pg: Any, index: int, timeout: float = 300, *, fails: bool = False) -> Any:
    """Shift+Enter in cell ``index``'s editor; wait for its execution count."""
    cell = pg.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(3):  # a key pressed before the editor took focus is lost: press again
        cell.locator(".jp-InputArea-editor").click()
        pg.keyboard.press("Shift+Enter")
        try:
            prompt.filter(has_text=re.compile(r"\[(\*|\d+)\]")).wait_for(timeout=20_000)
            break
        except Exception:
            continue
    prompt.filter(has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout * 1000)
    errors = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    if not fails:
        assert errors.count() == 0, f"cell {index}: {errors.all_inner_texts()}"
    return cell


def _login(pg: Any, hub: Hub, name: str) -> None:
    pg.goto(hub.url)
    pg.locator("#username_input").fill(name)
    pg.locator("#password_input").fill(hub.password)
    pg.locator("#login_submit").click()


def test_a_user_runs_mpirun_from_the_hub_and_stopping_the_server_leaves_no_trainjob(
    hub: Hub,
    page: Any,
) -> None:
    user = HubUser(hub, prefix="alice")
    ns = hub.namespace(user.name)
    SHOTS.mkdir(parents=True, exist_ok=True)
    text = f"served by the pod {secrets.token_hex(4)}"
    quota = _cpu_quota_m(hub)
    try:
        started = time.monotonic()
        _login(page, hub, user.name)
        page.wait_for_url(re.compile(rf"/user/{user.name}/lab"), timeout=300_000)
        spawned = time.monotonic() - started
        user.put_notebook("flow.ipynb", _notebook(text, quota * 3 // 10, quota // 2))
        page.goto(f"{user.base}lab/tree/flow.ipynb")
        page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for()
        until(
            "the notebook's kernel idle",
            lambda: any(
                x["path"] == "flow.ipynb" and x["kernel"]["execution_state"] == "idle"
                for x in user.api("api/sessions")
            ),
            120,
        )
        for index in range(2):
            _run_cell(page, index)
        jobs = trainjobs(hub.ctx, ns)
        assert len(jobs) == 1, jobs
        name = next(iter(jobs))
        # the connect panel's live line, drawn by the lab extension from the server extension
        live = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(1)
        live.locator('.tjm-live-state[data-state="Running"]').wait_for(timeout=30_000)

        # mpirun across the pods: one line per rank, each a pod of this TrainJob (the ranks'
        # panel: each rank's row ends with its last line, here its hostname)
        cell = _run_cell(page, 2)
        cell.locator(".tjm-pod-summary .tjm-pod-last").first.wait_for(state="attached")
        hosts = {t.strip() for t in cell.locator(".tjm-pod-last").all_inner_texts()}
        shown = cell.locator(".jp-Cell-outputArea").inner_text()
        hosts |= {ln.strip() for ln in shown.splitlines()}
        pods = json.loads(
            controllers.kubectl(
                hub.ctx,
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                f"jobset.sigs.k8s.io/jobset-name={name}",
                "-o",
                "json",
            ).stdout
        )["items"]
        pod_hosts = {p["spec"].get("hostname") or p["metadata"]["name"] for p in pods}
        ran_on = {h for h in hosts if h.startswith(name)}
        assert len(pods) == 3 and len(ran_on) == 3, (hosts, pod_hosts)
        cell.screenshot(path=str(SHOTS / "hub-mpirun.png"))

        # the sidebar names the session
        page.locator(".tjm-statusbar-item").click()
        sidebar = page.locator("#trainjob-magics-sessions")
        sidebar.locator(f'.tjm-sidebar-session[data-name="{name}"]').wait_for(timeout=60_000)
        sidebar.screenshot(path=str(SHOTS / "hub-sidebar.png"))

        # a pod's page through the hub: /user/NAME/proxy/PORT/
        _run_cell(page, 3)
        cell = _run_cell(page, 4)
        frame = cell.locator("iframe.tjm-forward-frame")
        frame.wait_for()
        src = frame.get_attribute("src") or ""
        assert f"/user/{user.name}/proxy/" in src, src
        page.frame_locator("iframe.tjm-forward-frame").locator("h1", has_text=text).wait_for(
            timeout=60_000
        )
        cell.screenshot(path=str(SHOTS / "hub-forward.png"))

        # upload and download
        for index in (5, 6, 7):
            _run_cell(page, index)
        assert "round trip ok" in _run_cell(page, 8).inner_text()

        # a second session waits behind the first: Kueue's position, said in one line
        cell = _run_cell(page, 9, fails=True)
        said = cell.locator(".jp-Cell-outputArea").inner_text()
        assert "position 1" in said and users.LOCAL_QUEUE in said, said
        assert "Traceback" not in said, said
        cell.screenshot(path=str(SHOTS / "hub-queued.png"))

        # Stop My Server: no TrainJob within a minute
        page.goto(f"{hub.url}hub/home", wait_until="networkidle")
        stop = page.locator("#stop")
        for _ in range(3):  # a click before the page's script took the button does nothing
            stop.click()
            stopped_at = time.monotonic()
            try:
                stop.wait_for(state="hidden", timeout=20_000)
                break
            except Exception:
                continue
        until(
            "no TrainJob left in the user's namespace",
            lambda: not trainjobs(hub.ctx, ns),
            STOP_BOUND,
            interval=1,
        )
        took = time.monotonic() - stopped_at
        until("the server stopped", user.stopped, 120)
        until(
            "nothing left: no pod in the user's namespace",
            lambda: (
                not json.loads(
                    controllers.kubectl(hub.ctx, "get", "pods", "-n", ns, "-o", "json").stdout
                )["items"]
            ),
            120,
        )
        print(f"\nhub: spawned in {spawned:.0f} s; no TrainJob {took:.1f} s after Stop My Server")
    except Exception:
        page.screenshot(path=str(SHOTS / "hub-failure.png"))
        raise
    finally:
        user.stop()
        controllers.kubectl(
            hub.ctx, "delete", "trainjobs", "--all", "-n", ns, "--wait=false", check=False
        )
