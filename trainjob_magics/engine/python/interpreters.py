"""A session's Python interpreters: one agent per pod and interpreter name, started on first
use, interrupted, killed, reset. Each action is one short exec of its own (never wrapped, so no
stopper of a cell can reach the agent).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ApiServerError, PythonNotFoundError, TrainJobError
from ..exec.client import ExecClient
from ..exec.pool import run_each
from ..result import ExecResult, PodRef
from .scripts import NOT_FOUND, agent_name, boot_argv, interrupt_argv, kill_argv

BOOT_TIMEOUT = 60.0
SIGNAL_TIMEOUT = 20.0
KILL_TIMEOUT = 30.0
DEFAULT_INTERPRETER = "python3"


@dataclass(frozen=True)
class Target:
    """Where one interpreter runs: the pod, its container, the interpreter and its agent."""

    ref: PodRef
    container: str | None
    python: str

    @property
    def pod(self) -> str:
        return self.ref.name

    @property
    def agent(self) -> str:
        return agent_name(self.python)

    def where(self) -> str:
        label = f" [{self.ref.label}]" if self.ref.role != "trainer" else ""
        return f"pod {self.pod}{label}"


def missing_python(target: Target) -> PythonNotFoundError:
    return PythonNotFoundError(
        f"%%trainjob --python needs Python 3.8+ in the pod, and {target.where()} has no "
        f"interpreter {target.python!r} on its PATH; set "
        "TrainJobMagics.python (interpreter=... in the engine) to one the image has, e.g. "
        "/usr/bin/python3, or use an image with Python 3.8+"
    )


def is_missing_python(result: ExecResult) -> bool:
    return result.returncode == 127 and NOT_FOUND in result.stderr


class Interpreters:
    """The agents a session started, by (pod, agent name) -> the interpreter's instance id."""

    def __init__(self, client: ExecClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._known: dict[tuple[str, str], str] = {}
        self.slow: set[str] = set()  # pods where only the Python client works (no /proc pipes)
        self._lock = threading.Lock()

    def _exec(self, target: Target, argv: list[str], timeout: float) -> ExecResult:
        return self.client.run(
            self.namespace, target.pod, argv, container=target.container, timeout=timeout
        )

    # -- what we know --------------------------------------------------------------------
    def known(self, target: Target) -> str | None:
        with self._lock:
            return self._known.get((target.pod, target.agent))

    def saw(self, target: Target, instance: str) -> str:
        """Record the instance a result came from; a note when it is not the one we knew."""
        if not instance:
            return ""
        with self._lock:
            before = self._known.get((target.pod, target.agent))
            self._known[(target.pod, target.agent)] = instance
        if before and before != instance:
            return (
                f"note: the Python interpreter in {target.where()} is a new one "
                "(names defined before are gone)"
            )
        return ""

    def forget(self, target: Target) -> None:
        with self._lock:
            self._known.pop((target.pod, target.agent), None)

    def pods_with_agents(self) -> list[str]:
        with self._lock:
            return sorted({pod for pod, _agent in self._known})

    # -- actions -------------------------------------------------------------------------
    def boot(self, targets: Sequence[Target]) -> dict[str, str]:
        """Start the agents not running yet (all at once); pod -> note. Raises the first
        failure (a missing interpreter first of all)."""
        notes: dict[str, str] = {}
        errors: dict[str, TrainJobError] = {}

        def one(target: Target) -> None:
            try:
                notes[target.pod] = self._boot_one(target)
            except TrainJobError as exc:
                errors[target.pod] = exc

        run_each(one, list(targets), name="trainjob-python-boot")
        if errors:
            first = next(
                (e for e in errors.values() if isinstance(e, PythonNotFoundError)),
                next(iter(errors.values())),
            )
            raise first
        return notes

    def _boot_one(self, target: Target) -> str:
        had = self.known(target)
        result = self._exec(target, boot_argv(target.python, target.agent), BOOT_TIMEOUT)
        if is_missing_python(result):
            raise missing_python(target)
        lines = result.stdout.strip().splitlines()
        try:
            said = json.loads(lines[-1]) if lines else {}
        except ValueError:
            said = {}
        status = said.get("status") if isinstance(said, dict) else None
        if status == "running":
            return ""
        if status == "started":
            note = self.saw(target, str(said.get("instance", "")))
            if had and not note:
                note = (
                    f"note: the Python interpreter in {target.where()} was gone (names defined "
                    "before are lost); a new one started"
                )
            return note
        why = said.get("message") if isinstance(said, dict) else ""
        why = (why or result.stderr or result.stdout).strip().splitlines()
        last = why[-1] if why else f"exit code {result.returncode}"
        raise ApiServerError(
            f"the Python interpreter {target.python!r} could not start in {target.where()}: {last}"
        )

    def interrupt(self, targets: Sequence[Target]) -> None:
        """SIGINT to each agent: KeyboardInterrupt in the code it runs."""
        self._each(targets, lambda t: self._exec(t, interrupt_argv(t.agent), SIGNAL_TIMEOUT))

    def kill(self, targets: Sequence[Target]) -> None:
        """Stop each agent's whole process tree (its state is lost)."""

        def one(target: Target) -> None:
            self.forget(target)
            self._exec(target, kill_argv(target.agent), KILL_TIMEOUT)

        self._each(targets, one)

    @staticmethod
    def _each(targets: Sequence[Target], fn: Callable[[Target], object]) -> None:
        def safe(target: Target) -> None:
            with contextlib.suppress(TrainJobError):  # the pod is gone: nothing to signal
                fn(target)

        run_each(safe, list(targets), name="trainjob-python-signal")


__all__ = ["DEFAULT_INTERPRETER", "Interpreters", "Target", "is_missing_python", "missing_python"]
