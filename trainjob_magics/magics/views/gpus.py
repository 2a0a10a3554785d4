"""The GPUs of a session's pods in ``%trainjob_status``: a line per GPU (text) or a small table
(HTML), from the engine's readings as dicts (``PodGpus.as_dict()``). Shown only where a pod
has ``nvidia-smi`` (or a command kept it from being sampled)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

TITLE = "GPUs (nvidia-smi; sampled at most every 10 s, never while a command runs)"


def worth_showing(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any pod has GPU readings, or was not sampled because a command runs."""
    return any(r.get("state") in ("ok", "busy") for r in rows)


def _amount(value: Any) -> str:
    return "n/a" if value is None else f"{value:g}"


def gpu_cells(gpu: dict[str, Any]) -> tuple[str, str, str]:
    """``("GPU 0 NVIDIA A100", "35 %", "1234/81920 MiB")``."""
    index = gpu.get("index")
    which = f"GPU {index if index is not None else '?'} {gpu.get('name') or ''}".strip()
    util = "n/a" if gpu.get("utilization") is None else f"{gpu['utilization']:g} %"
    memory = f"{_amount(gpu.get('memoryUsedMiB'))}/{_amount(gpu.get('memoryTotalMiB'))} MiB"
    return which, util, memory


def _rows(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    out = []
    for r in rows:
        pod = str(r.get("pod", ""))
        if r.get("state") == "ok":
            out += [(pod, *gpu_cells(g)) for g in r.get("gpus") or []]
        elif r.get("state") == "busy":
            out.append((pod, "not sampled: a command runs in the job", "", ""))
        else:
            out.append((pod, str(r.get("message") or r.get("state") or ""), "", ""))
    return out


def gpu_text(rows: Sequence[dict[str, Any]]) -> str:
    """``GPUs (...):`` then ``  POD  GPU 0 NAME: 35 % · 1234/81920 MiB`` per GPU."""
    lines = [f"{TITLE}:"]
    for pod, which, util, memory in _rows(rows):
        lines.append(f"  {pod}  {which}: {util} · {memory}" if util else f"  {pod}  {which}")
    return "\n".join(lines)


def gpu_html(rows: Sequence[dict[str, Any]]) -> str:
    """The same as a table."""
    cell = "padding:1px 8px;text-align:left;font-family:var(--jp-code-font-family,monospace)"
    body = "".join(
        "<tr>" + "".join(f'<td style="{cell}">{html.escape(v)}</td>' for v in row) + "</tr>"
        for row in _rows(rows)
    )
    head = "".join(f'<th style="{cell}">{h}</th>' for h in ("pod", "GPU", "utilization", "memory"))
    return (
        f'<div class="tjm-gpus"><div style="font-weight:600">{html.escape(TITLE)}</div>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
