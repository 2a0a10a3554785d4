"""The pod subresources pods/log, pods/exec, pods/portforward and pods/eviction."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ..core.apierror import ApiError
from ..core.resources import PODS
from ..core.store import now_rfc3339
from ..kubelet import exec_ws, portforward_spdy, portforward_ws
from ..kubelet.pod_logs import follow_log, read_log
from .api_request import USER_KEY, Target, query_bool, query_int
from .api_response import json_response
from .auth import Authorizer


class PodEndpoints(Authorizer):
    """pods/log, pods/exec, pods/portforward and pods/eviction methods of the ApiServer (a
    mixin)."""

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
        stopped = sandbox is None or sandbox.stopped
        if translated and has_host and (phase != "Running" or stopped):
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
        if phase != "Running" or sandbox is None or sandbox.stopped:
            # a terminating pod whose container was stopped: kubelet finds no container
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
            cut_after_bytes=self.ctx.faults.exec_cut_after(t.name or ""),
        )

    async def _portforward(self, request: web.Request, t: Target) -> web.StreamResponse:
        """GET/POST pods/portforward?ports=P[,P2...], checked in kube-apiserver's order, then
        kubelet's (``portforward_ws``): the WebSocket GET needs get (the request's verb) and
        create (``PortForwardREST.Connect``, AuthorizePodWebsocketUpgradeCreatePermission,
        pkg/registry/core/pod/rest/subresources.go), a POST create; the ``ports`` options
        (400 Status); the pod (404) and its node (``PortForwardLocation``,
        pkg/registry/core/pod/strategy.go); an upgrade (util/proxy upgradeaware.go); then what
        kubelet refuses (cri-streaming pkg/streaming/portforward/websocket.go ``NewV4Options``:
        a text/plain 400, which the apiserver's proxy passes on as it is)."""
        for verb in ("get", "create") if request.method == "GET" else ("create",):
            self._authorize(request, verb, t)
        try:
            ports = portforward_ws.apiserver_ports(request.query.getall("ports", []))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        name = t.name or ""
        pod = self.ctx.store.get(PODS, t.namespace, name)
        if not (pod.get("spec") or {}).get("nodeName"):
            raise ApiError(400, f"pod {name} does not have a host assigned")
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise ApiError(400, "Upgrade request required")
        offered = portforward_ws.offered_protocols(request)
        tunnel = self.ctx.faults.portforward_tunnel and portforward_spdy.wants_tunnel(offered)
        refused = None if tunnel else portforward_ws.kubelet_port_error(ports)
        if refused is not None:
            return web.Response(status=400, text=refused, content_type="text/plain")
        phase = (pod.get("status") or {}).get("phase")
        sandbox = self.ctx.sandbox(t.namespace or "", name)
        if phase != "Running" or sandbox is None or sandbox.stopped:
            # kubectl's own refusal (pkg/cmd/portforward/portforward.go), as for exec; a
            # kubelet finds no running sandbox and answers 404/500 ``pod not found``.
            raise ApiError(
                400,
                "unable to forward port because pod is not running. "
                f"Current status={phase or 'Pending'}",
            )
        if tunnel:  # kube-apiserver 1.30+ (PortForwardWebsockets): SPDY in the WebSocket
            return await portforward_spdy.handle_tunnel(
                request,
                f"{t.namespace}/{name}",
                offered,
                self.ctx.stopping,
                lambda: sandbox.stopped or self.ctx.sandbox(t.namespace or "", name) is not sandbox,
            )
        return await portforward_ws.handle_portforward(
            request, f"{t.namespace}/{name}", ports, self.ctx.stopping
        )

    async def _evict(self, request: web.Request, t: Target) -> web.Response:
        """POST pods/eviction (policy/v1 Eviction), as kubernetes
        pkg/registry/core/pod/storage/eviction.go: no PodDisruptionBudget exists here, so the
        eviction is allowed; the pod gets the ``DisruptionTarget`` condition
        (``EvictionByEvictionAPI``, ``Eviction API: evicting``) and is deleted gracefully with
        the Eviction's deleteOptions; the answer is a 201 ``Success`` Status."""
        self._authorize(request, "create", t)
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            raise ApiError(400, "the body of the request was not valid JSON") from None
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise ApiError(400, "the body of the request must be a policy/v1 Eviction")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise ApiError(400, "name in URL does not match name in Eviction object")
        store, ns, name = self.ctx.store, t.namespace, t.name or ""
        pod = store.get(PODS, ns, name)
        if not pod["metadata"].get("deletionTimestamp"):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):

                def disrupt(p: dict[str, Any]) -> None:
                    conds = p.setdefault("status", {}).setdefault("conditions", [])
                    conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
                    conds.append(
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "EvictionByEvictionAPI",
                            "message": "Eviction API: evicting",
                            "lastProbeTime": None,
                            "lastTransitionTime": now_rfc3339(),
                        }
                    )

                store.mutate(PODS, ns, name, disrupt)
            options = body.get("deleteOptions") or {}
            grace = options.get("gracePeriodSeconds")
            if grace is None:
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            if int(grace) == 0:
                store.remove(PODS, ns, name)
            else:
                store.mark_deleting(PODS, ns, name, int(grace))
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return json_response({**status, "code": 201}, status=201)
