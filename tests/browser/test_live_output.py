"""The output of ``%%trainjob`` as a user sees it, in JupyterLab and Notebook 7 (Chromium).

Checked from the DOM: the lines inside the scroll box's rectangle (the visible text) and the
box's scroll position. A live output follows its tail; scrolled up, it stays; back at the
bottom, it follows again. A finished output is static HTML that shows the same tail, so it
survives a saved notebook reopened on a restarted server, and its colours reach 4.5:1 in
JupyterLab Light and Dark.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

SEQ_5000 = "%%trainjob\nseq 1 5000"
STREAMED_5000 = (
    "%%trainjob\nfor i in $(seq 1 50); do seq $((i * 100 - 99)) $((i * 100)); sleep 0.1; done"
)
SLOW_200 = "%%trainjob\nfor i in $(seq 1 200); do echo line $i; sleep 0.02; done"
SCROLLED = "%%trainjob\nfor i in $(seq 1 600); do echo tick $i; sleep 0.05; done"
PER_POD = '%%trainjob --pod all\nfor i in $(seq 1 150); do echo "pod line $i"; sleep 0.03; done'
MIXED = (
    "%%trainjob --no-raise-error\n"
    "echo on stdout\n"
    'echo "a warning on stderr" >&2\n'
    "echo after the warning\n"
    "exit 3"
)
SUCCESS = "%%trainjob\necho all good"

# What a box shows: the lines whose rectangle is inside the box's, and the scroll position
# (``column-reverse``: 0 at the bottom, negative when scrolled up).
BOX_STATE = """(cell) => {
  // the first box shown (with --pod, the selected pod's)
  const box = [...cell.querySelectorAll('.tjm-scroll')].find(b => b.offsetParent !== null);
  if (!box) return null;
  const r = box.getBoundingClientRect();
  const spans = [...box.querySelectorAll('pre > span')];
  const inside = s => {
    const q = s.getBoundingClientRect();
    return q.height > 0 && q.top >= r.top - 1 && q.bottom <= r.bottom + 1;
  };
  const footer = cell.querySelector('.tjm-footer');
  return {
    visible: spans.filter(inside).map(s => s.textContent),
    last: spans.length ? spans[spans.length - 1].textContent : null,
    count: spans.length,
    scrollTop: box.scrollTop,
    scrollHeight: box.scrollHeight,
    clientHeight: box.clientHeight,
    frozen: !!cell.querySelector('.tjm-static'),
    footer: footer ? footer.textContent : null,
  };
}"""


def _notebook(path: Path, bodies: list[str], status: bool = False) -> None:
    """load, connect, the ``bodies``, (``status``: ``%trainjob_status``), close."""
    cells = [
        nbformat.v4.new_code_cell("%load_ext trainjob_magics"),
        nbformat.v4.new_code_cell("%trainjob_connect mpi-interactive --nodes 2"),
        *(nbformat.v4.new_code_cell(body) for body in bodies),
        *([nbformat.v4.new_code_cell("%trainjob_status")] if status else []),
        nbformat.v4.new_code_cell("%trainjob_close"),
    ]
    nb = nbformat.v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def _state(nbp: Any, index: int) -> dict[str, Any] | None:
    return nbp.cells().nth(index).evaluate(BOX_STATE)


def _at_bottom(state: dict[str, Any]) -> bool:
    return abs(state["scrollTop"]) <= 1


def _follows(state: dict[str, Any]) -> bool:
    """The last line received is the last one visible, and the box is scrolled to the bottom."""
    return bool(state["visible"]) and state["visible"][-1] == state["last"] and _at_bottom(state)


def _wait_state(nbp: Any, index: int, condition: Any, what: str, timeout: float = 120) -> Any:
    """Poll cell ``index``'s box until ``condition(state)``; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = _state(nbp, index)
        if state is not None and condition(state):
            return state
        nbp.page.wait_for_timeout(100)
    raise AssertionError(f"cell {index}: {what} not reached in {timeout}s; last state {state}")


def _watch_streaming(
    nbp: Any, index: int, shot: Path, timeout: float = 180
) -> list[dict[str, Any]]:
    """Sample a live box until it is frozen or has its footer; every live sample must follow
    the tail."""
    cell = nbp.cells().nth(index)
    _wait_state(nbp, index, lambda s: s["count"] > 0, "first output")
    cell.scroll_into_view_if_needed()
    live: list[dict[str, Any]] = []
    shot.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"cell {index} still live after {timeout}s: {live[-1:]}"
        state = _state(nbp, index)
        assert state is not None
        if state["frozen"] or state["footer"]:
            assert shot.exists(), f"cell {index}: never more lines than fit while live: {live}"
            return live
        live.append(state)
        assert _follows(state), f"cell {index} does not follow its tail while streaming: {state}"
        if not shot.exists() and state["scrollHeight"] > state["clientHeight"] + 200:
            cell.screenshot(path=str(shot))  # live, with more lines than fit
        nbp.page.wait_for_timeout(150)


def _scroll_to_bottom(nbp: Any, index: int, box: Any) -> dict[str, Any]:
    """Turn the mouse wheel down over ``box`` until it is at the bottom, while still live."""
    box.hover()
    for _ in range(50):
        nbp.page.mouse.wheel(0, 1000)
        nbp.page.wait_for_timeout(100)
        state = _state(nbp, index)
        assert state is not None and not state["frozen"], f"cell {index} ended first: {state}"
        if _at_bottom(state):
            return state
    raise AssertionError(f"cell {index}: the wheel did not reach the bottom: {state}")


def _line_number(text: str) -> int:
    match = re.search(r"(\d+)\s*$", text)
    assert match, text
    return int(match.group(1))


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_live_output_follows_the_tail(
    frontend: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """5,000 lines and a slow 200-line loop show their last line while streaming and at the
    end; scrolled up, the view stays; back at the bottom, it follows again."""
    root = tmp_path / "root"
    root.mkdir()
    bodies = [SEQ_5000, STREAMED_5000, SLOW_200, SCROLLED, PER_POD]
    _notebook(root / "live.ipynb", bodies)
    seq, streamed, slow, scrolled, per_pod = range(2, 2 + len(bodies))
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "live.ipynb", frontend)
    nbp.run_all()
    shots = []

    for index, name in ((streamed, "streamed5000"), (slow, "slow200")):
        shot = screenshot_path(f"live-{frontend}", f"{name}-streaming")
        live = _watch_streaming(nbp, index, shot)
        # several renders seen while it ran, with the tail moving on
        assert len(live) >= 3, f"cell {index}: only {len(live)} live samples"
        assert len({s["last"] for s in live}) >= 3, [s["last"] for s in live]
        shots.append(shot)

    # scroll up while it streams: the view stays; back at the bottom: it follows again
    cell = nbp.cells().nth(scrolled)
    _wait_state(nbp, scrolled, lambda s: s["count"] >= 60, "60 lines")
    cell.scroll_into_view_if_needed()
    box = cell.locator(".tjm-scroll")
    box.hover()
    nbp.page.mouse.wheel(0, -200)
    up = _wait_state(nbp, scrolled, lambda s: s["scrollTop"] < -50, "scrolled up")
    first_seen = up["visible"][0]
    later = _wait_state(
        nbp,
        scrolled,
        lambda s: _line_number(s["last"]) >= _line_number(up["last"]) + 20 and not s["frozen"],
        "20 more lines while scrolled up",
    )
    assert later["visible"][0] == first_seen, (up, later)
    assert later["visible"][-1] != later["last"], later
    shot = screenshot_path(f"live-{frontend}", "scrolled-up")
    cell.screenshot(path=str(shot))
    shots.append(shot)
    back = _scroll_to_bottom(nbp, scrolled, box)
    _wait_state(
        nbp,
        scrolled,
        lambda s: (
            _line_number(s["last"]) >= _line_number(back["last"]) + 10
            and _follows(s)
            and not s["frozen"]
        ),
        "following again after 10 more lines",
    )

    # --pod all: the shown pod's box follows its tail too
    shot = screenshot_path(f"live-{frontend}", "per-pod-streaming")
    live = _watch_streaming(nbp, per_pod, shot)
    assert len(live) >= 3 and len({s["last"] for s in live}) >= 3, live
    shots.append(shot)

    nbp.wait_all_ran(timeout=240)
    expected = {seq: "5000", streamed: "5000", slow: "line 200", scrolled: "tick 600"}
    for index, last in expected.items():
        state = _wait_state(nbp, index, lambda s: s["frozen"] and s["footer"], "the final view")
        assert state["visible"][-1] == last and _follows(state), state
        assert re.match(r"exit code 0 · ", state["footer"]), state
        # the box shows the tail and scrolls: more lines than fit
        assert state["scrollHeight"] > state["clientHeight"], state
    for index in (seq, streamed):
        text = nbp.output_text(index)
        assert "[… 4,000 lines hidden; the full output is in _trainjob.stdout" in text, text
    for index, name in ((seq, "seq5000"), (streamed, "streamed5000"), (slow, "slow200")):
        shots.append(nbp.screenshot_cell(index, screenshot_path(f"live-{frontend}", f"{name}-end")))
    assert "Error displaying widget" not in nbp.page.locator(".jp-NotebookPanel").inner_text()
    with capsys.disabled():
        print("\nscreenshots:\n  " + "\n  ".join(str(s) for s in shots))


LONG_20000 = (
    "%%trainjob\nfor i in $(seq 1 200); do seq $((i * 100 - 99)) $((i * 100)); sleep 0.05; done"
)


def test_scrolled_up_the_view_holds_past_the_kept_lines(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """A 20,000-line cell keeps its last 1,000 lines live. Scrolled up, the reader's lines stay
    where they are while thousands more arrive (more than the kept window); back at the bottom,
    the view follows the tail again."""
    root = tmp_path / "root"
    root.mkdir()
    _notebook(root / "hold.ipynb", [LONG_20000])
    long = 2
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "hold.ipynb")
    nbp.run_all()
    cell = nbp.cells().nth(long)
    _wait_state(
        nbp, long, lambda s: s["count"] >= 1000 and _line_number(s["last"]) > 1500, "1,500 lines"
    )
    cell.scroll_into_view_if_needed()
    box = cell.locator(".tjm-scroll").first
    box.hover()
    nbp.page.mouse.wheel(0, -300)
    up = _wait_state(nbp, long, lambda s: s["scrollTop"] < -100, "scrolled up")
    first_seen = up["visible"][0]
    started = time.monotonic()
    samples = []
    while True:
        state = _state(nbp, long)
        assert state is not None
        if state["frozen"]:
            break
        samples.append((round(time.monotonic() - started, 1), state["visible"][0], state["last"]))
        assert state["visible"][0] == first_seen, (first_seen, state, samples[-5:])
        if _line_number(state["last"]) >= _line_number(up["last"]) + 3000:
            break
        nbp.page.wait_for_timeout(200)
    assert _line_number(state["last"]) >= _line_number(up["last"]) + 3000, (up, state)
    assert cell.locator(".tjm-held-note").is_visible()
    shot = screenshot_path("hold", "scrolled-up-20000")
    cell.screenshot(path=str(shot))
    back = _scroll_to_bottom(nbp, long, box)
    _wait_state(
        nbp,
        long,
        lambda s: _line_number(s["last"]) >= _line_number(back["last"]) + 200 and _follows(s),
        "following again after 200 more lines",
    )
    assert cell.locator(".tjm-held-note").count() == 0
    nbp.wait_all_ran(timeout=240)
    state = _wait_state(nbp, long, lambda s: s["frozen"] and s["footer"], "the final view")
    assert state["visible"][-1] == "20000", state
    with capsys.disabled():
        print(
            f"\nheld at {first_seen!r} from line {up['last']} to {samples[-1][2]!r}:",
            samples[::10],
        )
        print(f"screenshot: {shot}")


# Every element of ours with text of its own (or those matching the selector passed): its
# colour over the backgrounds below it, and the contrast ratio.
CONTRAST = """(selector) => {
  const parse = c => {
    const s = c.match(/color\\(srgb ([^)]+)\\)/);  // what color-mix() computes to
    if (s) {
      const q = s[1].split(/[ /]+/).filter(Boolean).map(Number);
      return [q[0] * 255, q[1] * 255, q[2] * 255, q.length > 3 ? q[3] : 1];
    }
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) throw new Error('unparsed colour ' + c);
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => {
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const background = el => {
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.unshift(getComputedStyle(e).backgroundColor);
    return chain.reduce((under, c) => over(parse(c), under), [255, 255, 255, 1]);
  };
  const lum = c => {
    const f = v => (v /= 255) <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const sel = selector ||
    '.jp-Cell-outputArea [class*="tjm-"], .jp-Cell-outputArea [class*="trainjob-"]';
  const found = [];
  for (const el of document.querySelectorAll(sel)) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const bg = background(el);
    const fg = over(parse(getComputedStyle(el).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    found.push({cls: el.className, text: el.textContent.trim().slice(0, 40),
                color: getComputedStyle(el).color,
                ratio: (hi + 0.05) / (lo + 0.05), fg: fg.map(Math.round), bg: bg.map(Math.round)});
  }
  return {found, light: document.body.dataset.jpThemeLight};
}"""


def _contrast(nbp: Any) -> dict[str, Any]:
    return nbp.page.evaluate(CONTRAST)


def test_results_survive_a_restart_and_read_in_light_and_dark(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """Saved without widget state, the server restarted, the notebook reopened in JupyterLab
    and Notebook 7 shows every result: every cell's output (the connect and status panels
    included, saying how the session ended), no widget left to load; every text reaches 4.5:1
    in Light and Dark, computed from the rendered colours."""
    root = tmp_path / "root"
    root.mkdir()
    bodies = [SEQ_5000, MIXED, SUCCESS]
    _notebook(root / "saved.ipynb", bodies, status=True)
    seq, mixed, success = range(2, 2 + len(bodies))
    connect, status, close = 1, success + 1, success + 2
    env = {"KUBECONFIG": str(own_cluster.kubeconfig_path)}
    lab = jupyterlab_factory(root, env)
    nbp = open_notebook(lab, "saved.ipynb")
    nbp.run_all()
    nbp.wait_all_ran(timeout=240)
    for index in (seq, mixed, success):
        _wait_state(nbp, index, lambda s: s["frozen"] and s["footer"], "the final view")
    nbp.save()
    lab.stop()
    saved = nbformat.read(str(root / "saved.ipynb"), as_version=4)
    assert "widgets" not in saved.metadata
    # what was saved needs no widget model: every display is HTML and text
    for index, cell in enumerate(saved.cells):
        for output in cell.get("outputs", []):
            data = output.get("data") or {}
            assert not [m for m in data if "widget" in m], (index, list(data))
    for index in (connect, status):  # the panels as last updated: the session was closed
        (panel,) = [
            o.data["text/plain"]
            for o in saved.cells[index].outputs
            if 'class="trainjob-status"' in (o.get("data") or {}).get("text/html", "")
        ]
        assert "Deleted" in panel and "Running" not in panel.split("as last seen")[0], panel

    lab = jupyterlab_factory(root, env)
    shots = []
    for frontend in ("lab", "notebook7"):
        nbp = open_notebook(lab, "saved.ipynb", frontend)
        cells = nbp.cells()
        cells.nth(success).locator(".tjm-footer").wait_for()
        panel = nbp.page.locator(".jp-NotebookPanel").inner_text()
        assert "Error displaying widget" not in panel and "model not found" not in panel
        # every cell's result is there: no widget left to load, none missing its model
        assert cells.count() == close + 1
        for index in range(cells.count()):
            text = nbp.output_text(index)
            for broken in ("Loading widget", "model not found", "Error displaying widget"):
                assert broken not in text, (index, text)
        for index in (seq, mixed, success):
            assert cells.nth(index).locator(".jp-OutputArea-output .tjm-static").count() == 1
        # the connect and status panels: static, and they say the session was closed
        for index in (connect, status):
            panel_of = cells.nth(index).locator(".jp-OutputArea-output .trainjob-status")
            assert panel_of.count() == 1, index
            head = panel_of.locator(".tjm-status-head").inner_text()
            assert "Deleted" in head and "Running" not in head, (index, head)
            assert "session 'default' closed" in panel_of.inner_text()
        assert "Closed session 'default'" in nbp.output_text(close)
        state = _state(nbp, seq)
        assert state is not None and state["visible"][-1] == "5000" and _follows(state), state
        assert "[… 4,000 lines hidden; the full output is in _trainjob.stdout" in panel
        assert re.search(r"exit code 0 · [\d.]+ s · pod ", nbp.output_text(seq))
        text = nbp.output_text(mixed)
        for line in ("on stdout", "a warning on stderr", "after the warning"):
            assert line in text, text
        assert re.search(r"exit code 3 · ", text), text
        stderr = cells.nth(mixed).locator(".tjm-stderr")
        assert stderr.count() == 1 and stderr.inner_text() == "a warning on stderr"
        assert "all good" in nbp.output_text(success)
        shots.append(nbp.screenshot_cell(mixed, screenshot_path(f"reopened-{frontend}", "mixed")))
        shots.append(
            nbp.screenshot_cell(connect, screenshot_path(f"reopened-{frontend}", "connect"))
        )
        shots.append(nbp.screenshot_cell(status, screenshot_path(f"reopened-{frontend}", "status")))

    # the same notebook from someone else: untrusted, its HTML sanitized (style values kept
    # only where the sanitizer allows them)
    shared = nbformat.read(str(root / "saved.ipynb"), as_version=4)
    shared.metadata["shared_by"] = "a colleague"
    nbformat.write(shared, str(root / "shared.ipynb"))
    for theme, label in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        lab.set_theme(theme)
        for name, trusted in (("saved.ipynb", True), ("shared.ipynb", False)):
            nbp = open_notebook(lab, name)
            _check_theme(nbp, label, trusted, mixed, success)
            tag = f"{label}-untrusted" if not trusted else label
            shots.append(nbp.screenshot_cell(mixed, screenshot_path(f"theme-{tag}", "mixed")))
            if trusted:
                shots.append(
                    nbp.screenshot_cell(success, screenshot_path(f"theme-{tag}", "success"))
                )
                shots.append(
                    nbp.screenshot_cell(connect, screenshot_path(f"theme-{tag}", "connect"))
                )
    with capsys.disabled():
        print("\nscreenshots:\n  " + "\n  ".join(str(s) for s in shots))


def _check_theme(nbp: Any, label: str, trusted: bool, mixed: int, success: int) -> None:
    """Every output text at 4.5:1 or more; stderr apart from stdout but not red."""
    nbp.cells().nth(success).locator(".tjm-footer").wait_for()
    pre_style = nbp.cells().nth(mixed).locator("pre").first.get_attribute("style") or ""
    # the sanitizer drops var() font families: the witness that the notebook is untrusted
    assert ("font-family" in pre_style) == trusted, pre_style
    measured = _contrast(nbp)
    assert measured["light"] == ("true" if label == "light" else "false"), measured["light"]
    found = measured["found"]
    classes = {cls for item in found for cls in item["cls"].split()}
    for needed in ("tjm-stdout", "tjm-stderr", "tjm-note", "tjm-footer"):
        assert needed in classes, (needed, found)
    low = [item for item in found if item["ratio"] < 4.5]
    assert not low, f"{label}: texts under 4.5:1: {low}"
    # stderr is not red: it keeps the text colour of stdout, on its own background
    by_class = {item["cls"]: item for item in found}
    assert by_class["tjm-stderr"]["color"] == by_class["tjm-stdout"]["color"], by_class
    assert by_class["tjm-stderr"]["bg"] != by_class["tjm-stdout"]["bg"], by_class
    # the footers keep their colours: green for success, red for the failure
    footers = [item for item in found if item["cls"] == "tjm-footer"]
    assert len({tuple(item["fg"]) for item in footers}) == 2, footers
    assert all(tuple(item["fg"]) != tuple(by_class["tjm-stdout"]["fg"]) for item in footers)
