"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture
def published() -> Iterator[list[dict[str, Any]]]:
    """What the views display, through a capturing publisher on the real InteractiveShell."""
    shell = InteractiveShell.instance()
    saved = shell.display_pub
    shell.display_pub = CapturingDisplayPublisher()
    shell.display_pub.shell = shell
    try:
        yield shell.display_pub.outputs
    finally:
        shell.display_pub = saved
