"""Kubernetes resource quantities as exact Fractions, and back to canonical strings."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    """'500m' -> 1/2, '2Gi' -> 2147483648, 4 -> 4 (a resource.Quantity as an exact number).
    Raises ValueError on garbage."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"invalid quantity {value!r}")
    number = Fraction(m.group(1))
    if m.group(2) is not None:
        return number * Fraction(10) ** int(m.group(2))
    return number * _SUFFIXES[m.group(3) or ""]


def format_quantity(value: Fraction, resource: str = "") -> str:
    """A canonical string: '4', '500m', '1Gi' (binary units for memory-like resources)."""
    if value.denominator == 1:
        n = value.numerator
        if resource in ("memory", "ephemeral-storage") and n:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                unit = _SUFFIXES[suffix].numerator
                if n % unit == 0:
                    return f"{n // unit}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{-(-milli.numerator // milli.denominator)}m"  # round up like Kubernetes
