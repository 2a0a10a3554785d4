"""The REST API: GET the sessions (long-poll on ``since``), GET one job by namespace, name and
uid, GET its GPUs' utilisation (asked only while a panel of it is visible), POST close. Every
handler is a Jupyter ``APIHandler`` behind ``@authenticated``; POST is XSRF-checked as every
Jupyter API request that changes something. Nothing returned carries a credential: the records
hold names, states, times, requests and GPU readings only."""

from __future__ import annotations

import asyncio
import json
import math

from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..engine import NotFoundError, SessionInventory, TrainJobError
from ..engine.inventory.schema import AnyJobRecord, GpuReport, Message, Snapshot
from .kernels_file import read_namespaces

MAX_WAIT = 25.0


def seconds_to_wait(text: str) -> float | None:
    """The ``wait`` query (seconds, at most MAX_WAIT; empty is 0); None when not a number of
    seconds (negative, NaN, infinite, not a number)."""
    try:
        seconds = float(text or 0)
    except ValueError:
        return None
    return min(MAX_WAIT, seconds) if math.isfinite(seconds) and seconds >= 0 else None


class _Base(APIHandler):
    @property
    def inventory(self) -> SessionInventory:
        return self.settings["trainjob_magics_inventory"]

    def fail(self, status: int, message: str) -> None:
        self.set_status(status)
        body: Message = {"message": message}
        self.finish(json.dumps(body))

    async def notebooks_by_kernel(self) -> dict[str, str]:
        """kernel id -> the path of the notebook (or console) its Jupyter session opened."""
        found: dict[str, str] = {}
        try:
            sessions = await self.session_manager.list_sessions()
        except Exception:
            return found
        for s in sessions:
            kernel = (s.get("kernel") or {}).get("id")
            if kernel:
                found[str(kernel)] = str(s.get("path") or s.get("name") or "")
        return found


class SessionsHandler(_Base):
    """``GET .../sessions[?since=VERSION&wait=SECONDS]``: every session of this user."""

    @web.authenticated
    async def get(self) -> None:
        inventory = self.inventory
        for ns in read_namespaces(self.serverapp.runtime_dir):
            inventory.add_namespace(ns)
        since = self.get_query_argument("since", "")
        asked = self.get_query_argument("wait", "")
        wait = seconds_to_wait(asked)
        if since and not since.isdigit():
            self.fail(400, f"since must be a snapshot version (0, 1, 2, ...), not {since[:40]!r}")
            return
        if wait is None:
            self.fail(400, f"wait must be a number of seconds (0 to 25), not {asked[:40]!r}")
            return
        if since and int(since) == inventory.version and wait > 0:
            await self.settings["trainjob_magics_waiters"].wait(wait)
        loop = asyncio.get_running_loop()
        snapshot: Snapshot = await loop.run_in_executor(None, inventory.snapshot)
        notebooks = await self.notebooks_by_kernel()
        for record in snapshot["sessions"]:
            record["notebook"] = notebooks.get(record.get("kernel") or "", "")
            record["kernelAlive"] = (record.get("kernel") or "") in notebooks
        self.finish(json.dumps(snapshot))


class JobHandler(_Base):
    """``GET .../sessions/NAMESPACE/NAME[?uid=UID]``: one job's live record (a panel's)."""

    @web.authenticated
    async def get(self, namespace: str, name: str) -> None:
        uid = self.get_query_argument("uid", "")
        loop = asyncio.get_running_loop()
        record: AnyJobRecord = await loop.run_in_executor(
            None, self.inventory.job, namespace, name, uid
        )
        record["version"] = self.inventory.version
        self.finish(json.dumps(record))


class GpusHandler(_Base):
    """``GET .../sessions/NAMESPACE/NAME/gpus[?uid=UID]``: each GPU's utilisation and memory in
    the job's pods (nvidia-smi, one exec per pod at most every 10 s whoever asks; never in a
    pod where one of our commands runs)."""

    @web.authenticated
    async def get(self, namespace: str, name: str) -> None:
        uid = self.get_query_argument("uid", "")
        loop = asyncio.get_running_loop()
        record: GpuReport = await loop.run_in_executor(
            None, self.inventory.gpus, namespace, name, uid
        )
        self.finish(json.dumps(record))


class CloseHandler(_Base):
    """``POST .../sessions/NAMESPACE/NAME/close``: delete the TrainJob and wait for its pods."""

    @web.authenticated
    async def post(self, namespace: str, name: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            line = await loop.run_in_executor(None, self.inventory.close, namespace, name)
        except NotFoundError:
            self.fail(404, f"no TrainJob {name} in namespace {namespace}")
            return
        except TrainJobError as exc:
            self.fail(400, str(exc).splitlines()[0])
            return
        reply: Message = {"message": line}
        self.finish(json.dumps(reply))
