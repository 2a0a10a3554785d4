"""Test modules live in folders without ``__init__.py`` (pytest's rootdir-relative "rootdir"
import mode imports each by its basename), so two modules of one name anywhere under tests/
stop the whole run at collection ("import file mismatch"). Caught here, in the fast suite."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(
        p.name
        for p in TESTS.rglob("test_*.py")
        if not (p.parent / "__init__.py").exists() and "__pycache__" not in p.parts
    )
    assert [name for name, n in names.items() if n > 1] == []
