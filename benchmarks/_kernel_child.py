"""Child process for the memory benchmark: a kernel-like InteractiveShell streaming a big cell.

    python -m benchmarks._kernel_child KUBECONFIG NBYTES LINE_LEN OUT_JSON

Writes {"idle_kb", "peak_kb", "seconds", "widget_msgs"} to OUT_JSON; stdout is discarded.
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks import ipyshell
from benchmarks.common import vm_hwm_kb


def main() -> None:
    kubeconfig, nbytes, line_len, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    shell = ipyshell.make_shell(kubeconfig, "on")
    ipyshell.connect(shell)
    ipyshell.cell(shell, "echo warm")
    idle = vm_hwm_kb()
    counter, _ = ipyshell.count_widget_messages()
    line = "x" * (line_len - 1)
    body = f"yes {line} | head -c {nbytes}"
    t0 = time.perf_counter()
    ipyshell.cell(shell, body)
    dt = time.perf_counter() - t0
    peak = vm_hwm_kb()
    ipyshell.close(shell)
    with open(out, "w") as f:
        json.dump({"idle_kb": idle, "peak_kb": peak, "seconds": dt, "widget_msgs": counter[0]}, f)


if __name__ == "__main__":
    main()
