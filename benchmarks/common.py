"""Shared pieces of the benchmark suite: statistics, table rows, machine facts, the run context."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_AVAILABLE = "not available"


@dataclass
class Stats:
    """Summary of repeated measurements (seconds, or any unit)."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def pct(self, p: float) -> float:
        """Percentile by linear interpolation between closest ranks."""
        s = sorted(self.samples)
        if len(s) == 1:
            return s[0]
        k = (len(s) - 1) * p / 100.0
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    @property
    def p95(self) -> float:
        return self.pct(95)


@dataclass
class Row:
    """One line of the results table."""

    what: str
    ours: str
    baseline: str
    ratio: str
    goal: str
    met: str
    bench: str = ""
    notes: list[str] = field(default_factory=list)
    floor: str = "-"  # the physical limit measured in the same run (e.g. a raw socket reader)
    stack: bool = False  # a row of the real stack's section ("On the real stack")


@dataclass
class Context:
    """What every benchmark gets: the cluster, the kubeconfig, sizes and repetition counts."""

    cluster: Any
    kubeconfig: str
    namespace: str
    smoke: bool
    workdir: Path
    reps: int
    notes: list[str] = field(default_factory=list)
    shared: dict[str, Any] = field(default_factory=dict)
    realstack_dir: str = ""  # a devtools.realstack state folder (bench_realstack), if given

    def note(self, text: str) -> None:
        """Add a footnote printed under the table."""
        self.notes.append(text)


def ms(seconds: float) -> str:
    """Format seconds as milliseconds."""
    v = seconds * 1000.0
    if v >= 100:
        return f"{v:.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


def secs(seconds: float) -> str:
    """Format seconds, switching to ms below one second."""
    return f"{seconds:.2f} s" if seconds >= 1 else ms(seconds)


def med_range(st: Stats, fmt: Callable[[float], str] = ms) -> str:
    """`median (min-max)` in one cell."""
    if len(st.samples) == 1:
        return fmt(st.median)
    return f"{fmt(st.median)} ({fmt(st.min)}-{fmt(st.max)})"


def ratio(x: float) -> str:
    """Format a ratio like `12.3x`."""
    if x >= 100:
        return f"{x:.0f}x"
    if x >= 10:
        return f"{x:.1f}x"
    return f"{x:.2f}x"


def yes_no(ok: bool | None) -> str:
    """Table text for a goal check."""
    if ok is None:
        return "n/a"
    return "yes" if ok else "**no**"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run fn once; return (elapsed seconds, result)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def repeat(fn: Callable[[], Any], n: int, warmup: int = 1) -> Stats:
    """Time fn n times after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    return Stats([timed(fn)[0] for _ in range(n)])


def machine_info() -> dict[str, str]:
    """CPU model, cores, Python, kernel, date."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) // 1024} MB"
                break
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load": f"{os.getloadavg()[0]:.2f}",
    }


def vm_hwm_kb(pid: int | str = "self") -> int:
    """Peak resident set size (VmHWM) of a process in kB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


TABLE_HEAD = "| What | Ours | Baseline | Floor | Ratio | Goal | Met? |"


def fmt_row(r: Row) -> str:
    """One markdown table line (no newline)."""
    return f"| {r.what} | {r.ours} | {r.baseline} | {r.floor} | {r.ratio} | {r.goal} | {r.met} |"


def fmt_table(rows: Iterable[Row]) -> str:
    """Markdown table of the rows."""
    head = TABLE_HEAD + "\n| --- | --- | --- | --- | --- | --- | --- |\n"
    return head + "".join(fmt_row(r) + "\n" for r in rows)
