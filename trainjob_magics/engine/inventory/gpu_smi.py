"""Reading ``nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
--format=csv,noheader,nounits``, tolerant of the other forms NVIDIA documents for
``--format=csv`` (with the header line, with units: ``35 %``, ``1234 MiB``) and of what a GPU
says instead of a number (``[N/A]``, ``[Not Supported]``, ``[Insufficient Permissions]``,
``[Unknown Error]``; utilization under MIG is ``[N/A]``). A line that is not a GPU row (a
warning such as ``WARNING: infoROM is corrupted at gpu ...``) is kept aside, never an error."""

from __future__ import annotations

import re

from ..result import GpuInfo

FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total")
QUERY_ARGS = ("--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits")

_UNITS = {"utilization.gpu": ("%",), "memory.used": ("MiB",), "memory.total": ("MiB",)}
_HEADER_NAME = re.compile(r"^\s*([a-z_.]+)\s*(\[[^\]]*\])?\s*$", re.IGNORECASE)


def _not_a_value(text: str) -> bool:
    """``[N/A]``, ``[Not Supported]`` and the other bracketed answers, or a bare ``N/A``."""
    return (text.startswith("[") and text.endswith("]")) or text.upper() in ("N/A", "")


def _number(text: str, field: str) -> float | None:
    value = text.strip()
    if _not_a_value(value):
        return None
    for unit in _UNITS.get(field, ()):
        if value.endswith(unit):
            value = value[: -len(unit)].strip()
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number >= 0 else None


def _header(parts: list[str]) -> list[str] | None:
    """The field names of a header line (``utilization.gpu [%]`` -> ``utilization.gpu``), or
    None when the line is no header."""
    names = []
    for part in parts:
        m = _HEADER_NAME.match(part)
        if m is None:
            return None
        names.append(m.group(1).lower())
    return names if "index" in names and "utilization.gpu" in names else None


def _row(parts: list[str], order: list[str]) -> GpuInfo | None:
    """One GPU from a row in ``order``; None when it is not a GPU row."""
    if len(parts) > len(order) and "name" in order:  # a name with a comma in it
        extra = len(parts) - len(order)
        at = order.index("name")
        parts = [*parts[:at], ", ".join(parts[at : at + extra + 1]), *parts[at + extra + 1 :]]
    if len(parts) != len(order):
        return None
    cell = dict(zip(order, parts, strict=True))
    index_text = cell.get("index", "").strip()
    if not index_text.isdigit():
        return None
    return GpuInfo(
        index=int(index_text),
        name="" if _not_a_value(cell.get("name", "").strip()) else cell["name"].strip(),
        utilization=_number(cell.get("utilization.gpu", ""), "utilization.gpu"),
        memory_used_mib=_number(cell.get("memory.used", ""), "memory.used"),
        memory_total_mib=_number(cell.get("memory.total", ""), "memory.total"),
    )


def parse_query_gpu(text: str) -> tuple[list[GpuInfo], list[str]]:
    """The GPUs in ``nvidia-smi --query-gpu`` CSV output, and the lines that were not GPU rows
    (warnings, messages), in order."""
    order = list(FIELDS)
    gpus: list[GpuInfo] = []
    other: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        names = _header(parts)
        if names is not None:
            order = names
            continue
        gpu = _row(parts, order)
        if gpu is None:
            other.append(line)
        else:
            gpus.append(gpu)
    return gpus, other


__all__ = ["FIELDS", "QUERY_ARGS", "parse_query_gpu"]
