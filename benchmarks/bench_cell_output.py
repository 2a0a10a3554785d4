"""Row 8: 1 GB of 64-byte lines through `%%trainjob` in a real kernel vs `session.execute`.

One ipykernel (jupyter_client), one session. Each round runs, back to back in the same kernel:
the engine alone (`session.execute` capturing the output), the cell with widgets on, the cell
with the text view. Times are taken inside the kernel around the call (the cell is run as
Jupyter runs a `%%trainjob` cell: `run_cell_magic`). This process drains iopub and counts what
the display sent (comm messages of the widgets, stream messages of the text view) and the
longest gap between two of them (liveness). The kernel's peak RSS (VmHWM) is reset before each
cell (`/proc/PID/clear_refs`) and read after it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import fixtures
from benchmarks.common import Context, Row, Stats, med_range, ratio, secs, vm_hwm_kb, yes_no

NAME = "celloutput"
GB = 1 << 30
LINE_LEN = 64
GOAL_RATIO = 2.0
GOAL_RSS_MB = 200
INTERVAL = 0.1  # TrainJobMagics.update_interval (default): at most one render per interval
FIXED_MSGS = 6  # widget messages not tied to the stream (first and final render, footer, ...)
MAX_GAP = 1.0  # seconds: the widget view must update at least this often while output flows
ROOT = str(Path(__file__).resolve().parent.parent)

SETUP = """
%load_ext trainjob_magics
%config TrainJobMagics.kubeconfig = {kubeconfig!r}
%trainjob_connect torch-distributed --nodes 1
import time as _bench_time
from trainjob_magics.magics.extension import loaded_magics as _bench_lm
_bench_session = _bench_lm(get_ipython()).registry.find().session
"""

ENGINE = """
_bench_t0 = _bench_time.perf_counter()
_bench_r = _bench_session.execute({argv!r})
_bench_dt = _bench_time.perf_counter() - _bench_t0
_bench_ok = _bench_r.returncode == 0 and _bench_r.stdout_size == {nbytes}
del _bench_r
"""

CELL = """
get_ipython().run_line_magic("config", "TrainJobMagics.widgets = {widgets!r}")
_bench_t0 = _bench_time.perf_counter()
get_ipython().run_cell_magic("trainjob", "", {body!r})
_bench_dt = _bench_time.perf_counter() - _bench_t0
_bench_ok = _trainjob.returncode == 0 and _trainjob.stdout_size == {nbytes}
_trainjob = None
"""


class KernelDriver:
    """A python3 kernel importing this checkout; runs code and tallies its iopub messages."""

    def __init__(self) -> None:
        from jupyter_client.manager import KernelManager

        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=ROOT)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.pid = int(self.run("import os; _bench_pid = os.getpid()", "_bench_pid")["_bench_pid"])

    def run(self, code: str, *names: str, timeout: float = 900) -> dict[str, Any]:
        """Execute code; return the named user expressions (their text) and message tallies."""
        tally: dict[str, Any] = {"comm_msg": 0, "stream": 0, "display": 0, "times": []}
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            kind = msg["msg_type"]
            if kind in ("comm_msg", "stream"):
                tally[kind] += 1
                tally["times"].append(time.monotonic())
            elif kind in ("display_data", "update_display_data"):
                tally["display"] += 1
                tally["times"].append(time.monotonic())
            elif kind == "error":
                errors.append("\n".join(msg["content"]["traceback"])[-1500:])

        t0 = time.monotonic()
        reply = self.kc.execute_interactive(
            code,
            user_expressions={n: n for n in names},
            timeout=timeout,
            output_hook=hook,
        )
        tally["wall"] = time.monotonic() - t0
        content = reply["content"]
        if content.get("status") != "ok" or errors:
            raise RuntimeError(f"kernel cell failed: {errors or content.get('evalue')}")
        for n in names:
            got = content["user_expressions"][n]
            if got.get("status") != "ok":
                raise RuntimeError(f"kernel expression {n} failed: {got.get('evalue')}")
            tally[n] = got["data"]["text/plain"]
        return tally

    def reset_peak(self) -> bool:
        """Reset the kernel's VmHWM to its current RSS (Linux >= 4.0); False if not possible."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def peak_mb(self) -> float:
        return vm_hwm_kb(self.pid) / 1024

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        try:
            self.km.shutdown_kernel(now=False)
        except Exception:
            with contextlib.suppress(Exception):
                self.km.shutdown_kernel(now=True)


@contextlib.contextmanager
def kernel() -> Iterator[KernelDriver]:
    try:
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
    except ImportError as e:
        raise fixtures.Unavailable(f"ipykernel/jupyter_client not installed ({e})") from e
    k = KernelDriver()
    try:
        yield k
    finally:
        k.stop()


def _max_gap(times: list[float], start: float, end: float) -> float:
    """Longest time without a display message between start and end."""
    points = [start, *[t for t in times if start <= t <= end], end]
    return max(b - a for a, b in itertools.pairwise(points))


def _mbps(nbytes: int, st: Stats) -> str:
    return f"{nbytes / (1 << 20) / st.median:.0f} MB/s"


def run(ctx: Context) -> list[Row]:
    """Interleave engine, widgets cell and text cell in one kernel; time, count, measure RSS."""
    fixtures.magics_available()
    nbytes = (4 << 20) if ctx.smoke else GB
    reps = 1 if ctx.smoke else 3
    line = "x" * (LINE_LEN - 1)
    body = f"yes {line} | head -c {nbytes}"
    argv = ["sh", "-c", body]
    kinds = {
        "engine": ENGINE.format(argv=argv, nbytes=nbytes),
        "on": CELL.format(widgets="on", body=body, nbytes=nbytes),
        "off": CELL.format(widgets="off", body=body, nbytes=nbytes),
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    peaks: dict[str, list[float]] = {k: [] for k in kinds}
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    gaps: dict[str, list[float]] = {k: [] for k in kinds}
    paced: list[bool] = []
    starts: dict[str, list[float]] = {k: [] for k in kinds}
    load0 = os.getloadavg()[0]
    with kernel() as k:
        k.run(SETUP.format(kubeconfig=ctx.kubeconfig))
        idle = k.rss_mb()
        for code in kinds.values():  # warm-up at a small size
            k.run(code.replace(str(nbytes), str(1 << 16)), "_bench_ok")
        can_reset = k.reset_peak()
        for _ in range(reps):
            for kind, code in kinds.items():
                k.reset_peak()
                starts[kind].append(k.rss_mb())
                got = k.run(code, "_bench_dt", "_bench_ok")
                if got["_bench_ok"] != "True":
                    raise AssertionError(f"{kind}: wrong exit code or byte count")
                dt = float(got["_bench_dt"])
                times[kind].append(dt)
                peaks[kind].append(k.peak_mb())
                shown = got["comm_msg"] if kind == "on" else got["stream"]
                rates[kind].append(shown / dt)
                if kind == "on":
                    paced.append(shown <= dt / INTERVAL + FIXED_MSGS)
                ts = got["times"]
                gaps[kind].append(_max_gap(ts, ts[0], ts[-1]) if len(ts) > 1 else 0.0)
        k.run("%trainjob_close")
    load1 = os.getloadavg()[0]
    size = f"{nbytes / GB:.0f} GB" if nbytes >= GB else f"{nbytes >> 20} MB"
    engine = Stats(times["engine"])
    rows: list[Row] = []
    for kind, label, what in (
        ("on", "widgets on", "comm msgs"),
        ("off", "text view", "stream msgs"),
    ):
        st = Stats(times[kind])
        x = st.median / engine.median
        goal, met = f"<= {GOAL_RATIO:g}x", x <= GOAL_RATIO
        if kind == "on":  # the widget stays live, and paced
            goal += f"; <= 1 render per {INTERVAL:g} s (+{FIXED_MSGS}), gaps <= {MAX_GAP:g} s"
            met = met and all(paced) and max(gaps[kind]) <= MAX_GAP
        rows.append(
            Row(
                f"Cell output: {size} of {LINE_LEN}-byte lines through `%%trainjob`, {label} "
                f"(real kernel; n={reps})",
                f"{med_range(st, secs)} ({_mbps(nbytes, st)}); {Stats(rates[kind]).median:.1f} "
                f"{what}/s, longest gap {Stats(gaps[kind]).max:.2f} s",
                f"`session.execute` in the same kernel: {med_range(engine, secs)} "
                f"({_mbps(nbytes, engine)})",
                f"{ratio(x)} the time (medians)",
                goal,
                yes_no(met),
                bench=NAME,
            )
        )
    worst = max(max(peaks["on"]), max(peaks["off"]))
    rss = ", ".join(
        f"{label} {med_range(Stats(peaks[kind]), lambda v: f'{v:.0f} MB')}"
        for kind, label in (("on", "widgets"), ("off", "text"))
    )
    rows.append(
        Row(
            f"Cell output: peak kernel RSS while {size} streams through `%%trainjob` (n={reps})",
            rss + ("" if can_reset else " (VmHWM not resettable: peak of the whole kernel)"),
            f"`session.execute`: {med_range(Stats(peaks['engine']), lambda v: f'{v:.0f} MB')}; "
            f"idle kernel after connect {idle:.0f} MB; RSS when a cell started "
            f"{min(map(min, starts.values())):.0f}-{max(map(max, starts.values())):.0f} MB",
            "-",
            f"<= {GOAL_RSS_MB} MB",
            yes_no(worst <= GOAL_RSS_MB),
            bench=NAME,
        )
    )
    ctx.note(
        f"Cell output ({NAME}): load average {load0:.2f} at start, {load1:.2f} at end; "
        "'longest gap' is the longest time between two display messages while the cell ran; "
        "the text view prints the first `display_max_lines` lines live, then nothing until the "
        "hidden-lines note and the tail at the end (a stream cannot redraw), so its gap is "
        "most of the cell."
    )
    return rows
