"""Row 7: 100,000 short lines through `%%trainjob`: widgets on vs text fallback; comm updates."""

from __future__ import annotations

import time

from benchmarks import ipyshell
from benchmarks.common import Context, Row, Stats, med_range, ratio, secs, yes_no

NAME = "widgets"
MAX_UPDATES_PER_S = 30.0  # "bounded": the widget's throttle is 0.1 s by default (<= ~10/s + ends)


def run(ctx: Context) -> list[Row]:
    """Alternate widgets on/off over the same session; count Widget._send calls when on."""
    lines = 2000 if ctx.smoke else 100_000
    reps = 2 if ctx.smoke else 5
    body = f"seq {lines}"
    shell = ipyshell.make_shell(ctx.kubeconfig, "off")
    ipyshell.connect(shell)
    counter, undo = ipyshell.count_widget_messages()
    t_on: list[float] = []
    t_off: list[float] = []
    msgs: list[int] = []
    try:
        for mode in ("on", "off"):  # warm-up
            ipyshell.set_widgets(shell, mode)
            ipyshell.cell(shell, "seq 10")
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
    finally:
        undo()
        ipyshell.close(shell)
    on, off = Stats(t_on), Stats(t_off)
    m = Stats([float(x) for x in msgs])
    rate = max(c / t for c, t in zip(msgs, t_on, strict=True))
    x = on.median / off.median
    return [
        Row(
            f"Widget streaming {lines:,} short lines (`{body}`, n={reps})",
            f"{med_range(on, secs)}; {m.median:.0f} comm msgs "
            f"({m.min:.0f}-{m.max:.0f}), max {rate:.0f} msgs/s",
            f"text fallback: {med_range(off, secs)}",
            f"{ratio(x)} the time",
            f"<= 1.5x time; <= {MAX_UPDATES_PER_S:.0f} msgs/s",
            yes_no(x <= 1.5 and rate <= MAX_UPDATES_PER_S),
            bench=NAME,
        )
    ]
