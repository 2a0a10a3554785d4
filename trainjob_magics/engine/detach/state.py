"""What a detached run is: its handle (:class:`DetachedRun`) and what was read of it
(:class:`DetachedState`), and reading the pod-side state script's output."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field


def _clock(epoch: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch)) if epoch else "?"


def _took(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60}h{minutes % 60:02d}"


@dataclass(frozen=True)
class DetachedRun:
    """The handle of a detached run (what ``session.detach`` returns and ``_trainjob`` holds)."""

    trainjob: str
    namespace: str
    run: int
    command: str
    pods: tuple[str, ...]
    started: float  # epoch seconds

    def line(self) -> str:
        """``Detached run 1 in TrainJob T (pods P, Q)``."""
        pods = "pod" if len(self.pods) == 1 else "pods"
        where = ", ".join(self.pods)
        return f"Detached run {self.run} in TrainJob {self.trainjob} ({pods} {where})"

    def __str__(self) -> str:
        return self.line()


@dataclass(frozen=True)
class DetachedState:
    """A detached run as read from its pods (running ones through exec, ended ones from their
    container status and log).

    ``exit_codes``: pod -> exit code, None while the run lives there. ``exit_code``: the
    trainer pod's (the run's), None while it runs. ``ended_by``: when the pods went away without
    an exit code (deleted, preempted), what the job says about it.
    """

    trainjob: str
    run: int
    command: str
    started: float | None
    pod: str
    exit_codes: Mapping[str, int | None] = field(default_factory=dict)
    tail: str = ""
    ended_by: str = ""

    @property
    def live(self) -> bool:
        """True while the run is alive in some pod (and nothing ended it from outside)."""
        return not self.ended_by and any(c is None for c in self.exit_codes.values())

    @property
    def exit_code(self) -> int | None:
        """The run's exit code (the trainer pod's); None while it runs or when it was ended
        from outside."""
        return self.exit_codes.get(self.pod)

    def summary(self) -> str:
        """One line: what runs, since when, and how it ended."""
        since = f"started {_clock(self.started)}"
        if self.started:
            since += f" ({_took(time.time() - self.started)} ago)"
        if self.live:
            how = "running"
        elif self.ended_by:
            how = f"ended: {self.ended_by}"
        else:
            codes = {c for c in self.exit_codes.values() if c is not None}
            how = f"ended with exit code {self.exit_code}"
            if len(codes) > 1:
                how += " (" + ", ".join(f"{p}: {c}" for p, c in self.exit_codes.items()) + ")"
        return (
            f"Detached run {self.run} in TrainJob {self.trainjob}: {how} · {since} · "
            f"command: {self.command.strip() or '?'}"
        )


@dataclass
class PodReading:
    """One pod's answer to the state script."""

    run: int = 0
    started: float | None = None
    exit_code: int | None = None
    alive: bool = True
    command: str = ""
    tail: str = ""


def parse_reading(text: str, separator: str) -> PodReading:
    """The state script's output (``run N``, ``started``, ``exit`` or ``alive``; then the
    command and the tail after separator lines)."""
    reading = PodReading()
    head, _, rest = text.partition(f"{separator} command\n")
    command, _, tail = rest.partition(f"{separator} tail\n")
    reading.command, reading.tail = command.rstrip("\n"), tail
    for line in head.splitlines():
        key, _, value = line.partition(" ")
        value = value.strip()
        if key == "run" and value.isdigit():
            reading.run = int(value)
        elif key == "started" and value.isdigit():
            reading.started = float(value)
        elif key == "exit":
            reading.exit_code = int(value) if value.lstrip("-").isdigit() else 1
            reading.alive = False
        elif key == "alive":
            reading.alive = value == "1"
    return reading


__all__ = ["DetachedRun", "DetachedState", "PodReading", "parse_reading"]
