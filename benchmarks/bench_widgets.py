"""Row 7: 100,000 short lines through `%%trainjob`: widgets on vs text fallback; comm updates.

Two cells: the lines as fast as they come (`seq 100000`), and the same number paced over about
3 s (30 bursts 0.1 s apart), which shows the update rate while a job keeps printing.
"""

from __future__ import annotations

import math
import time

from benchmarks import ipyshell
from benchmarks.common import Context, Row, Stats, med_range, ratio, secs, yes_no

NAME = "widgets"
FIXED_MSGS = 6  # messages not tied to the stream: first render, final render, footer, ...


def _bodies(lines: int) -> list[tuple[str, str]]:
    burst = math.ceil(lines / 30)
    return [
        (f"{lines:,} short lines at full speed", f"seq {lines}"),
        (
            f"{30 * burst:,} short lines paced over ~3 s",
            f"i=0; while [ $i -lt 30 ]; do seq {burst}; sleep 0.1; i=$((i+1)); done",
        ),
    ]


def run(ctx: Context) -> list[Row]:
    """Alternate widgets on/off over the same session; count Widget._send calls when on."""
    lines = 3000 if ctx.smoke else 100_000
    reps = 1 if ctx.smoke else 5
    shell = ipyshell.make_shell(ctx.kubeconfig, "off")
    ipyshell.connect(shell)
    interval = float(shell.run_line_magic("config", "TrainJobMagics.update_interval") or 0.1)
    counter, undo = ipyshell.count_widget_messages()
    rows: list[Row] = []
    try:
        for mode in ("on", "off"):  # warm-up
            ipyshell.set_widgets(shell, mode)
            ipyshell.cell(shell, "seq 10")
        for label, body in _bodies(lines):
            if ctx.smoke and "paced" in label:
                body = body.replace("sleep 0.1", "sleep 0.01")
            t_on: list[float] = []
            t_off: list[float] = []
            msgs: list[int] = []
            for _ in range(reps):
                ipyshell.set_widgets(shell, "on")
                counter[0] = 0
                t0 = time.perf_counter()
                ipyshell.cell(shell, body)
                t_on.append(time.perf_counter() - t0)
                msgs.append(counter[0])
                ipyshell.set_widgets(shell, "off")
                t0 = time.perf_counter()
                ipyshell.cell(shell, body)
                t_off.append(time.perf_counter() - t0)
            on, off = Stats(t_on), Stats(t_off)
            m = Stats([float(x) for x in msgs])
            # bounded: no more than one render per update_interval, plus the fixed ones
            over = [c - (t / interval + FIXED_MSGS) for c, t in zip(msgs, t_on, strict=True)]
            rate = m.median / on.median
            x = on.median / off.median
            rows.append(
                Row(
                    f"Widget streaming: {label} (n={reps})",
                    f"{med_range(on, secs)}; {m.median:.0f} comm msgs ({rate:.0f}/s)",
                    f"text fallback: {med_range(off, secs)}",
                    f"{ratio(x)} the time",
                    f"<= 1.5x time; msgs <= time/{interval:g} s + {FIXED_MSGS}",
                    yes_no(x <= 1.5 and max(over) <= 0),
                    bench=NAME,
                )
            )
    finally:
        undo()
        ipyshell.close(shell)
    return rows
