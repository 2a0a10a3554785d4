"""Execute a notebook against the local cluster and print what it shows, cell by cell.

Usage::

    python devtools/notebook_run.py NOTEBOOK [--output PATH] [--no-cluster]
        [--kueue] [--timeout SECONDS]

A :class:`~trainjob_magics.localcluster.LocalCluster` is started (unless ``--no-cluster`` is
given and ``KUBECONFIG`` is set), ``KUBECONFIG`` is exported to the kernel, the notebook runs
under nbclient with ``store_widget_state=True``, the executed notebook is saved, and every
cell's source and outputs are printed, including the text of widget views found in the saved
widget state. The exit status is 1 when a cell failed.

It lives in the repository, not in the installed package: it starts the local cluster and
nbclient, which only development and the quickstart need.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from traitlets.config import Config

WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
_MODEL_REF = "IPY_MODEL_"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_BLOCK_TAGS = {
    "br",
    "p",
    "div",
    "tr",
    "li",
    "ul",
    "ol",
    "table",
    "thead",
    "tbody",
    "pre",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "summary",
    "details",
}
_CELL_TAGS = {"td", "th"}
# the fields of a row of the pods' and ranks' summary (magics/views/pod_summary.py): spans that
# a browser lays out apart, read apart ("✓ rank 0 · POD exit 0 HOST", not "rank 0 · PODexit 0")
_FIELD_CLASS = re.compile(r"(^|\s)tjm-pod-")


_VOID_TAGS = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "source"}


class _TextExtractor(HTMLParser):
    """Collect the visible text of an HTML fragment: table cells tab-separated, blocks on lines;
    nothing of ``<style>``, ``<script>`` or an element styled ``display:none``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._open: list[tuple[str, bool]] = []  # open elements: (tag, hides its content)

    @property
    def _skip(self) -> bool:
        return any(hides for _tag, hides in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID_TAGS:
            style = (dict(attrs).get("style") or "").replace(" ", "")
            hidden = tag in ("style", "script") or "display:none" in style
            self._open.append((tag, hidden))
        if tag in _BLOCK_TAGS and not self._skip:
            self.parts.append("\n")
        elif tag == "span" and _FIELD_CLASS.search(dict(attrs).get("class") or ""):
            self.parts.append("\t")  # a field of a pod's or rank's row, apart from the next

    def handle_endtag(self, tag: str) -> None:
        skipped = self._skip
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index][0] == tag:
                del self._open[index:]
                break
        if skipped:
            return
        if tag in _CELL_TAGS:
            self.parts.append("\t")
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def strip_tags(markup: str) -> str:
    """Return the visible text of an HTML fragment (tags removed, entities decoded)."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    text = html.unescape("".join(parser.parts))
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


def _widget_state(nb: Any) -> dict[str, dict[str, Any]]:
    """Return the saved widget state (model_id -> {model_name, state, ...}) of a notebook."""
    widgets = nb.get("metadata", {}).get("widgets", {}) or {}
    return dict((widgets.get(WIDGET_STATE_MIME) or {}).get("state") or {})


def _refs(value: Any) -> list[str]:
    """Model ids referenced by a widget trait value (``IPY_MODEL_<id>`` strings)."""
    if isinstance(value, str) and value.startswith(_MODEL_REF):
        return [value[len(_MODEL_REF) :]]
    if isinstance(value, list | tuple):
        return [ref for item in value for ref in _refs(item)]
    return []


def _output_text(output: dict[str, Any], models: dict[str, dict[str, Any]], seen: set[str]) -> str:
    """Text of one notebook output (stream, error, rich data, or a nested widget view)."""
    kind = output.get("output_type")
    if kind == "stream":
        text = output.get("text", "")
        return _ANSI.sub("", "".join(text) if isinstance(text, list) else text)
    if kind == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    data = output.get("data") or {}
    view = data.get(WIDGET_VIEW_MIME)
    if view and view.get("model_id") in models:
        return _model_text(view["model_id"], models, seen)
    if "text/html" in data:
        markup = data["text/html"]
        return strip_tags("".join(markup) if isinstance(markup, list) else markup)
    if "text/markdown" in data:
        md = data["text/markdown"]
        return "".join(md) if isinstance(md, list) else md
    if "text/plain" in data:
        plain = data["text/plain"]
        return _ANSI.sub("", "".join(plain) if isinstance(plain, list) else plain)
    return ""


def _model_text(model_id: str, models: dict[str, dict[str, Any]], seen: set[str]) -> str:
    """Text a widget model shows, recursing through children and Output widgets."""
    if model_id in seen or model_id not in models:
        return ""
    seen = seen | {model_id}
    model = models[model_id]
    name = model.get("model_name", "")
    state = model.get("state") or {}
    if name in ("LayoutModel", "StyleModel") or name.endswith("StyleModel"):
        return ""
    parts: list[str] = []
    titles = state.get("titles") or state.get("_titles") or []
    if isinstance(titles, dict):
        titles = [titles[k] for k in sorted(titles, key=lambda k: int(k))]
    for key in ("description", "placeholder"):
        value = state.get(key)
        if isinstance(value, str) and value.strip() and name != "HTMLModel":
            parts.append(strip_tags(value))
    value = state.get("value")
    if isinstance(value, str) and value.strip():
        parts.append(strip_tags(value) if name != "TextareaModel" else value)
    elif isinstance(value, int | float) and not isinstance(value, bool) and "Progress" in name:
        parts.append(str(value))
    if name == "OutputModel":
        for output in state.get("outputs") or []:
            text = _output_text(output, models, seen)
            if text.strip():
                parts.append(text.rstrip("\n"))
    for index, child in enumerate(_refs(state.get("children") or [])):
        if index < len(titles) and isinstance(titles[index], str) and titles[index]:
            parts.append(titles[index])
        text = _model_text(child, models, seen)
        if text.strip():
            parts.append(text)
    return "\n".join(part for part in parts if part)


def extract_widget_texts(nb: Any) -> dict[str, str]:
    """Map every widget model id of the saved widget state to the text it shows."""
    models = _widget_state(nb)
    return {model_id: _model_text(model_id, models, set()) for model_id in models}


def output_texts(cell: Any, nb: Any) -> list[str]:
    """Texts of one cell's outputs, with widget views resolved through the saved widget state."""
    models = _widget_state(nb)
    return [_output_text(output, models, set()) for output in cell.get("outputs") or []]


def cell_texts(nb: Any) -> list[str]:
    """The text every cell shows (its outputs joined), one entry per cell; '' for markdown."""
    texts = []
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            texts.append("")
            continue
        texts.append("\n".join(t.rstrip("\n") for t in output_texts(cell, nb) if t.strip()))
    return texts


@dataclass
class RunResult:
    """Outcome of :func:`run_notebook`."""

    nb: Any
    error: str | None
    failed_cell: int | None
    duration: float


def _first_error(nb: Any) -> tuple[int | None, str | None]:
    """Index and one-line description of the first cell holding an error output."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs") or []:
            if output.get("output_type") == "error":
                return index, f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
    return None, None


def ipc_kernel_config(directory: str | Path) -> Config:
    """KernelManager settings for a kernel on Unix sockets in ``directory`` (absolute, so the
    kernel and its client agree whatever their working directories): no TCP port, and no
    "Kernel is running over TCP without encryption" warning on every run."""
    return Config({"KernelManager": {"transport": "ipc", "ip": str(Path(directory) / "kernel")}})


RESTART_TAG = "restart-kernel"  # a cell with this tag is followed by Kernel > Restart


class _RestartingClient(NotebookClient):
    """Restarts the kernel (as Kernel > Restart does: a polite shutdown, then a new kernel on
    the same connection) after each cell tagged ``restart-kernel``."""

    async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kw: Any) -> Any:
        done = await super().async_execute_cell(cell, cell_index, *args, **kw)
        if RESTART_TAG in (cell.get("metadata", {}).get("tags") or []):
            await self.km.restart_kernel(now=False)
            await self.kc._async_wait_for_ready(timeout=self.startup_timeout)
        return done


def run_notebook(
    path: str | Path,
    output: str | Path | None = None,
    *,
    kubeconfig: str | Path | None = None,
    timeout: float = 600,
    startup_timeout: float = 120,
    cwd: str | Path | None = None,
    on_cell_executed: Callable[..., Any] | None = None,
) -> RunResult:
    """Execute ``path`` with nbclient (widget state stored) and save it to ``output``.

    ``kubeconfig`` is exported as ``KUBECONFIG`` to the kernel. Execution stops at the first
    failing cell, as Run All does; the notebook is saved either way. ``on_cell_executed`` is
    nbclient's hook, called with ``cell=``, ``cell_index=`` and ``execute_reply=`` after each
    cell, while the kernel still runs. After a cell tagged ``restart-kernel`` the kernel is
    restarted, as Kernel > Restart does.
    """
    nb = nbformat.read(str(path), as_version=4)
    env_before = os.environ.get("KUBECONFIG")
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)
    sockets = tempfile.TemporaryDirectory(prefix="nb-kernel-")
    client = _RestartingClient(
        nb,
        kernel_name="python3",
        store_widget_state=True,
        timeout=int(timeout),
        startup_timeout=int(startup_timeout),
        resources={"metadata": {"path": str(cwd or Path(path).resolve().parent)}},
        config=ipc_kernel_config(sockets.name),
    )
    if on_cell_executed is not None:
        client.on_cell_executed = on_cell_executed
    start = time.monotonic()
    error: str | None = None
    failed: int | None = None
    try:
        client.execute()
    except CellTimeoutError as exc:
        error = f"CellTimeoutError: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    except CellExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}"
    finally:
        sockets.cleanup()
        if error is not None:
            client.set_widgets_metadata()  # nbclient only stores it after the last cell
        if kubeconfig is not None:
            if env_before is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = env_before
    duration = time.monotonic() - start
    if error is not None:
        failed, found = _first_error(nb)
        error = found or error
        if failed is None:  # timeout: the first cell without an execution count
            failed = next(
                (
                    i
                    for i, c in enumerate(nb.cells)
                    if c.cell_type == "code" and c.get("execution_count") is None
                ),
                None,
            )
    if output is not None:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(output))
    return RunResult(nb=nb, error=error, failed_cell=failed, duration=duration)


def render(nb: Any) -> Iterator[str]:
    """Yield printable lines: each cell's source, then the text of each of its outputs."""
    models = _widget_state(nb)
    for index, cell in enumerate(nb.cells):
        kind = cell.get("cell_type")
        if kind == "markdown":
            yield f"--- cell {index} (markdown) ---"
            yield from (f"  {line}" for line in cell.source.splitlines())
            continue
        if kind != "code":
            continue
        count = cell.get("execution_count")
        yield f"--- cell {index} In [{count if count is not None else ' '}] ---"
        yield from (f">>> {line}" for line in cell.source.splitlines())
        outputs = cell.get("outputs") or []
        for number, output in enumerate(outputs, 1):
            text = _output_text(output, models, set()).rstrip("\n")
            if not text.strip():
                continue
            data = output.get("data") or {}
            label = "widget" if WIDGET_VIEW_MIME in data else output.get("output_type", "")
            if output.get("output_type") == "stream":
                label = output.get("name", "stream")
            yield f"[out {number}: {label}]"
            yield from text.splitlines()


def cluster_options(nb: Any, kueue: bool = False) -> dict[str, Any]:
    """LocalCluster keyword arguments for a notebook.

    A notebook may ask for its local cluster in its metadata, e.g.
    ``{"trainjob_magics": {"local_cluster": {"kueue": true}}}``; ``kueue`` (``--kueue``) switches
    the Kueue simulation on. A ``kueue`` mapping becomes a ``KueueConfig``.
    """
    meta = nb.get("metadata", {}).get("trainjob_magics", {}) or {}
    options = dict(meta.get("local_cluster") or {})
    if kueue and not options.get("kueue"):
        options["kueue"] = True
    if isinstance(options.get("kueue"), dict):
        from trainjob_magics.localcluster.kueue import KueueConfig

        options["kueue"] = KueueConfig(**options["kueue"])
    return options


@contextlib.contextmanager
def _cluster(use_existing: bool, options: dict[str, Any]) -> Iterator[str | None]:
    """Yield the kubeconfig to use: None for the caller's, or a fresh local cluster's."""
    if use_existing:
        yield None
        return
    from trainjob_magics.localcluster import LocalCluster

    with LocalCluster(**options) as cluster:
        yield str(cluster.kubeconfig_path)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="python devtools/notebook_run.py",
        description="Execute a notebook against the local cluster and print what it shows.",
    )
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--output", type=Path, help="where to save the executed notebook")
    parser.add_argument(
        "--no-cluster",
        action="store_true",
        help="use the cluster named by $KUBECONFIG instead of starting a local one",
    )
    parser.add_argument("--timeout", type=float, default=600, help="per-cell timeout, seconds")
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="start the local cluster with its Kueue simulation (LocalQueue user-queue)",
    )
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(f"no such notebook: {args.notebook}")
    if args.no_cluster and not os.environ.get("KUBECONFIG"):
        parser.error("--no-cluster needs KUBECONFIG to name the cluster to use")
    output = args.output or args.notebook.with_suffix(".executed.ipynb")
    options = cluster_options(nbformat.read(str(args.notebook), as_version=4), args.kueue)
    with _cluster(args.no_cluster, options) as kubeconfig:
        where = "$KUBECONFIG" if kubeconfig is None else "a local cluster"
        print(f"Running {args.notebook} against {where} ...", flush=True)
        result = run_notebook(args.notebook, output, kubeconfig=kubeconfig, timeout=args.timeout)
    for line in render(result.nb):
        print(line)
    print(f"--- saved {output} ({result.duration:.1f}s) ---")
    if result.error is not None:
        print(f"FAILED in cell {result.failed_cell}: {result.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
