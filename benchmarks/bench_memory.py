"""Row 4: peak RSS (VmHWM) of a kernel-like process while 1 GB streams through a cell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import fixtures
from benchmarks.common import Context, Row, Stats, med_range, secs, yes_no

NAME = "memory"
GB = 1 << 30
LINE_LEN = 200


def run(ctx: Context) -> list[Row]:
    """Run the child (fresh process each repetition) and read its VmHWM."""
    fixtures.magics_available()
    nbytes = (8 << 20) if ctx.smoke else GB
    reps = 1 if ctx.smoke else 2
    peaks, idles, times = [], [], []
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for i in range(reps):
        out = ctx.workdir / f"memory-{i}.json"
        cmd = [sys.executable, "-m", "benchmarks._kernel_child", ctx.kubeconfig, str(nbytes)]
        cmd += [str(LINE_LEN), str(out)]
        p = subprocess.run(
            cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=900
        )
        if p.returncode != 0:
            raise RuntimeError(f"child failed: {p.stderr.decode(errors='replace')[-500:]}")
        d = json.loads(out.read_text())
        peaks.append(d["peak_kb"] / 1024)
        idles.append(d["idle_kb"] / 1024)
        times.append(d["seconds"])
    peak = Stats(peaks)
    size = f"{nbytes / GB:.0f} GB" if nbytes >= GB else f"{nbytes >> 20} MB"
    return [
        Row(
            f"Memory: peak RSS while {size} streams through `%%trainjob` "
            f"(widgets, display capped; {LINE_LEN}-byte lines; n={reps})",
            f"{med_range(peak, lambda v: f'{v:.0f} MB')} peak, cell took "
            f"{med_range(Stats(times), secs)}",
            f"idle kernel after connect: {Stats(idles).median:.0f} MB",
            f"+{peak.median - Stats(idles).median:.0f} MB",
            "<= 200 MB peak",
            yes_no(peak.max <= 200),
            bench=NAME,
        )
    ]
