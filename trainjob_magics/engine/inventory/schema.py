"""The REST API's records, typed once: what the server extension sends (``jupyter/handlers.py``)
and the lab extension reads. ``packages/labextension/src/types.ts`` mirrors these, one
interface per record (``TYPESCRIPT`` below); ``tests/unit/test_rest_types.py`` checks that its
fields, their optionality and their types are these, and that the records the inventory builds
have exactly these fields.

TypedDicts: the records stay the plain dicts ``json.dumps`` sends. A field is ``NotRequired``
only where some answer leaves it out. (No ``from __future__ import annotations`` here: with it,
Python 3.11 counts a ``NotRequired`` field as required.)"""

import sys

from ..result import GpuRecord, PodGpusRecord

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired, TypedDict

__all__ = [
    "TYPESCRIPT",
    "AnyJobRecord",
    "ForwardRow",
    "Gone",
    "GoneRecord",
    "GpuRecord",
    "GpuReport",
    "Holds",
    "JobRecord",
    "Message",
    "PodGpusRecord",
    "PodRow",
    "Queue",
    "SessionRecord",
    "Snapshot",
    "UnknownRecord",
]


class Holds(TypedDict):
    """What a job's pods hold (``holdings.Holding.as_dict``)."""

    gpu: float
    cpu: float
    memoryBytes: float
    heldSeconds: float
    gpuHours: float
    cpuHours: float
    idleSeconds: float | None
    text: str
    heldText: str  # ``text`` without its idle part (a page counts the idle time on)


class Queue(TypedDict):
    """The job's Kueue queue: its LocalQueue only, or what Kueue says while the job waits."""

    localQueue: str
    state: NotRequired[str]
    position: NotRequired[int | None]
    clusterQueuePosition: NotRequired[int | None]
    message: NotRequired[str]


class PodRow(TypedDict):
    name: str
    phase: str
    ready: bool


class ForwardRow(TypedDict):
    """An open port forward of the session's kernel (``records.forwards_of``)."""

    localPort: int
    port: int
    pod: str
    link: str  # as the kernel shows it: its local URL or this server's proxy path


class Gone(TypedDict):
    reason: str
    at: str | None


class JobRecord(TypedDict):
    """What every record of one job has, live, gone or not readable."""

    name: str
    namespace: str
    uid: str
    state: str
    pods: list[PodRow]
    podsReady: str
    version: NotRequired[int]  # the one-job GET: the snapshot version it was read at


class SessionRecord(JobRecord):
    """A TrainJob on the cluster (``records.session_record``)."""

    holds: Holds
    gone: None
    runtime: str
    kernel: str
    host: str
    user: str
    created: str | None
    ageSeconds: float | None
    lastCommand: str | None
    idleTimeout: float | None
    idleStopSeconds: float | None
    idleStopIn: float | None
    idleWarning: bool
    closing: str
    forwards: list[ForwardRow]
    queue: Queue | None
    notebook: NotRequired[str]  # the sessions GET: the notebook of the kernel's Jupyter session
    kernelAlive: NotRequired[bool]  # the sessions GET: that kernel has a Jupyter session here


class GoneRecord(JobRecord):
    """A job no longer on the cluster (``records.gone_record``): state ``Gone``, no pods."""

    holds: None
    gone: Gone


class UnknownRecord(JobRecord):
    """A job whose namespace is not read (yet): state ``Unknown``, ``problem`` says why."""

    holds: None
    gone: None
    problem: str


AnyJobRecord = SessionRecord | GoneRecord | UnknownRecord


class Snapshot(TypedDict):
    """``GET .../sessions``."""

    version: int
    sessions: list[SessionRecord]
    gone: list[GoneRecord]
    problems: list[str]
    namespaces: list[str]
    user: str | None


class GpuReport(TypedDict):
    """``GET .../sessions/NS/NAME/gpus``."""

    name: str
    namespace: str
    uid: str
    sampleEvery: float
    pods: list[PodGpusRecord]
    problem: NotRequired[str]


class Message(TypedDict):
    """``POST .../close``'s answer, and every error's body."""

    message: str


# The interface of packages/labextension/src/types.ts that mirrors each record. ``ISession`` is
# what a page reads from either GET of a job: any of the three job records, so a field is
# optional there unless every one of them always has it.
TYPESCRIPT: dict[str, tuple[type, ...]] = {
    "IHolds": (Holds,),
    "IQueue": (Queue,),
    "IPodRow": (PodRow,),
    "IForwardRow": (ForwardRow,),
    "IGone": (Gone,),
    "ISession": (SessionRecord, GoneRecord, UnknownRecord),
    "ISnapshot": (Snapshot,),
    "IGpu": (GpuRecord,),
    "IPodGpus": (PodGpusRecord,),
    "IGpuReport": (GpuReport,),
    "IMessage": (Message,),
}
