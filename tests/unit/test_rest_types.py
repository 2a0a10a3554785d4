"""The REST records are typed once, in trainjob_magics/engine/inventory/schema.py. The lab
extension's types.ts declares the same interfaces (names, fields, optional or not, types), read
here from the TypeScript source; and the records the inventory builds have exactly the fields
their TypedDict declares, each of its type."""

from __future__ import annotations

import json
import re
import sys
import types
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest

from tests.helpers.rest_records import fields, problems
from trainjob_magics.engine.inventory import schema
from trainjob_magics.engine.inventory.records import gone_record, session_record, unknown_record
from trainjob_magics.engine.inventory.service import SessionInventory
from trainjob_magics.engine.kube.names import (
    CLOSED_BY_ANNOTATION,
    CREATED_BY_ANNOTATION,
    FORWARDS_ANNOTATION,
    IDLE_ANNOTATION,
    IDLE_STOP_ANNOTATION,
    JOBSET_NAME_LABEL,
    LAST_COMMAND_ANNOTATION,
    OWNER_HOST_ANNOTATION,
    OWNER_KERNEL_ANNOTATION,
)
from trainjob_magics.engine.result import GpuInfo, PodGpus
from trainjob_magics.engine.trainjob.body import build_trainjob

if sys.version_info >= (3, 11):
    from typing import is_typeddict
else:  # pragma: no cover - Python 3.10
    from typing_extensions import is_typeddict

TYPES_TS = Path(__file__).resolve().parents[2] / "packages/labextension/src/types.ts"

# Interfaces of types.ts that are not REST records: a panel's MIME bundle, written by the kernel.
NOT_REST = {"IPanelRef"}
# Fields the page sets on a record it read (never sent): interface -> field -> TypeScript type.
PAGE_ONLY = {"ISession": {"readAt": "number"}}


# ------------------------------------------------------------------ reading types.ts


def _union(parts: list[str]) -> str:
    """A TypeScript union in one spelling: members sorted, each once."""
    return " | ".join(sorted(set(parts)))


def _split_union(text: str) -> list[str]:
    """``A | (B | C)[] | null`` -> its top-level members."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([<{"
        depth -= ch in ")]>}"
        if ch == "|" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def ts_type(text: str) -> str:
    """A TypeScript type in one spelling (union members sorted, ``Array<X>`` as ``X[]``)."""
    text = re.sub(r"\s+", " ", text.strip())
    array = re.fullmatch(r"Array<(.+)>", text)
    if array:
        text = f"({array.group(1)})[]"
    members = []
    for part in _split_union(text):
        inner = re.fullmatch(r"\((.+)\)\[\]", part)
        if inner:
            item = ts_type(inner.group(1))
            part = f"({item})[]" if " | " in item else f"{item}[]"
        members.append(part)
    return _union(members)


def ts_interfaces(source: str) -> dict[str, dict[str, tuple[bool, str]]]:
    """Every ``export interface`` of a TypeScript file: field -> (required, type). Fails on
    what it cannot read (a nested object type, a method, an index signature), so that a
    field is never skipped unseen."""
    code = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    declared = re.findall(r"\binterface\s+(\w+)", code)
    found: dict[str, dict[str, tuple[bool, str]]] = {}
    for match in re.finditer(r"export\s+interface\s+(\w+)\s*\{([^{}]*)\}", code):
        name, body = match.groups()
        members: dict[str, tuple[bool, str]] = {}
        for piece in body.split(";"):
            piece = piece.strip()
            if not piece:
                continue
            field = re.fullmatch(r"(\w+)(\??)\s*:\s*(.+)", piece, flags=re.S)
            assert field, f"types.ts: cannot read {piece!r} in interface {name}"
            members[field.group(1)] = (not field.group(2), ts_type(field.group(3)))
        found[name] = members
    assert sorted(found) == sorted(declared), "types.ts: an interface this test cannot read"
    return found


# ------------------------------------------------------------------ the Python side, in TS


def _interface_of(typed: type) -> str:
    names = [ts for ts, variants in schema.TYPESCRIPT.items() if typed in variants]
    assert len(names) == 1, f"{typed.__name__}: no interface of types.ts in schema.TYPESCRIPT"
    return names[0]


def ts_of(tp: Any) -> str:
    """The TypeScript type a Python annotation of the schema is sent as."""
    if is_typeddict(tp):
        return _interface_of(tp)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union([ts_of(member) for member in get_args(tp)])
    if origin is list:
        (item,) = get_args(tp)
        inner = ts_of(item)
        return f"({inner})[]" if " | " in inner else f"{inner}[]"
    scalars = {str: "string", int: "number", float: "number", bool: "boolean"}
    if tp is type(None):
        return "null"
    if tp in scalars:
        return scalars[tp]
    raise TypeError(f"no TypeScript type for {tp!r}")


def expected_interface(variants: tuple[type, ...]) -> dict[str, tuple[bool, str]]:
    """The interface a page reads ``variants`` through: every field of any of them, required
    only when each of them requires it, its type the union of theirs."""
    each = [fields(v) for v in variants]
    names = sorted({name for f in each for name in f})
    return {
        name: (
            all(name in f and f[name][0] for f in each),
            _union([ts_of(f[name][1]) for f in each if name in f]),
        )
        for name in names
    }


def drift(source: str) -> list[str]:
    """Where types.ts and schema.py disagree, one line each."""
    declared = ts_interfaces(source)
    lines = [
        f"{name}: in types.ts, not in schema.TYPESCRIPT (nor NOT_REST)"
        for name in declared
        if name not in schema.TYPESCRIPT and name not in NOT_REST
    ]
    for name, variants in schema.TYPESCRIPT.items():
        if name not in declared:
            lines.append(f"{name}: {variants[0].__name__} has no interface in types.ts")
            continue
        want = expected_interface(variants)
        for field, ts in PAGE_ONLY.get(name, {}).items():
            want[field] = (False, ts)
        have = declared[name]
        for field in sorted(set(want) | set(have)):
            if field not in have:
                lines.append(f"{name}.{field}: sent ({want[field][1]}), not declared")
            elif field not in want:
                lines.append(f"{name}.{field}: declared ({have[field][1]}), never sent")
            else:
                (w_req, w_ts), (h_req, h_ts) = want[field], have[field]
                if w_req != h_req:
                    said = {True: "required", False: "optional"}
                    sent = {True: "in every answer", False: "not in every answer"}
                    lines.append(f"{name}.{field}: declared {said[h_req]}, sent {sent[w_req]}")
                if w_ts != h_ts:
                    lines.append(f"{name}.{field}: declared {h_ts}, sent as {w_ts}")
    return lines


def test_types_ts_declares_the_records_as_schema_py_types_them() -> None:
    assert drift(TYPES_TS.read_text()) == []


def _planted(old: str, new: str) -> str:
    source = TYPES_TS.read_text()
    assert source.count(old) == 1, old
    return source.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("  host?: string;\n", "", "ISession.host: sent (string), not declared"),
        ("  host?: string;", "  host: string;", "ISession.host: declared required"),
        ("  heldText: string;", "  heldText?: string;", "IHolds.heldText: declared optional"),
        ("  idleTimeout?: number | null;", "  idleTimeout?: number;", "ISession.idleTimeout"),
        ("  idleSeconds: number | null;", "  idleSeconds: number;", "IHolds.idleSeconds"),
        ("  ready: boolean;", "  ready: boolean;\n  restarts: number;", "IPodRow.restarts"),
        ("  pods: IPodGpus[];", "  pods: IGpu[];", "IGpuReport.pods"),
        ("  sessions: ISession[];", "  sessions: ISession;", "ISnapshot.sessions"),
        ("export interface IMessage {", "export interface IMessages {", "IMessage"),
    ],
)
def test_a_planted_mismatch_is_reported(old: str, new: str, said: str) -> None:
    lines = drift(_planted(old, new))
    assert lines and any(line.startswith(said) for line in lines), lines


def test_a_field_the_parser_cannot_read_fails_loudly() -> None:
    with pytest.raises(AssertionError, match="cannot read"):
        ts_interfaces(
            _planted("  host?: string;\n", "  host?: string;\n  [key: string]: string;\n")
        )
    with pytest.raises(AssertionError, match="an interface this test cannot read"):
        ts_interfaces(_planted("  at: string | null;", "  at: { iso: string } | null;"))


def test_a_schema_field_types_ts_lacks_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gone(schema.Gone):  # what adding a field to the Python record does
        by: str

    monkeypatch.setitem(schema.TYPESCRIPT, "IGone", (schema.Gone, Gone))
    assert drift(TYPES_TS.read_text()) == ["IGone.by: sent (string), not declared"]


# ------------------------------------------------------------------ what is built and sent

NOW = datetime(2025, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _trainjob(queue: bool = True) -> dict[str, Any]:
    job = build_trainjob("tjmtyped", "ns", "torch-distributed", idle_timeout=1800)
    meta = job["metadata"]
    meta["uid"] = "uid-1"
    meta["creationTimestamp"] = _stamp(NOW - timedelta(minutes=10))
    meta["annotations"].update(
        {
            OWNER_KERNEL_ANNOTATION: "kernel-1",
            OWNER_HOST_ANNOTATION: "host-1",
            CREATED_BY_ANNOTATION: "me",
            IDLE_ANNOTATION: "1800",
            IDLE_STOP_ANNOTATION: "600",
            LAST_COMMAND_ANNOTATION: _stamp(NOW - timedelta(minutes=2)),
            CLOSED_BY_ANNOTATION: "%trainjob_close",
            FORWARDS_ANNOTATION: json.dumps(
                [{"localPort": 40123, "port": 6006, "pod": "p", "link": "/proxy/40123/"}]
            ),
        }
    )
    if queue:
        meta.setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "user-queue"
    return job


def _pod(name: str) -> dict[str, Any]:
    placed = _stamp(NOW - timedelta(minutes=9))
    return {
        "metadata": {
            "name": name,
            "labels": {JOBSET_NAME_LABEL: "tjmtyped"},
            "creationTimestamp": placed,
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [{"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": placed},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def _session(**kwargs: Any) -> schema.SessionRecord:
    return session_record(
        _trainjob(), [_pod("tjmtyped-node-0-0"), _pod("tjmtyped-node-0-1")], now=NOW, **kwargs
    )


def test_a_session_record_has_exactly_its_typed_fields() -> None:
    record = _session()
    assert problems(record, schema.SessionRecord) == []
    # every field and nested record filled in, so that each was checked against its type
    assert record["holds"] is not None and record["holds"]["gpu"] == 2
    assert record["forwards"] and record["queue"] == {"localQueue": "user-queue"}
    assert len(record["pods"]) == 2 and record["idleStopIn"] is not None
    assert set(record) == set(schema.SessionRecord.__required_keys__)


def test_a_session_record_with_kueues_answer() -> None:
    queue: schema.Queue = {
        "localQueue": "user-queue",
        "state": "Queued",
        "position": 1,
        "clusterQueuePosition": None,
        "message": "waiting",
    }
    assert problems(_session(queue=queue), schema.SessionRecord) == []


def test_gone_unknown_and_the_inventory_s_answers_are_typed(tmp_path: Path) -> None:
    gone = gone_record("tjmtyped", "ns", "uid-1", "closed by the sidebar", NOW)
    assert problems(gone, schema.GoneRecord) == []
    unknown = unknown_record("tjmtyped", "ns", "uid-1", "reading the namespace")
    assert problems(unknown, schema.UnknownRecord) == []

    # no kubeconfig: one problem line, and each answer still its type
    inventory = SessionInventory(config_file=str(tmp_path / "missing"))
    snap = inventory.snapshot()
    assert problems(snap, schema.Snapshot) == [] and snap["problems"]
    job = inventory.job("ns", "tjmtyped", "uid-1")
    assert job["state"] == "Unknown"
    assert problems(job, schema.UnknownRecord) == []
    report = inventory.gpus("ns", "tjmtyped", "uid-1")
    assert problems(report, schema.GpuReport) == [] and "problem" in report

    # a snapshot with a live session and a gone one, as the sessions GET adds to it
    live = _session()
    live["notebook"], live["kernelAlive"] = "work.ipynb", True
    full: schema.Snapshot = {
        "version": 3,
        "sessions": [live],
        "gone": [gone],
        "problems": [],
        "namespaces": ["ns"],
        "user": "me",
    }
    assert problems(json.loads(json.dumps(full)), schema.Snapshot) == []


def test_gpu_readings_are_typed() -> None:
    pod = PodGpus("p", "ok", (GpuInfo(0, "T4", 35.0, 1234.0, None),), 1.0).as_dict()
    assert problems(pod, schema.PodGpusRecord) == []
    busy = PodGpus("p", "busy", message="a command runs").as_dict()
    assert problems(busy, schema.PodGpusRecord) == []


def test_the_check_catches_a_field_too_many_too_few_or_of_another_type() -> None:
    record: dict[str, Any] = dict(_session())
    record["extra"] = 1
    assert problems(record, schema.SessionRecord) == [
        "record: 'extra' is not a field of SessionRecord"
    ]
    record = dict(_session())
    del record["host"]
    assert problems(record, schema.SessionRecord) == [
        "record: no 'host' (SessionRecord requires it)"
    ]
    record = dict(_session())
    record["pods"] = [{"name": "p", "phase": "Running", "ready": "yes"}]
    assert problems(record, schema.SessionRecord) == ["record.pods[0].ready: 'yes', not a boolean"]


def test_pods_ready_counts_the_pods_not_made_yet() -> None:
    """The denominator is what the JobSet runs when more pods are expected than exist."""
    from trainjob_magics.engine.inventory.records import session_record

    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {}}
    pod = {
        "metadata": {"name": "j-node-0-0-x", "labels": {"jobset.sigs.k8s.io/jobset-name": "j"}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert session_record(job, [pod], expected_pods=2)["podsReady"] == "1/2"
    assert session_record(job, [pod])["podsReady"] == "1/1"  # the JobSet not read
    assert session_record(job, [pod, pod], expected_pods=1)["podsReady"] == "2/2"
