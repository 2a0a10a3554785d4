"""The generic API machinery of the local cluster against the official kubernetes client, with
the wording of the kube-apiserver 1.32 sources each test names.

A cluster of this module's own: paging and compaction need a store nobody else writes to.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.core.events import record_event

pytestmark = pytest.mark.timeout(120)
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TJ_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/default/trainjobs"
SMP = "application/strategic-merge-patch+json"


class Api:
    def __init__(self, kubeconfig: str) -> None:
        self.api = config.new_client_from_config(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)
        self.events = client.EventsV1Api(self.api)

    def raw(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, dict[str, str], bytes]:
        cfg = self.api.configuration
        hdrs = dict(headers or {})
        for auth in cfg.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                hdrs[auth["key"]] = auth["value"]
        url = cfg.host + path + ("?" + urlencode(query) if query else "")
        kw: dict[str, Any] = {"header_params": hdrs}
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")
            kw["body"] = body
        try:
            resp = self.api.call_api(method, url, **kw)
        except ApiException as exc:
            data = exc.body or b""
            return (
                exc.status,
                dict(exc.headers or {}),
                (data if isinstance(data, bytes) else data.encode()),
            )
        return resp.status, dict(resp.headers), resp.read()

    def json(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        status, _, body = self.raw(method, path, **kw)
        return status, json.loads(body)


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("api-machinery")
    with LocalCluster(root_dir=root, bookmark_interval=0.5) as c:
        yield c


@pytest.fixture
def api(lc: LocalCluster) -> Iterator[Api]:
    a = Api(str(lc.kubeconfig_path))
    yield a
    a.api.close()


def _trainjob(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "suspend": True,
            "trainer": {"command": ["sleep", "1"]},
            **spec,
        },
    }


def _namespaces(api: Api, prefix: str, count: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for n in names:
        api.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=n, labels={"batch": prefix}))
        )
    return names


# -- limit / continue ------------------------------------------------------------------------


def test_paging_with_continue_and_remaining_count(api: Api) -> None:
    """storage/etcd3/store.go GetList + storage/continue.go: every page is read at the first
    page's resourceVersion; remainingItemCount only without selectors."""
    prefix = f"pg{secrets.token_hex(3)}"
    _namespaces(api, prefix, 5)
    everything = [n.metadata.name for n in api.core.list_namespace().items]
    first = api.core.list_namespace(limit=2)
    assert [n.metadata.name for n in first.items] == everything[:2]
    assert first.metadata.remaining_item_count == len(everything) - 2
    token = first.metadata._continue
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded == {
        "v": "meta.k8s.io/v1",
        "rv": int(first.metadata.resource_version),
        "start": everything[1] + "\x00",
    }
    # the list continues the snapshot: a namespace deleted and one created meanwhile do not show
    api.core.delete_namespace(everything[-1])
    api.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="zz" + prefix)))
    seen, page = [n.metadata.name for n in first.items], first
    while page.metadata._continue:
        page = api.core.list_namespace(limit=2, _continue=page.metadata._continue)
        assert page.metadata.resource_version == first.metadata.resource_version
        seen += [n.metadata.name for n in page.items]
    assert seen == everything
    assert page.metadata.remaining_item_count is None
    # with a selector: pages, but no remainingItemCount
    sel = api.core.list_namespace(limit=2, label_selector=f"batch={prefix}")
    assert len(sel.items) == 2 and sel.metadata._continue
    assert sel.metadata.remaining_item_count is None
    # resourceVersion=0 is served from the watch cache, which ignores the limit
    cached = api.core.list_namespace(limit=1, resource_version="0")
    assert len(cached.items) > 1 and not cached.metadata._continue


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_bad_and_expired_continue_tokens(api: Api, lc: LocalCluster) -> None:
    """storage/continue.go DecodeContinue errors, 400 `invalid continue token: ...`; a
    compacted revision is 410 Expired with a token that lists the rest at the latest RV
    (storage/etcd3/errors.go handleCompactedErrorForPaging)."""
    path = "/api/v1/namespaces"
    cases = {
        "!!!": "continue key is not valid: illegal base64 data at input byte 0",
        # RawURLEncoding: padding is not part of the alphabet
        _b64(b'{"v":"meta.k8s.io/v1","rv":3,"start":"ab"}') + "==": (
            "continue key is not valid: illegal base64 data at input byte 56"
        ),
        _b64(b'{"v":"meta.k8s.io/v1","rv":0,"start":"a"}'): (
            "continue key is not valid: incorrect encoded start resourceVersion "
            "(version meta.k8s.io/v1)"
        ),
        _b64(b'{"v":"meta.k8s.io/v1","rv":3,"start":""}'): (
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        ),
        _b64(b'{"v":"v9","rv":3,"start":"a"}'): (
            "continue key is not valid: server does not recognize this encoded version v9"
        ),
    }
    for token, message in cases.items():
        status, body = api.json("GET", path, query=[("limit", "1"), ("continue", token)])
        assert (status, body["reason"], body["message"]) == (
            400,
            "BadRequest",
            f"invalid continue token: {message}",
        ), token
    first = api.core.list_namespace(limit=1)
    status, body = api.json(
        "GET",
        path,
        query=[("limit", "1"), ("continue", first.metadata._continue), ("resourceVersion", "5")],
    )
    assert (status, body["message"]) == (
        400,
        "specifying resource version is not allowed when using continue",
    )
    api.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=f"c{secrets.token_hex(4)}"))
    )
    lc.compact()  # etcd compacts the revisions before the current one
    status, body = api.json(
        "GET", path, query=[("limit", "1"), ("continue", first.metadata._continue)]
    )
    assert (status, body["reason"], body["code"]) == (410, "Expired", 410)
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result."
    )
    fresh = body["metadata"]["continue"]
    rest = api.core.list_namespace(limit=100, _continue=fresh)
    names = [n.metadata.name for n in api.core.list_namespace().items]
    after = first.items[0].metadata.name
    assert [n.metadata.name for n in rest.items] == [n for n in names if n > after]
    # a list at a compacted resourceVersion (exact): 410 with the etcd3 store's message
    status, body = api.json("GET", path, query=[("limit", "1"), ("resourceVersion", "2")])
    assert (status, body["message"]) == (
        410,
        "The resourceVersion for the provided list is too old.",
    )


# -- label selectors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a notin (x", "unable to parse requirement: found '', expected: ',' or ')'"),
        (
            "-a",
            'unable to parse requirement: <nil>: Invalid value: "-a": name part must consist '
            "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            "a=-b",
            'unable to parse requirement: values[0][a]: Invalid value: "-b": a valid label must '
            "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
    ],
)
def test_label_selector_errors(api: Api, selector: str, message: str) -> None:
    """apimachinery pkg/labels/selector.go Parser messages, as 400 BadRequest
    (endpoints/handlers/get.go: errors.NewBadRequest(err.Error()))."""
    for path in ("/api/v1/namespaces/default/pods", TJ_PATH):
        status, body = api.json("GET", path, query=[("labelSelector", selector)])
        assert (status, body["reason"], body["message"]) == (400, "BadRequest", message)


def test_label_selector_set_and_numeric_operators(api: Api) -> None:
    prefix = f"ls{secrets.token_hex(3)}"
    for n, size in (("a", "3"), ("b", "10")):
        api.core.create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(
                    name=f"{prefix}-{n}", labels={"size": size, "p": prefix}
                )
            )
        )

    def names(sel: str) -> list[str]:
        return [n.metadata.name for n in api.core.list_namespace(label_selector=sel).items]

    assert names(f"p={prefix},size>5") == [f"{prefix}-b"]
    assert names(f"p={prefix},size<5") == [f"{prefix}-a"]
    assert names(f"p in ({prefix}),size notin (3)") == [f"{prefix}-b"]
    assert names(f"p={prefix},!nothere") == [f"{prefix}-a", f"{prefix}-b"]


# -- patches and managedFields ---------------------------------------------------------------


def test_strategic_merge_patch_on_custom_resource_is_415(api: Api) -> None:
    """apiextensions customresource_handler.go supportedTypes + handlers/patch.go:
    negotiation.NewUnsupportedMediaTypeError; built-in kinds take it."""
    name = f"s{secrets.token_hex(5)}"
    api.co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", _trainjob(name))
    try:
        status, body = api.json(
            "PATCH",
            f"{TJ_PATH}/{name}",
            headers={"Content-Type": SMP},
            body={"metadata": {"labels": {"a": "b"}}},
        )
        assert (status, body["reason"], body["message"]) == (
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            "application/apply-patch+yaml",
        )
        status, body = api.json(  # a PATCH with a body that is not a patch type
            "PATCH",
            f"{TJ_PATH}/{name}",
            headers={"Content-Type": "application/json"},
            body={"metadata": {}},
        )
        assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    finally:
        api.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)
    ns = f"smp{secrets.token_hex(3)}"
    api.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels={"keep": "1"}))
    )
    status, body = api.json(
        "PATCH",
        f"/api/v1/namespaces/{ns}",
        headers={"Content-Type": SMP},
        body={"metadata": {"labels": {"add": "2"}, "finalizers": ["x.io/f"]}},
    )
    assert status == 200
    assert body["metadata"]["labels"] == {
        "keep": "1",
        "add": "2",
        "kubernetes.io/metadata.name": ns,
    }
    assert body["metadata"]["finalizers"] == ["x.io/f"]


def _entries(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"].get("managedFields") or []}


def test_managed_fields_on_create_update_patch(api: Api) -> None:
    """The field manager (apimachinery util/managedfields/internal): manager from
    ?fieldManager= or the User-Agent, Update/Apply operations, fields moving between managers."""
    name = f"m{secrets.token_hex(5)}"
    created = api.co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", _trainjob(name), field_manager="tester"
    )
    try:
        mine = _entries(created)["tester"]
        assert (mine["operation"], mine["apiVersion"], mine["fieldsType"]) == (
            "Update",
            f"{GROUP}/{VERSION}",
            "FieldsV1",
        )
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", mine["time"])
        spec = mine["fieldsV1"]["f:spec"]
        assert {"f:runtimeRef", "f:suspend", "f:trainer"} <= set(spec)
        assert (
            "f:metadata" not in mine["fieldsV1"] or "f:name" not in mine["fieldsV1"]["f:metadata"]
        )
        # a merge patch by another manager takes the field it changes
        patched = api.co.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            name,
            {"metadata": {"labels": {"team": "a"}}},
        )
        ua = _entries(patched)["OpenAPI-Generator"]  # User-Agent "OpenAPI-Generator/37.0.2/python"
        assert ua["fieldsV1"] == {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}}
        assert _entries(patched)["tester"]["fieldsV1"] == mine["fieldsV1"]
        status, body = api.json(
            "PATCH",
            f"{TJ_PATH}/{name}",
            query=[("fieldManager", "relabeler")],
            headers={"Content-Type": "application/merge-patch+json"},
            body={"metadata": {"labels": {"team": "b"}}},
        )
        assert status == 200
        entries = _entries(body)
        assert entries["relabeler"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:team": {}}}}
        # the map itself stays owned; a member without members is `{}` (structured-merge-diff
        # fieldpath/serialize.go emitContentsV1)
        assert entries["OpenAPI-Generator"]["fieldsV1"] == {"f:metadata": {"f:labels": {}}}
        # server-side apply: the Apply operation; fieldManager is required
        apply = {"Content-Type": "application/apply-patch+yaml"}
        config_ = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainJob",
            "metadata": {"name": name, "annotations": {"owner": "ssa"}},
        }
        status, body = api.json("PATCH", f"{TJ_PATH}/{name}", headers=apply, body=config_)
        assert (status, body["reason"], body["message"]) == (
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required '
            "for apply patch",
        )
        status, body = api.json(
            "PATCH",
            f"{TJ_PATH}/{name}",
            query=[("fieldManager", "ssa")],
            headers=apply,
            body=config_,
        )
        assert status == 200
        ssa = _entries(body)["ssa"]
        assert ssa["operation"] == "Apply"
        assert ssa["fieldsV1"] == {"f:metadata": {"f:annotations": {"f:owner": {}}}}
        # sorted as sortEncodedManagedFields: Apply before Update
        ops = [e["operation"] for e in body["metadata"]["managedFields"]]
        assert ops == sorted(ops)
        # a no-op update changes nothing, not even the entry's time
        again = api.co.patch_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", name, {"metadata": {"labels": {"team": "b"}}}
        )
        assert again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
        status, body = api.json(
            "POST",
            TJ_PATH,
            query=[("fieldManager", "bad\x01manager")],
            body=_trainjob("x" + name),
        )
        assert (status, body["reason"]) == (422, "Invalid")
        assert body["message"].startswith('CreateOptions.meta.k8s.io "" is invalid: fieldManager:')
    finally:
        api.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)


# -- pods: discovery and what the server accepts -----------------------------------------------


def test_pod_verbs_in_discovery_and_pod_writes(api: Api, lc: LocalCluster) -> None:
    """Discovery lists every verb of kube-apiserver's pods storage; a create is denied the way
    an admission plugin denies (403), metadata updates work, spec updates are 422 as
    ValidatePodUpdate answers."""
    resources = {r.name: r for r in api.core.get_api_resources().resources}
    assert resources["pods"].verbs == [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    status, body = api.json("POST", "/api/v1/namespaces/default/pods", body=pod)
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"].startswith('pods "mine" is forbidden: ')
    name = f"p{secrets.token_hex(5)}"
    api.co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", _trainjob(name, suspend=False)
    )
    try:
        deadline = time.monotonic() + 20
        while not (
            pods := api.core.list_namespaced_pod(
                "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
            ).items
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        target = pods[0].metadata.name
        status, body = api.json(
            "PATCH",
            f"/api/v1/namespaces/default/pods/{target}",
            headers={"Content-Type": SMP},
            body={"metadata": {"labels": {"checked": "yes"}}},
        )
        assert status == 200 and body["metadata"]["labels"]["checked"] == "yes"
        status, body = api.json(
            "PATCH",
            f"/api/v1/namespaces/default/pods/{target}",
            headers={"Content-Type": SMP},
            body={"spec": {"hostname": "other"}},
        )
        assert (status, body["reason"]) == (422, "Invalid")
        assert body["message"].startswith(
            f'Pod "{target}" is invalid: spec: Forbidden: pod updates may not change fields '
            "other than `spec.containers[*].image`"
        )
    finally:
        api.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)


# -- Tables --------------------------------------------------------------------------------------

TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}


def test_table_date_columns(api: Api) -> None:
    """A CRD's date column keeps type "date" and the server sends the age
    (apiextensions tableconvertor.go cellForJSONValue: ConvertToHumanReadableDateType); the
    built-in printers' Age columns are strings (pkg/printers/internalversion/printers.go)."""
    name = f"t{secrets.token_hex(5)}"
    api.co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", _trainjob(name))
    try:
        status, table = api.json("GET", TJ_PATH, headers=TABLE)
        assert status == 200
        cols = {c["name"]: c for c in table["columnDefinitions"]}
        assert (cols["Age"]["type"], cols["Name"]["format"]) == ("date", "name")
        row = next(r for r in table["rows"] if r["cells"][0] == name)
        assert re.fullmatch(r"\d+s", row["cells"][list(cols).index("Age")])
        status, table = api.json("GET", "/apis/jobset.x-k8s.io/v1alpha2/jobsets", headers=TABLE)
        assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
            ("Name", "string"),
            ("Age", "date"),
        ]
        status, table = api.json("GET", "/api/v1/namespaces", headers=TABLE)
        assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
            ("Name", "string"),
            ("Status", "string"),
            ("Age", "string"),
        ]
        default = next(r for r in table["rows"] if r["cells"][0] == "default")
        assert default["cells"][1] == "Active" and re.fullmatch(
            r"\d+(s|m\d*s?)", default["cells"][2]
        )
    finally:
        api.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)


# -- watch resourceVersions ----------------------------------------------------------------------


def test_watch_garbage_and_compacted_resource_versions(api: Api, lc: LocalCluster) -> None:
    """A garbage resourceVersion fails the watch cache's ParseResourceVersion: a
    storage.InvalidError, which 1.32's handlers answer as HTTP 500 with no reason
    (responsewriters.ErrorToAPIStatus; kubernetes/kubernetes#139485 proposes 400). A too-old
    one is HTTP 200 and one ERROR event, 410 Expired (cacher watch_cache.go)."""
    for path in ("/api/v1/namespaces/default/pods", TJ_PATH, "/api/v1/namespaces"):
        status, body = api.json("GET", path, query=[("watch", "1"), ("resourceVersion", "abc")])
        assert status == 500
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": '
            "invalid syntax",
            "code": 500,
        }
    status, body = api.json("GET", TJ_PATH, query=[("resourceVersion", "-1"), ("limit", "5")])
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'invalid resource version: resourceVersion: Invalid value: "-1": strconv.ParseUint: '
        'parsing "-1": invalid syntax'
    )
    rv = api.core.list_namespace().metadata.resource_version
    api.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=f"w{secrets.token_hex(4)}"))
    )
    lc.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as info:
        for _ in w.stream(api.core.list_namespace, resource_version=rv, timeout_seconds=2):
            pass
    assert info.value.status == 410
    status, _, raw = api.raw(
        "GET", "/api/v1/namespaces", query=[("watch", "1"), ("resourceVersion", rv)]
    )
    (line,) = raw.decode().splitlines()
    event = json.loads(line)
    assert status == 200 and event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert re.fullmatch(rf"too old resource version: {rv} \(\d+\)", event["object"]["message"])


# -- unknown paths -------------------------------------------------------------------------------


def test_unknown_paths(api: Api) -> None:
    """net/http's plain-text 404 where no handler serves the path (apiserver
    util/notfoundhandler; apiextensions crdHandler delegates unknown CRD resources, versions
    and scopes to it); go-restful's Status 404 inside a built-in group-version."""
    plain = [
        "/nope",
        "/api/v2",
        "/apis/nothing.example.com",
        "/apis/nothing.example.com/v1/things",
        f"/apis/{GROUP}/v9",
        f"/apis/{GROUP}/{VERSION}/nothings",
        f"/apis/{GROUP}/{VERSION}/trainjobs/no-namespace",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/clustertrainingruntimes",
    ]
    for path in plain:
        status, headers, body = api.raw("GET", path)
        assert (status, body) == (404, b"404 page not found\n"), path
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/api/v1/nothings", "/api/v1/pods/no-namespace", "/apis/events.k8s.io/v1/x"):
        status, body = api.json("GET", path)
        assert (status, body["reason"], body["message"], body["details"]) == (
            404,
            "NotFound",
            "the server could not find the requested resource",
            {},
        ), path
    status, body = api.json("GET", f"{TJ_PATH}/nope/scale")
    assert (status, body["message"]) == (404, f'trainjobs.{GROUP} "nope" not found')
    status, body = api.json("GET", "/")
    assert status == 200 and {"/api", "/apis", f"/apis/{GROUP}/{VERSION}"} <= set(body["paths"])


# -- events.k8s.io/v1 ----------------------------------------------------------------------------


def _pod_ref(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
    }


def test_events_v1_view_of_core_events(api: Api, lc: LocalCluster) -> None:
    """events.k8s.io/v1 serves the core/v1 Events converted as pkg/apis/events/v1/conversion.go
    does, with its field label conversion (regarding.*, reason, type, reportingController)."""
    pod = f"ev{secrets.token_hex(4)}"
    record_event(
        lc.store,
        _pod_ref(pod),
        reason="FailedScheduling",
        message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        type="Warning",
        component="default-scheduler",
    )
    record_event(lc.store, _pod_ref(pod), reason="Scheduled", message="ok", component="kubelet")
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    status, listed = api.json(
        "GET", path, query=[("fieldSelector", f"regarding.name={pod},type=Warning")]
    )
    (ev,) = listed["items"]
    assert (ev["reason"], ev["note"], ev["type"]) == (
        "FailedScheduling",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "Warning",
    )
    assert ev["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod,
        "namespace": "default",
        "uid": f"uid-{pod}",
    }
    assert ev["reportingController"] == "default-scheduler"
    assert ev["deprecatedCount"] == 1
    assert ev["deprecatedSource"] == {"component": "default-scheduler"}
    assert ev["deprecatedFirstTimestamp"] == ev["deprecatedLastTimestamp"]
    # an Event recorded the old way has `eventTime: null` (MicroTime's zero value), which the
    # typed client 37 refuses, as against a real cluster (kubernetes-client/python#1616)
    with pytest.raises(ValueError):
        api.events.list_namespaced_event("default", field_selector=f"regarding.name={pod}")
    status, raw_list = api.json(
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        query=[("fieldSelector", f"regarding.name={pod},reason=Scheduled")],
    )
    assert raw_list["kind"] == "EventList" and raw_list["apiVersion"] == "events.k8s.io/v1"
    (item,) = raw_list["items"]
    assert item["apiVersion"] == "events.k8s.io/v1" and item["eventTime"] is None
    assert "involvedObject" not in item and item["note"] == "ok"
    status, one = api.json("GET", f"{path}/{item['metadata']['name']}")
    assert (status, one["reason"], one["kind"]) == (200, "Scheduled", "Event")
    # reportingController selects core's reportingComponent; an unknown label is 400
    status, got = api.json(
        "GET",
        path,
        query=[("fieldSelector", f"reportingController=kubelet,regarding.name={pod}")],
    )
    assert [e["reason"] for e in got["items"]] == ["Scheduled"]
    status, body = api.json(
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        query=[("fieldSelector", "involvedObject.name=x")],
    )
    assert (status, body["message"]) == (400, "field label not supported: involvedObject.name")
    # watch through events.k8s.io: the same objects, converted
    rv = raw_list["metadata"]["resourceVersion"]
    record_event(lc.store, _pod_ref(pod), reason="Pulled", message="image", component="kubelet")
    status, _, raw = api.raw(
        "GET",
        path,
        query=[
            ("watch", "1"),
            ("resourceVersion", rv),
            ("fieldSelector", f"reason=Pulled,regarding.name={pod}"),
            ("timeoutSeconds", "1"),
        ],
    )
    (line,) = raw.decode().splitlines()
    event = json.loads(line)
    assert status == 200 and event["type"] == "ADDED"
    assert (event["object"]["apiVersion"], event["object"]["note"]) == ("events.k8s.io/v1", "image")


def test_events_v1_create_validates_strictly(api: Api) -> None:
    """pkg/apis/core/validation/events.go ValidateEventCreate: strict through events.k8s.io/v1,
    legacy through core/v1; both read the same objects."""
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    name = f"e{secrets.token_hex(4)}"
    bad = {"metadata": {"name": name}, "regarding": {"kind": "Pod", "name": "x"}, "reason": "R"}
    status, body = api.json("POST", path, body=bad)
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith(f'Event "{name}" is invalid: [')
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"eventTime", "type"} <= fields
    good = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/tester",
        "reportingInstance": "tester-1",
        "action": "Testing",
        "reason": "Tested",
        "type": "Normal",
        "note": "created through events.k8s.io",
        "regarding": {"kind": "Pod", "name": "x", "namespace": "default"},
    }
    status, created = api.json("POST", path, body=good)
    assert status == 201 and created["note"] == "created through events.k8s.io"
    core = api.core.read_namespaced_event(name, "default")
    assert (core.message, core.reporting_component, core.involved_object.name) == (
        "created through events.k8s.io",
        "example.com/tester",
        "x",
    )
    status, body = api.json(
        "PATCH",
        f"{path}/{name}",
        headers={"Content-Type": "application/merge-patch+json"},
        body={"note": "changed"},
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert "note" not in json.dumps(body["details"]) or "message" in json.dumps(body["details"])
    api.events.delete_namespaced_event(name, "default")
    with pytest.raises(ApiException) as info:
        api.core.read_namespaced_event(name, "default")
    assert info.value.status == 404


# -- protobuf request bodies ---------------------------------------------------------------------


def _ld(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths below 128)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _envelope(kind: str, raw: bytes) -> bytes:
    """runtime.Unknown in the `k8s\\0` envelope (apimachinery serializer/protobuf)."""
    type_meta = _ld(1, b"v1") + _ld(2, kind.encode())
    return b"k8s\x00" + _ld(1, type_meta) + _ld(2, raw) + _ld(3, b"") + _ld(4, b"")


def test_protobuf_bodies(api: Api) -> None:
    """What client-go sends for built-in kinds: a Namespace (ObjectMeta name + labels map) and
    DeleteOptions decode; a custom resource takes no protobuf (415), a body without the prefix
    is 400."""
    pb = "application/vnd.kubernetes.protobuf"
    name = f"pb{secrets.token_hex(3)}"
    label = _ld(1, b"team") + _ld(2, b"blue")
    meta = _ld(1, name.encode()) + _ld(11, label)
    status, _, raw = api.raw(
        "POST",
        "/api/v1/namespaces",
        headers={"Content-Type": pb},
        body=_envelope("Namespace", _ld(1, meta)),
    )
    created = json.loads(raw)
    assert status == 201, created
    assert created["metadata"]["labels"] == {"team": "blue", "kubernetes.io/metadata.name": name}
    grace = bytes([1 << 3, 0])  # gracePeriodSeconds: 0
    status, _, raw = api.raw(
        "DELETE",
        f"/api/v1/namespaces/{name}",
        headers={"Content-Type": pb},
        body=_envelope("DeleteOptions", grace),
    )
    assert status == 200, raw
    status, body = api.json(
        "POST", TJ_PATH, headers={"Content-Type": pb}, body=_envelope("TrainJob", b"")
    )
    assert (status, body["reason"], body["message"]) == (
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml",
    )
    status, body = api.json(
        "POST", "/api/v1/namespaces", headers={"Content-Type": pb}, body=b'{"metadata": {}}'
    )
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "provided data does not appear to be a protobuf message" in body["message"]
