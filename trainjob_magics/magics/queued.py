"""A TrainJob whose ``%trainjob_connect`` timed out in its Kueue queue.

It is left in place by design (it keeps its place in the queue), but this kernel still owns it:
the registry holds a :class:`QueuedJob` in the session's place, so ``%trainjob_sessions``,
``%trainjob_close`` (by alias, by name, ``--all``) and the kernel's exit cover it, and
``%trainjob_connect --attach NAME`` (or re-running the connect line) waits for it again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from ..engine import JobStatus, NotFoundError
from .failures import TrainJobUsageError
from .host import MagicsHost


class StillQueuedError(TrainJobUsageError, AttributeError):
    """A session method asked of a TrainJob that is still queued (one line; an
    AttributeError too, so ``getattr(session, x, default)`` keeps working)."""


def queued_message(exc: Any, name: str, brief: bool = False) -> str:
    """The engine's timeout line with the magics to run next (never the Python calls);
    ``brief``: without the queue position and Kueue's message, which the status panel above
    the error shows already."""
    text = str(exc).split("; it keeps its place", 1)[0]
    if brief:
        text = text.split(" (", 1)[0]
    return (
        f"{text}; it keeps its place in the queue: wait for it with "
        f"%trainjob_connect --attach {name}, or delete it with %trainjob_close {name}"
    )


@dataclass
class QueuedJob:
    """Stands for a session until its TrainJob is admitted and attached."""

    host: MagicsHost
    name: str
    namespace: str | None  # None: the kubeconfig's namespace
    runtime: str
    where: dict[str, Any]  # namespace, context, config_file of the connect
    closed: bool = False

    def status(self) -> JobStatus:
        """The TrainJob's state from the cluster, ``Queued`` while Kueue holds it."""
        state, message = (
            "Queued",
            f"connect timed out in the queue; %trainjob_connect --attach {self.name}",
        )
        try:
            jobs, _ = self.host.engine.find_trainjobs(
                [self.namespace],
                context=self.where["context"],
                config_file=self.where["config_file"],
            )
            row = next((j for j in jobs if j.name == self.name), None)
        except Exception:
            row = None
        else:
            if row is None:
                state, message = "Deleted", "the TrainJob no longer exists"
            elif row.state in ("Complete", "Failed", "Deleting"):
                state, message = row.state, f"TrainJob {self.name} is {row.state.lower()}"
            elif row.state not in ("Suspended", "Pending"):
                message = f"admitted ({row.state}): %trainjob_connect --attach {self.name}"
        return JobStatus(self.name, self.namespace or "", self.runtime, state, message)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise StillQueuedError(
            f"TrainJob {self.name} is still waiting in its queue, so it cannot run commands "
            f"yet: wait for it with %trainjob_connect --attach {self.name}, or delete it with "
            f"%trainjob_close {self.name}"
        )

    def close(self, timeout: float = 180.0) -> None:
        """Delete the TrainJob (nothing to do when it is gone already)."""
        if self.closed:
            return
        with contextlib.suppress(NotFoundError):
            self.host.engine.close_trainjob(
                self.name,
                self.namespace,
                context=self.where["context"],
                config_file=self.where["config_file"],
                timeout=timeout,
            )
        self.closed = True


__all__ = ["QueuedJob", "StillQueuedError", "queued_message"]
