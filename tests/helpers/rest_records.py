"""Checking a REST record against its TypedDict (trainjob_magics/engine/inventory/schema.py):
every required field there, no field the type does not declare, each value of its type."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any, Union, get_args, get_origin

if sys.version_info >= (3, 11):
    from typing import get_type_hints, is_typeddict
else:  # pragma: no cover - Python 3.10
    from typing_extensions import get_type_hints, is_typeddict


def fields(typed: Any) -> dict[str, tuple[bool, Any]]:
    """A TypedDict's fields: name -> (required, type without NotRequired)."""
    hints = get_type_hints(typed)
    required = typed.__required_keys__
    return {name: (name in required, tp) for name, tp in hints.items()}


def problems(value: Any, tp: Any, where: str = "record") -> list[str]:
    """What in ``value`` is not of type ``tp`` (a TypedDict, list[...], a union, a scalar)."""
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object ({tp.__name__})"]
        found = []
        declared = fields(tp)
        for name, (required, field_tp) in declared.items():
            if name in value:
                found += problems(value[name], field_tp, f"{where}.{name}")
            elif required:
                found.append(f"{where}: no {name!r} ({tp.__name__} requires it)")
        found += [
            f"{where}: {name!r} is not a field of {tp.__name__}"
            for name in value
            if name not in declared
        ]
        return found
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        tried = [problems(value, member, where) for member in get_args(tp)]
        if any(not p for p in tried):
            return []
        # the member that came closest says what is wrong
        return min(tried, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        (item,) = get_args(tp)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{where}[{i}]")]
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r}, not null"]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{where}: {value!r}, not a boolean"]
    if tp in (int, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if tp is int:
            ok = ok and float(value).is_integer()
        return [] if ok else [f"{where}: {value!r}, not a {tp.__name__}"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{where}: {value!r}, not a string"]
    if tp is typing.Any:
        return []
    raise TypeError(f"{where}: no check for {tp!r}")
