"""The pod subresources pods/log and pods/exec."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..core.apierror import ApiError
from ..core.resources import PODS
from ..kubelet import exec_ws
from ..kubelet.pod_logs import follow_log, read_log
from .api_request import USER_KEY, Target, query_bool, query_int
from .auth import Authorizer


class PodEndpoints(Authorizer):
    """pods/log and pods/exec methods of the ApiServer (a mixin)."""

    def _container(self, pod: dict[str, Any], requested: str | None) -> str:
        name = pod["metadata"]["name"]
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if not requested:
            if len(names) == 1:
                return names[0]
            raise ApiError(
                400,
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        if requested not in names:
            raise ApiError(400, f"container {requested} is not valid for pod {name}")
        return requested

    async def _log(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        pod = self.ctx.store.get(PODS, t.namespace, t.name or "")
        container = self._container(pod, q.get("container"))
        if query_bool(q.get("previous")):
            raise ApiError(
                400,
                f'previous terminated container "{container}" in pod "{t.name}" not found',
            )
        sandbox = self.ctx.sandbox(t.namespace or "", t.name or "")
        status = pod.get("status") or {}
        waiting = next(
            (
                (cs.get("state") or {}).get("waiting")
                for cs in status.get("containerStatuses") or []
                if (cs.get("state") or {}).get("waiting")
            ),
            None,
        )
        if sandbox is None or status.get("phase") == "Pending":
            reason = (waiting or {}).get("reason", "ContainerCreating")
            raise ApiError(
                400,
                f'container "{container}" in pod "{t.name}" is waiting to start: {reason}',
            )
        timestamps = query_bool(q.get("timestamps"))
        data = read_log(
            sandbox.log_path,
            query_int(q.get("tailLines"), "tailLines"),
            query_int(q.get("limitBytes"), "limitBytes"),
            timestamps,
        )
        if not query_bool(q.get("follow")):
            return web.Response(body=data, content_type="text/plain")
        ns, name = t.namespace, t.name or ""

        def running() -> bool:
            p = self.ctx.store.try_get(PODS, ns, name)
            return p is not None and (p.get("status") or {}).get("phase") == "Running"

        return await follow_log(
            request, sandbox.log_path, data, running, self.ctx.stopping, timestamps
        )

    async def _exec(self, request: web.Request, t: Target) -> web.StreamResponse:
        _, _user = request[USER_KEY]
        for verb in ("create", "get"):
            self._authorize(request, verb, t)
        q = request.query
        pod = self.ctx.store.get(PODS, t.namespace, t.name or "")
        container = self._container(pod, q.get("container"))
        phase = (pod.get("status") or {}).get("phase")
        sandbox = self.ctx.sandbox(t.namespace or "", t.name or "")
        not_found = f'unable to upgrade connection: container not found ("{container}")'
        translated = self.ctx.exec_errors == "translated" and exec_ws.translates_errors(request)
        has_host = bool((pod.get("spec") or {}).get("nodeName"))
        if translated and has_host and (phase != "Running" or sandbox is None):
            # A 1.30+ apiserver does not look at the phase (completed pods included): it
            # upgrades the WebSocket, kubelet finds no running container, and the failure
            # arrives on channel 3.
            return await exec_ws.handle_upstream_error(
                request,
                not_found,
                stdin=query_bool(q.get("stdin")),
                stdout=query_bool(q.get("stdout")),
                stderr=query_bool(q.get("stderr")),
            )
        if phase in ("Succeeded", "Failed"):
            raise ApiError(
                400, f"cannot exec into a container in a completed pod; current phase is {phase}"
            )
        if not has_host:
            raise ApiError(400, f"pod {t.name} does not have a host assigned")
        if phase != "Running" or sandbox is None:
            raise ApiError(400, not_found)
        argv = q.getall("command", [])
        if not argv:
            raise ApiError(400, "you must specify at least 1 command")
        return await exec_ws.handle_exec(
            request,
            sandbox,
            list(argv),
            stdin=query_bool(q.get("stdin")),
            stdout=query_bool(q.get("stdout")),
            stderr=query_bool(q.get("stderr")),
            tty=query_bool(q.get("tty")),
            drop_after_bytes=self.ctx.faults.exec_drop_after(t.name or ""),
        )
