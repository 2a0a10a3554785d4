"""What the session's Python methods do: run code, push and pull values, reset.

The session owns one :class:`PythonCalls` and hands it its ``start`` (the shell cells' run
path) and its target resolution; this module turns calls into :class:`~.runs.PythonRun`\\ s.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError, RemotePythonError
from ..exec.client import ExecClient
from ..exec.fanout import OnPodOutput
from ..result import PodRef
from ..validation import validate_timeout
from .interpreters import DEFAULT_INTERPRETER, Interpreters, Target
from .results import MultiPythonResult, PythonResult
from .runs import OnPythonDone, PythonRun, Start

MAX_VALUE_BYTES = 64 << 20  # pickled bytes per push or pull
PICKLE_PROTOCOL = 4  # read by every Python 3.4+, whatever the pod runs

Targets = Callable[[Any], tuple[list[PodRef], bool]]
TrainerContainer = Callable[[], str]


def check_names(names: Sequence[str], what: str) -> list[str]:
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()]
    if bad:
        raise InvalidInputError(f"{what} takes Python variable names, got {bad[0]!r}")
    if not names:
        raise InvalidInputError(f"{what} needs at least one variable name")
    return list(names)


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def pickled(values: Mapping[str, Any], limit: int) -> dict[str, str]:
    """name -> base64 pickle; one clear error naming a value that cannot go."""
    out: dict[str, str] = {}
    total = 0
    for name, value in values.items():
        try:
            blob = pickle.dumps(value, protocol=PICKLE_PROTOCOL)
        except Exception as exc:
            raise InvalidInputError(
                f"cannot push {name!r}: a {type(value).__name__} cannot be pickled "
                f"({type(exc).__name__}: {exc}); push plain data (numbers, lists, dicts, "
                "arrays) or build the object in a --python cell"
            ) from None
        total += len(blob)
        if total > limit:
            raise InvalidInputError(
                f"cannot push {name!r}: the values are {mib(total)} pickled, over the "
                f"{mib(limit)} limit; upload big data as a file (%trainjob_upload) instead"
            )
        out[name] = base64.b64encode(blob).decode("ascii")
    return out


def unpickled(name: str, blob: str, pod: str) -> Any:
    try:
        return pickle.loads(base64.b64decode(blob))
    except Exception as exc:
        raise InvalidInputError(
            f"pulled {name!r} from pod {pod} but cannot unpickle it here "
            f"({type(exc).__name__}: {exc}); pull plain data instead (e.g. x.tolist())"
        ) from None


def raise_failed(result: PythonResult | MultiPythonResult, what: str) -> None:
    """A push or pull that failed in an interpreter: one line naming the pod."""
    items = result.results.items() if isinstance(result, MultiPythonResult) else []
    errors = dict(result.errors) if isinstance(result, MultiPythonResult) else {}
    if isinstance(result, PythonResult):
        items = [(result.pod, result)]
    for pod, error in errors.items():
        raise RemotePythonError(f"{what} in pod {pod} failed: {error}", result=result)
    for pod, one in items:
        if one.error is not None:
            raise RemotePythonError(
                f"{what} in pod {pod} failed: {one.error.line()}", result=result
            )


class PythonCalls:
    """The session's Python interpreters, behind the session's methods."""

    def __init__(
        self,
        client: ExecClient,
        namespace: str,
        start: Start,
        targets: Targets,
        trainer_container: TrainerContainer,
    ) -> None:
        self.interpreters = Interpreters(client, namespace)
        self.interpreter = DEFAULT_INTERPRETER
        self._start = start
        self._targets = targets
        self._trainer_container = trainer_container

    def targets(
        self, pods: Any, container: str | None, interpreter: str | None
    ) -> tuple[list[Target], bool]:
        python = interpreter or self.interpreter
        if not isinstance(python, str) or not python.strip() or "\0" in python or "\n" in python:
            raise InvalidInputError(
                f"the Python interpreter must be a name or path, got {python!r}"
            )
        refs, multi = self._targets(pods)
        return [
            Target(
                ref,
                container
                or (self._trainer_container() if ref.role == "trainer" else ref.container),
                python.strip(),
            )
            for ref in refs
        ], multi

    def start(
        self,
        request: dict[str, Any],
        *,
        pods: Any = None,
        container: str | None = None,
        on_output: OnPodOutput | None = None,
        on_done: OnPythonDone | None = None,
        timeout: float | None = None,
        interpreter: str | None = None,
    ) -> PythonRun:
        timeout = validate_timeout(timeout)
        targets, multi = self.targets(pods, container, interpreter)
        return PythonRun(
            self.interpreters,
            self._start,
            targets,
            request,
            multi=multi,
            container=container,
            on_output=on_output,
            on_done=on_done,
            timeout=timeout,
        ).start()

    @staticmethod
    def wait(run: PythonRun) -> PythonResult | MultiPythonResult:
        """``run.result()``; Ctrl-C interrupts the code and raises the interrupt's error."""
        try:
            return run.result()
        except KeyboardInterrupt:
            raise run.interrupt() from None

    def push(
        self,
        values: Mapping[str, Any],
        *,
        pods: Any = None,
        timeout: float | None = None,
        interpreter: str | None = None,
        max_bytes: int = MAX_VALUE_BYTES,
    ) -> list[str]:
        check_names(list(values), "push")
        request = {"op": "push", "values": pickled(values, max_bytes)}
        run = self.start(request, pods=pods, timeout=timeout, interpreter=interpreter)
        result = self.wait(run)
        raise_failed(result, "push")
        return [t.pod for t in run.targets]

    def pull(
        self,
        names: Sequence[str],
        *,
        pods: Any = None,
        timeout: float | None = None,
        interpreter: str | None = None,
        max_bytes: int = MAX_VALUE_BYTES,
    ) -> Any:
        names = check_names(names, "pull")
        request = {"op": "pull", "names": names, "max_bytes": int(max_bytes)}
        run = self.start(request, pods=pods, timeout=timeout, interpreter=interpreter)
        result = self.wait(run)
        raise_failed(result, "pull")

        def values_of(one: PythonResult) -> Any:
            got = [unpickled(n, one.values[n], one.pod) for n in names]
            return got[0] if len(got) == 1 else tuple(got)

        if isinstance(result, MultiPythonResult):
            return {pod: values_of(one) for pod, one in result.items()}
        return values_of(result)

    def reset(self, *, pods: Any = None, interpreter: str | None = None) -> list[str]:
        """Kill the interpreters and start new ones; the pods reset."""
        targets, _multi = self.targets(pods, None, interpreter)
        self.interpreters.kill(targets)
        self.interpreters.boot(targets)
        return [t.pod for t in targets]


__all__ = ["MAX_VALUE_BYTES", "PythonCalls"]
