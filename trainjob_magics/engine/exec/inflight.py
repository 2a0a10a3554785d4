"""The commands a session has running in its pods: one registry, owned by the session.

The session creates one :class:`InFlight` and hands it to its
:class:`~.commands.CommandRunner`, which adds a command when it starts and removes it when it
ends (or when an interrupt stopped it).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ..result import ExecResult

Snapshot = Callable[[], ExecResult]  # the output a running command has sent so far


@dataclass
class InFlightCommand:
    """One running command: where it runs, and how to read its output so far."""

    pod: str
    container: str | None
    exec_id: str | None  # its pid-file id; None when it is not wrapped (cannot be stopped)
    snapshot: Snapshot | None = None
    result: ExecResult | None = None  # set once it ended
    stop_requested: bool = False  # an interrupt or timeout of ours is stopping it

    def output_so_far(self) -> ExecResult:
        """Its result once it ended, else what it has sent so far."""
        if self.result is not None:
            return self.result
        if self.snapshot is not None:
            return self.snapshot()
        return ExecResult("", "", None, 0.0, pod=self.pod)


class InFlight(dict[str, InFlightCommand]):
    """key -> :class:`InFlightCommand` of every running command (a dict, so ``== {}`` reads as
    "nothing is running"); :meth:`add` and :meth:`remove` are thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._keys = itertools.count()

    def add(self, command: InFlightCommand) -> str:
        with self._lock:
            key = command.exec_id or f"unwrapped-{next(self._keys)}"
            self[key] = command
            return key

    def remove(self, key: str) -> None:
        with self._lock:
            self.pop(key, None)

    def select(self, keys: Collection[str] | None = None) -> list[tuple[str, InFlightCommand]]:
        """The running commands (those with these keys), oldest first."""
        with self._lock:
            return [(k, c) for k, c in self.items() if keys is None or k in keys]


__all__ = ["InFlight", "InFlightCommand", "Snapshot"]
