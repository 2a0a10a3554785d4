"""The kubelet's image states in the local cluster: bad names, failed pulls and their back-off,
the Events, and the engine failing fast on them. kubelet/image_pull.py cites the sources."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.helpers.kube import delete_all_trainjobs, trainjob_names, wait_trainjob_gone
from tests.helpers.polling import wait_until
from trainjob_magics import connect
from trainjob_magics.engine import ConnectTimeoutError, PodStartError
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.core.resources import EVENTS, NAMESPACES
from trainjob_magics.localcluster.core.store import Store
from trainjob_magics.localcluster.kubelet.image_pull import (
    ImageService,
    InvalidReference,
    go_duration,
    invalid_image_message,
    parse_normalized_named,
    pull_error,
)

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"
NOT_FOUND = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "ghcr.io/acme/gone:1": '
    'failed to resolve reference "ghcr.io/acme/gone:1": ghcr.io/acme/gone:1: not found'
)


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("image-pulls")
    with LocalCluster(root_dir=root, bookmark_interval=0.5, image_pull_backoff=0.4) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


@pytest.fixture
def kc(lc: LocalCluster) -> Iterator[str]:
    yield str(lc.kubeconfig_path)
    lc.images.allow_pulls()
    delete_all_trainjobs(lc.kubeconfig_path)


@pytest.fixture
def core(lc: LocalCluster) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(lc.kubeconfig_path))
    yield client.CoreV1Api(api)
    api.close()


def job_pods(core: client.CoreV1Api, job: str) -> list[Any]:
    return core.list_namespaced_pod(
        "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={job}"
    ).items


def events(core: client.CoreV1Api, pod: str) -> dict[tuple[str, str], Any]:
    """The pod's Events by (reason, message)."""
    items = core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}").items
    return {(e.reason, e.message): e for e in items}


def create_trainjob(kc: str, image: str) -> str:
    """A TrainJob made through the API (no engine, so nothing fails fast or deletes it)."""
    name = f"img{secrets.token_hex(4)}"
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {
                "name": RUNTIME,
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": {"image": image, "command": ["sleep", "600"]},
        },
    }
    api = config.new_client_from_config(config_file=kc)
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", body
        )
    finally:
        api.close()
    return name


def job_of(exc: BaseException) -> str:
    return str(exc).split("TrainJob ", 1)[1].split(" ", 1)[0]


# -- the reference grammar (distribution/reference v0.6.0) ---------------------------------


@pytest.mark.parametrize(
    ("image", "error"),
    [
        (
            "Busybox",
            "invalid reference format: repository name (library/Busybox) must be lowercase",
        ),
        (
            "acme/Trainer:v1",
            "invalid reference format: repository name (acme/Trainer) must be lowercase",
        ),
        ("my image:1", "invalid reference format"),
        ("busybox:", "invalid reference format"),
        ("busybox:bad/tag", "invalid reference format"),
        (
            "ghcr.io/acme/App",
            "invalid reference format: repository name (acme/App) must be lowercase",
        ),
        (
            "a" * 64,
            f"invalid repository name ({'a' * 64}), cannot specify 64-byte hexadecimal strings",
        ),
        ("busybox@sha256:" + "a" * 40, "invalid checksum digest length"),
        ("busybox@md5:" + "a" * 32, "unsupported digest algorithm"),
        ("busybox@sha256:" + "A" * 64, "invalid checksum digest format"),
        ("x/" + "a" * 260, "repository name must not be more than 255 characters"),
    ],
)
def test_invalid_references(image: str, error: str) -> None:
    with pytest.raises(InvalidReference) as info:
        parse_normalized_named(image)
    assert str(info.value) == error
    assert invalid_image_message(image) == (
        f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": '
        f"{error}"
    )


@pytest.mark.parametrize(
    ("image", "full"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("pytorch/pytorch:2.13.0", "docker.io/pytorch/pytorch:2.13.0"),
        ("index.docker.io/library/python:3", "docker.io/library/python:3"),
        ("localhost:5000/a/b", "localhost:5000/a/b:latest"),
        ("MyRegistry/app:1", "MyRegistry/app:1"),  # an uppercase first element is a host
        ("[::1]:5000/app@sha256:" + "0" * 64, "[::1]:5000/app@sha256:" + "0" * 64),
    ],
)
def test_valid_references(image: str, full: str) -> None:
    assert invalid_image_message(image) is None
    assert str(parse_normalized_named(image)) == full


def test_go_durations() -> None:
    assert [go_duration(s) for s in (0.0004, 0.25, 1.5, 61.25, 3725.0)] == [
        "0s",
        "250ms",
        "1.5s",
        "1m1.25s",
        "1h2m5s",
    ]


def test_pull_back_off_states_and_events() -> None:
    """EnsureImageExists step by step, on a clock of our own."""
    now = [100.0]
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    images = ImageService(store, backoff=10, max_backoff=40, clock=lambda: now[0])
    images.fail_pulls("ghcr.io/acme/*")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u1"}}
    container = {"name": "node", "image": "ghcr.io/acme/gone:1", "imagePullPolicy": "IfNotPresent"}
    first = images.ensure(pod, container)
    assert (first.ok, first.reason, first.message) == (False, "ErrImagePull", NOT_FOUND)
    now[0] += 5
    second = images.ensure(pod, container)
    assert second.reason == "ImagePullBackOff"
    assert (
        second.message == f'Back-off pulling image "ghcr.io/acme/gone:1": ErrImagePull: {NOT_FOUND}'
    )
    now[0] += 5  # 10s after the failure: pull again, then wait 20s
    assert images.ensure(pod, container).reason == "ErrImagePull"
    now[0] += 19
    assert images.ensure(pod, container).reason == "ImagePullBackOff"
    now[0] += 1
    assert images.ensure(pod, container).reason == "ErrImagePull"
    got = {(e["reason"], e["message"]): e for e in store.list(EVENTS, "default")[0]}
    image = '"ghcr.io/acme/gone:1"'
    assert {k: (e["type"], e["count"]) for k, e in got.items()} == {
        ("Pulling", f"Pulling image {image}"): ("Normal", 3),
        ("Failed", f"Failed to pull image {image}: {NOT_FOUND}"): ("Warning", 3),
        ("Failed", "Error: ErrImagePull"): ("Warning", 3),
        ("BackOff", f"Back-off pulling image {image}"): ("Normal", 2),
        ("Failed", "Error: ImagePullBackOff"): ("Warning", 2),
    }
    assert all(e["source"]["component"] == "kubelet" for e in got.values())
    images.allow_pulls()
    now[0] += 40
    assert images.ensure(pod, container).ok
    assert images.present("ghcr.io/acme/gone:1")


# -- through the engine --------------------------------------------------------------------


def test_invalid_image_name_fails_fast_and_deletes_the_job(kc: str, core: client.CoreV1Api) -> None:
    started = time.monotonic()
    with pytest.raises(PodStartError) as info:
        connect(RUNTIME, image="Acme/Trainer:v1", timeout=60, config_file=kc)
    assert time.monotonic() - started < 10
    msg = (
        'Failed to apply default image tag "Acme/Trainer:v1": couldn\'t parse image name '
        '"Acme/Trainer:v1": invalid reference format: repository name (Trainer) must be '
        "lowercase"
    )
    assert f"InvalidImageName: {msg}" in str(info.value)
    job = job_of(info.value)
    assert wait_trainjob_gone(kc, job, 10, interval=0.1)


def test_the_kubelets_invalid_image_state_and_events(kc: str, core: client.CoreV1Api) -> None:
    job = create_trainjob(kc, "my image:1")
    msg = (
        'Failed to apply default image tag "my image:1": couldn\'t parse image name '
        '"my image:1": invalid reference format'
    )

    def waiting() -> Any:
        pods = job_pods(core, job)
        statuses = pods[0].status.container_statuses if pods else None
        state = statuses[0].state.waiting if statuses else None
        return pods[0] if state is not None and state.reason == "InvalidImageName" else None

    pod = wait_until(waiting)
    assert pod.status.container_statuses[0].state.waiting.message == msg
    assert pod.status.phase == "Pending"
    got = wait_until(lambda: (e := events(core, pod.metadata.name)) and len(e) >= 3 and e)
    assert got[("InspectFailed", msg)].type == "Warning"
    assert got[("Failed", "Error: InvalidImageName")].source.component == "kubelet"
    assert ("Scheduled", f"Successfully assigned default/{pod.metadata.name} to local-node") in got


def test_unpullable_image_fails_after_the_configured_pulls(
    lc: LocalCluster, kc: str, core: client.CoreV1Api
) -> None:
    lc.images.fail_pulls("ghcr.io/acme/*")
    started = time.monotonic()
    with pytest.raises(PodStartError) as info:
        connect(
            RUNTIME, image="ghcr.io/acme/gone:1", timeout=60, config_file=kc, image_pull_retries=2
        )
    assert time.monotonic() - started < 20
    assert f'Failed to pull image "ghcr.io/acme/gone:1": {NOT_FOUND}' in str(info.value)
    job = job_of(info.value)
    assert wait_trainjob_gone(kc, job, 10, interval=0.1)
    assert job not in trainjob_names(kc)


def test_pull_states_alternate_and_the_timeout_says_why(
    lc: LocalCluster, kc: str, core: client.CoreV1Api
) -> None:
    lc.images.fail_pulls("ghcr.io/acme/*", error="unauthorized")
    seen: set[tuple[str, str]] = set()
    stop = threading.Event()

    def watch_states() -> None:
        while not stop.is_set():
            for p in core.list_namespaced_pod("default").items:
                for cs in p.status.container_statuses or []:
                    if cs.state.waiting and cs.image == "ghcr.io/acme/private:2":
                        seen.add((cs.state.waiting.reason, cs.state.waiting.message or ""))
            time.sleep(0.05)

    t = threading.Thread(target=watch_states, daemon=True)
    t.start()
    try:
        with pytest.raises(ConnectTimeoutError) as info:
            connect(
                RUNTIME,
                image="ghcr.io/acme/private:2",
                timeout=2.5,
                config_file=kc,
                image_pull_retries=99,
            )
    finally:
        stop.set()
        t.join(5)
    err = (
        "rpc error: code = Unknown desc = failed to pull and unpack image "
        '"ghcr.io/acme/private:2": failed to resolve reference "ghcr.io/acme/private:2": '
        "pull access denied, repository does not exist or may require authorization: "
        "server message: insufficient_scope: authorization failed"
    )
    assert ("ErrImagePull", err) in seen
    assert (
        "ImagePullBackOff",
        f'Back-off pulling image "ghcr.io/acme/private:2": ErrImagePull: {err}',
    ) in seen
    assert "waiting because pod " in str(info.value)
    assert f'Failed to pull image "ghcr.io/acme/private:2": {err}' in str(info.value)
    pod = job_pods(core, job_of(info.value))[0]
    got = events(core, pod.metadata.name)
    assert got[("Failed", f'Failed to pull image "ghcr.io/acme/private:2": {err}')].count >= 2
    assert got[("BackOff", 'Back-off pulling image "ghcr.io/acme/private:2"')].count >= 1


def test_a_registry_under_invalid_does_not_resolve(kc: str) -> None:
    with pytest.raises(PodStartError) as info:
        connect(
            RUNTIME,
            image="registry.invalid/team/app:3",
            timeout=60,
            config_file=kc,
            image_pull_retries=1,
        )
    assert (
        'Head "https://registry.invalid/v2/team/app/manifests/3": dial tcp: lookup '
        "registry.invalid on 127.0.0.53:53: no such host" in str(info.value)
    )
    assert pull_error(parse_normalized_named("busybox"), "unreachable").startswith(
        'rpc error: code = Unknown desc = failed to pull and unpack image "docker.io/library/'
        'busybox:latest": failed to resolve reference "docker.io/library/busybox:latest": failed '
        'to do request: Head "https://registry-1.docker.io/v2/library/busybox/manifests/latest"'
    )


def test_a_good_image_is_pulled_once_then_present(
    lc: LocalCluster, kc: str, core: client.CoreV1Api
) -> None:
    first = connect(RUNTIME, image="ghcr.io/acme/ok:7", timeout=30, config_file=kc)
    try:
        got = events(core, first.status().trainer_pod)
        reasons = {r for r, _ in got}
        assert {"Scheduled", "Pulling", "Pulled", "Created", "Started"} <= reasons
        pulled = next(m for r, m in got if r == "Pulled")
        assert pulled.startswith('Successfully pulled image "ghcr.io/acme/ok:7" in ')
        assert "including waiting). Image size: " in pulled and pulled.endswith(" bytes.")
        assert ("Created", "Created container node") in got
        assert ("Started", "Started container node") in got
    finally:
        first.close()
    second = connect(RUNTIME, image="ghcr.io/acme/ok:7", timeout=30, config_file=kc)
    try:
        got = events(core, second.status().trainer_pod)
        assert ("Pulled", 'Container image "ghcr.io/acme/ok:7" already present on machine') in got
        assert "Pulling" not in {r for r, _ in got}
    finally:
        second.close()


def test_pull_policy_never_without_the_image(lc: LocalCluster, kc: str) -> None:
    rt = yaml.safe_load(
        (
            Path(__file__).resolve().parents[2]
            / "trainjob_magics/localcluster/runtimes/torch_distributed.yaml"
        ).read_text()
    )
    rt["metadata"]["name"] = "torch-never-pull"
    spec = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    spec["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    lc.load_runtime_yaml(json.dumps(rt) + "\n")
    with pytest.raises(PodStartError) as info:
        connect("torch-never-pull", image="ghcr.io/acme/local:1", timeout=30, config_file=kc)
    assert (
        'ErrImageNeverPull: Container image "ghcr.io/acme/local:1" is not present with pull '
        "policy of Never" in str(info.value)
    )
    lc.images.preload("ghcr.io/acme/local:1")
    session = connect("torch-never-pull", image="ghcr.io/acme/local:1", timeout=30, config_file=kc)
    session.close()
