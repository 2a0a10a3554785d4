"""Record what the engine and the user observe on one cluster during a scenario: the objects
(TrainJob after the webhooks, JobSet, Jobs, pods), the Workload, Events, ``kubectl get``
columns, the visibility API, pod phase/container state transitions (a watch), and the
engine's JobStatus/QueueStatus and error lines."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.differential.normalise import Normaliser
from tests.differential.targets import Target

JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
KUEUE = "kueue.x-k8s.io"


class PodWatch:
    """``kubectl get pods --watch -o json`` in a namespace: each pod's distinct
    (phase, container state) sequence, in the order seen."""

    def __init__(self, target: Target, namespace: str) -> None:
        self.seen: dict[str, list[str]] = {}
        self.nodes: set[str] = set()
        self._proc = subprocess.Popen(
            [
                "kubectl",
                "--kubeconfig",
                target.admin_kubeconfig,
                "get",
                "pods",
                "-n",
                namespace,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        buf = ""
        depth = 0
        for line in self._proc.stdout:
            buf += line
            depth += line.count("{") - line.count("}")
            if depth == 0 and buf.strip():
                try:
                    ev = json.loads(buf)
                except ValueError:
                    buf = ""
                    continue
                buf = ""
                self._event(ev)

    def _event(self, ev: dict[str, Any]) -> None:
        pod = ev.get("object") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        if (pod.get("spec") or {}).get("nodeName"):
            self.nodes.add(pod["spec"]["nodeName"])
        status = pod.get("status") or {}
        states = []
        for cs in status.get("containerStatuses") or []:
            state = next(iter(cs.get("state") or {"none": {}}), "none")
            reason = ((cs.get("state") or {}).get(state) or {}).get("reason", "")
            states.append(f"{cs.get('name')}:{state}{'(' + reason + ')' if reason else ''}")
        marker = "deleting," if (pod.get("metadata") or {}).get("deletionTimestamp") else ""
        entry = f"{ev.get('type', '?')[0]}:{marker}{status.get('phase', '?')}[{' '.join(states)}]"
        if ev.get("type") == "DELETED":
            entry = "DELETED"
        seq = self.seen.setdefault(name, [])
        if not seq or seq[-1] != entry:
            seq.append(entry)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._thread.join(5)


class Recorder:
    """One scenario's observations on one cluster, already normalised."""

    def __init__(self, target: Target, scenario: str) -> None:
        self.target = target
        self.scenario = scenario
        self.norm = Normaliser()
        self.data: dict[str, Any] = {}
        self._jobs: list[str] = []
        self.statuses: dict[str, list[str]] = {}
        self.errors: dict[str, str] = {}
        self.watches: dict[str, PodWatch] = {}

    # -- names -----------------------------------------------------------------------------

    def job(self, actual: str) -> str:
        """Register a TrainJob name; it reads ``<job>``, ``<job2>``... in the recording."""
        if actual not in self._jobs:
            self._jobs.append(actual)
            n = len(self._jobs)
            self.norm.name(actual, "<job>" if n == 1 else f"<job{n}>")
        return actual

    def watch(self, namespace: str) -> None:
        if namespace not in self.watches:
            self.watches[namespace] = PodWatch(self.target, namespace)

    # -- the engine ------------------------------------------------------------------------

    def on_status(self, label: str) -> Callable[[Any], None]:
        """An ``on_status`` callback recording the distinct (state, queue state/reason)."""
        seq = self.statuses.setdefault(label, [])

        def record(st: Any) -> None:
            q = st.queue
            entry = st.state + (f"/{q.state}" if q is not None else "")
            if not seq or seq[-1] != entry:
                seq.append(entry)

        return record

    def error(self, label: str, exc: BaseException | None) -> None:
        """The one line the user reads (type and text), or "none"."""
        self.errors[label] = "none" if exc is None else f"{type(exc).__name__}: {exc}"

    def job_status(self, label: str, status: Any) -> None:
        """The engine's JobStatus and QueueStatus (what ``%trainjob_status`` shows)."""
        q = status.queue
        data: dict[str, Any] = {
            "state": status.state,
            "message": status.message,
            "problem": status.problem,
            "disruption": status.disruption,
            "pods": sorted(p.role if hasattr(p, "role") else "pod" for p in status.pods),
            "trainer_pod": bool(status.trainer_pod),
        }
        if q is not None:
            data["queue"] = {
                "state": q.state,
                "reason": q.reason,
                "message": q.message,
                "local_queue": q.local_queue,
                "cluster_queue": q.cluster_queue,
                "workload": q.workload,
                "position_in_local_queue": q.position_in_local_queue,
                "position_in_cluster_queue": q.position_in_cluster_queue,
                "evictions": q.evictions,
                "position_note": q.position_note,
                "last_eviction": list(q.last_eviction) if q.last_eviction else None,
            }
        self.put(f"engine.status@{label}", data)

    # -- the cluster -----------------------------------------------------------------------

    def put(self, key: str, value: Any) -> None:
        self.data[key] = self.norm.value(value)

    def snapshot(self, label: str, name: str, namespace: str) -> None:
        """The TrainJob ``name`` and what hangs from it, as the admin reads them."""
        t = self.target
        tj = t.get_json("trainjobs.trainer.kubeflow.org", name, "-n", namespace)
        self.put(f"trainjob@{label}", tj if tj is not None else "<absent>")
        js = t.get_json("jobsets.jobset.x-k8s.io", name, "-n", namespace)
        self.put(f"jobset@{label}", js if js is not None else "<absent>")
        sel = f"{JOBSET_LABEL}={name}"
        jobs = t.get_json("jobs.batch", "-n", namespace, "-l", sel) or {}
        self.put(f"jobs@{label}", {j["metadata"]["name"]: j for j in jobs.get("items", [])})
        pods = t.get_json("pods", "-n", namespace, "-l", sel) or {}
        items = [p for p in pods.get("items", []) if not p["metadata"].get("deletionTimestamp")]
        for p in items:
            if (p.get("spec") or {}).get("nodeName"):
                self.norm.node(p["spec"]["nodeName"])
        self.put(f"pods@{label}", {p["metadata"]["name"]: p for p in items})
        wl = self.workload(name, namespace, tj)
        self.put(f"workload@{label}", wl if wl is not None else "<absent>")
        self.kubectl_columns(label, name, namespace)

    def workload(self, name: str, namespace: str, tj: Any) -> Any:
        wls = self.target.get_json(f"workloads.{KUEUE}", "-n", namespace) or {}
        for wl in wls.get("items", []):
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "TrainJob" and ref.get("name") == name:
                    self.norm.name(
                        wl["metadata"]["name"], f"trainjob-{self.norm.text(name)}-<hash>"
                    )
                    return wl
        return None

    def kubectl_columns(self, label: str, name: str, namespace: str) -> None:
        """``kubectl get trainjob NAME`` as the user sees it (AGE left out)."""
        proc = self.target.kubectl(
            "get", "trainjobs.trainer.kubeflow.org", name, "-n", namespace, admin=False
        )
        if proc.returncode != 0:
            self.put(f"kubectl@{label}", {"error": proc.stderr.strip().split("\n")[0]})
            return
        lines = proc.stdout.rstrip().splitlines()
        header = lines[0]
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        row = lines[1] if len(lines) > 1 else ""
        cols = {}
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cols[header[start:end].strip()] = row[start:end].strip()
        cols.pop("AGE", None)
        self.put(f"kubectl@{label}", cols)

    def visibility(self, label: str, namespace: str, queue: str) -> None:
        """The visibility API's pending workloads of ``queue`` (v1beta2, else v1beta1)."""
        for version in ("v1beta2", "v1beta1"):
            path = (
                f"/apis/visibility.{KUEUE}/{version}/namespaces/{namespace}"
                f"/localqueues/{queue}/pendingworkloads"
            )
            proc = self.target.kubectl("get", "--raw", path)
            if proc.returncode == 0:
                items = json.loads(proc.stdout).get("items", [])
                self.put(
                    f"visibility@{label}",
                    {
                        i["metadata"]["name"]: {
                            "localQueueName": i.get("localQueueName"),
                            "positionInLocalQueue": i.get("positionInLocalQueue"),
                            "positionInClusterQueue": i.get("positionInClusterQueue"),
                            "priority": i.get("priority"),
                            "owner": [
                                r.get("kind") for r in i["metadata"].get("ownerReferences") or []
                            ],
                        }
                        for i in items
                    },
                )
                return
        self.put(f"visibility@{label}", "<not served>")

    def events(self, namespace: str) -> None:
        """Events about this scenario's objects: kind/name/reason -> messages and source."""
        evs = self.target.get_json("events", "-n", namespace) or {}
        out: dict[str, dict[str, Any]] = {}
        for ev in evs.get("items", []):
            obj = ev.get("involvedObject") or {}
            name = self.norm.text(obj.get("name", ""))
            if "<job" not in name:
                continue
            key = f"{obj.get('kind')}:{name}:{ev.get('reason')}"
            src = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or ""
            slot = out.setdefault(key, {"type": ev.get("type"), "source": src, "messages": []})
            msg = self.norm.text(ev.get("message") or "")
            if msg not in slot["messages"]:
                slot["messages"].append(msg)
        for slot in out.values():
            slot["messages"] = sorted(slot["messages"])
        self.put("events", out)

    def finish(self, namespaces: list[str]) -> dict[str, Any]:
        """Stop the watches, add events, statuses, errors and pod transitions; the recording."""
        time.sleep(0)  # the watches' last lines are read by now or dropped
        for ns in namespaces:
            self.events(ns)
        pods: dict[str, list[str]] = {}
        for w in self.watches.values():
            w.stop()
            for n in w.nodes:
                self.norm.node(n)
            for name, seq in w.seen.items():
                if "<job" in self.norm.text(name):
                    pods[name] = seq
        self.put("podwatch", pods)
        self.put("engine.on_status", self.statuses)
        self.put("engine.errors", self.errors)
        return self.data
