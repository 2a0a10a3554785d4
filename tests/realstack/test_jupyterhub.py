"""The notebook inside the cluster: JupyterHub on the real stack (``python -m
devtools.realstack up --jupyterhub``), each user's server a pod on the real node with the
ServiceAccount of docs/rbac.md and no kubeconfig. These tests drive the user's real kernel
through the hub (the hub's admin API, the Jupyter server's kernel WebSocket); the browser test
of the same hub is test_jupyterhub_browser.py.

- the hub stops the server (its API's DELETE, as "Stop My Server"; jupyterhub-idle-culler):
  the user's sessions' TrainJobs are gone within a minute, a live detached run goes on and
  ends its job itself;
- a pod killed with no grace: the keep-alive ends the TrainJobs within ``idle_timeout``;
- the pod's projected token replaced while a session lives: the next cell works;
- bad set-ups (no pods/exec, no create on trainjobs, a missing LocalQueue, an image without
  ipywidgets): one line each, no traceback.

Without a hub on the stack these skip, naming the command; with
``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1`` they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realstack import controllers, procs
from devtools.realstack.jupyterhub import Hub, users
from tests.helpers.hub import STOP_BOUND, HubKernel, HubUser, trainjobs, until

pytestmark = pytest.mark.timeout(900)
RUNTIME = "torch-distributed"


@pytest.fixture
def user(hub: Hub) -> Iterator[HubUser]:
    u = HubUser(hub)
    yield u
    u.stop()
    with_jobs = trainjobs(hub.ctx, hub.namespace(u.name))
    if with_jobs:
        controllers.kubectl(
            hub.ctx, "delete", "trainjobs", "--all", "-n", hub.namespace(u.name), "--wait=false"
        )


def _condition(job: dict[str, Any]) -> str:
    for c in job.get("status", {}).get("conditions", []):
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return c["type"]
    return ""


def _ok(result: Any, *needles: str) -> Any:
    assert result.error is None and result.status == "ok", result
    for needle in needles:
        assert needle in result.shown, (needle, result.shown)
    return result


def _one_line_error(result: Any, *needles: str) -> str:
    """The cell failed with one line (no traceback) that contains every needle."""
    assert result.status == "error", result
    shown = (result.error or "") + "\n" + result.stderr
    assert "Traceback" not in result.traceback and "Traceback" not in shown, result.traceback
    for needle in needles:
        assert needle in shown, (needle, shown)
    return shown


def _connect(kernel: HubKernel, args: str) -> str:
    """``%trainjob_connect ARGS``; the TrainJob's name (the one new in the user's namespace)."""
    hub, ns = kernel.user.hub, kernel.user.hub.namespace(kernel.user.name)
    before = set(trainjobs(hub.ctx, ns))
    _ok(kernel.run(f"%trainjob_connect {args}"))
    (name,) = set(trainjobs(hub.ctx, ns)) - before
    return name


def test_the_kernel_runs_in_the_cluster_with_the_pods_service_account(
    hub: Hub, user: HubUser
) -> None:
    user.spawn()
    k = user.kernel()
    env = _ok(
        k.run(
            "import os, pathlib\n"
            "sa = pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount')\n"
            "print(os.environ.get('KUBERNETES_SERVICE_HOST'), os.environ.get('KUBECONFIG'),\n"
            "      (pathlib.Path.home() / '.kube').exists(), (sa / 'token').is_file(),\n"
            "      (sa / 'namespace').read_text())"
        )
    ).stdout.split()
    assert env[0] == "10.96.0.1" and env[1:4] == ["None", "False", "True"], env
    assert env[4] == hub.namespace(user.name), env
    _ok(k.run("%load_ext trainjob_magics"))
    name = _connect(k, RUNTIME)
    assert name in trainjobs(hub.ctx, hub.namespace(user.name))
    _ok(k.run("%%trainjob\necho from-$(hostname)"), f"from-{name}")
    _ok(k.run("%trainjob_close"))
    until("the TrainJob deleted", lambda: name not in trainjobs(hub.ctx, user_ns(hub, user)), 60)


def user_ns(hub: Hub, user: HubUser) -> str:
    return hub.namespace(user.name)


def test_stopping_the_server_ends_its_sessions_but_not_a_live_detached_run(
    hub: Hub, user: HubUser
) -> None:
    user.spawn()
    ns = user_ns(hub, user)
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics"))
    plain = _connect(k, f"{RUNTIME} --as plain")
    detached = _connect(k, f"{RUNTIME} --as runner")
    _ok(k.run("%%trainjob runner --detach\nsleep 45; echo detached-run-finished"), "Detached run")
    # a second kernel attaches to the run (a new kernel, as after a restart)
    k2 = user.kernel()
    _ok(k2.run("%load_ext trainjob_magics"))
    _ok(k2.run(f"%trainjob_connect --attach {detached}"), detached)
    stopped_at = time.monotonic()
    user.stop()
    until("the server stopped", user.stopped, 120)
    until(
        "the interactive session's TrainJob gone",
        lambda: plain not in trainjobs(hub.ctx, ns),
        STOP_BOUND - (time.monotonic() - stopped_at),
    )
    took = time.monotonic() - stopped_at
    jobs = trainjobs(hub.ctx, ns)
    assert detached in jobs and not _condition(jobs[detached]), jobs.get(detached)
    assert "deletionTimestamp" not in jobs[detached]["metadata"]
    # the run ends by itself, and so does its job (Complete for exit 0)
    until(
        "the detached run's TrainJob Complete",
        lambda: _condition(trainjobs(hub.ctx, ns).get(detached, {})) == "Complete",
        240,
    )
    print(f"\nserver stop: the session's TrainJob gone {took:.1f} s after the DELETE")


def test_the_idle_culler_ends_the_sessions_of_the_server_it_culls(hub: Hub, user: HubUser) -> None:
    user.spawn()
    ns = user_ns(hub, user)
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics"))
    name = _connect(k, RUNTIME)
    k.close()
    venv = Path(json.loads((hub.dir / "settings.json").read_text())["python"]).parent
    culler = subprocess.Popen(
        [
            str(venv / "python"),
            "-m",
            "jupyterhub_idle_culler",
            f"--url={hub.api_url}",
            "--timeout=20",
            "--cull-every=5",
        ],
        env={**os.environ, "JUPYTERHUB_API_TOKEN": hub.admin_token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        until(f"{user.name}'s server culled", user.stopped, 180, interval=1)
        culled_at = time.monotonic()
    finally:
        culler.terminate()
        out = culler.communicate(timeout=30)[0].decode(errors="replace")
    assert user.name in out, out
    until("the TrainJob gone", lambda: name not in trainjobs(hub.ctx, ns), STOP_BOUND)
    print(f"\nculled: the TrainJob gone {time.monotonic() - culled_at:.1f} s after the cull")


def test_a_pod_killed_with_no_grace_takes_its_jobs_with_it(hub: Hub, user: HubUser) -> None:
    """No grace at all (``--grace-period=0 --force``): the kernel cannot delete anything, the
    garbage collector does (the TrainJob is owned by the pod)."""
    user.spawn()
    ns = user_ns(hub, user)
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics"))
    name = _connect(k, RUNTIME)
    pod = f"jupyter-{user.name}"
    controllers.kubectl(
        hub.ctx, "delete", "pod", pod, "-n", ns, "--grace-period=0", "--force", "--wait=false"
    )
    killed_at = time.monotonic()
    until("the TrainJob gone", lambda: name not in trainjobs(hub.ctx, ns), STOP_BOUND)
    print(f"\nno grace: the TrainJob gone {time.monotonic() - killed_at:.1f} s after the pod")


def test_a_kernel_killed_in_a_living_pod_leaves_jobs_the_keep_alive_ends(
    hub: Hub, user: HubUser
) -> None:
    """The kernel SIGKILLed (out of memory, a crash) while its pod lives: nothing deletes the
    TrainJob, its keep-alive ends it after ``idle_timeout``."""
    user.spawn()
    ns = user_ns(hub, user)
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics\n%config TrainJobMagics.idle_timeout = 30"))
    name = _connect(k, RUNTIME)
    pod = f"jupyter-{user.name}"
    controllers.kubectl(
        hub.ctx, "exec", "-n", ns, pod, "--", "pkill", "-KILL", "-f", "ipykernel_launcher"
    )
    killed_at = time.monotonic()
    assert name in trainjobs(hub.ctx, ns)
    until(
        "the TrainJob ended by its keep-alive",
        lambda: _condition(trainjobs(hub.ctx, ns).get(name, {})) == "Complete",
        30 + 90,
    )
    took = time.monotonic() - killed_at
    assert took > 20, f"ended after {took:.1f} s: sooner than the idle timeout allows"
    print(f"\nkernel killed: the keep-alive ended the TrainJob {took:.1f} s after")


def _projected_token_dir(hub: Hub, namespace: str, pod: str) -> Path:
    """The kubelet's folder of the pod's projected ServiceAccount volume, on this host."""
    uid = json.loads(
        controllers.kubectl(hub.ctx, "get", "pod", pod, "-n", namespace, "-o", "json").stdout
    )["metadata"]["uid"]
    found = sorted((hub.ctx.run / "node").rglob(f"pods/{uid}/volumes/kubernetes.io~projected/*"))
    found = [p for p in found if (p / "token").exists()]
    assert found, f"no projected token volume of {pod} under {hub.ctx.run / 'node'}"
    return found[0]


def _accepted(hub: Hub, token: str) -> bool:
    """Whether the API server takes ``token`` (``kubectl auth whoami`` with it alone)."""
    proc = subprocess.run(
        [
            "kubectl",
            f"--server={hub.ctx.apiserver_url}",
            f"--certificate-authority={hub.ctx.pki.ca.cert}",
            f"--token={token}",
            "auth",
            "whoami",
        ],
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0


def _write_like_the_kubelet(volume: Path, token: str) -> None:
    """Replace ``token`` as the kubelet's AtomicWriter does: a new timestamped folder holding
    every file, then the ``..data`` symlink swapped to it in one rename."""
    old = (volume / "..data").resolve()
    new = volume / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.rotated"
    new.mkdir()
    for entry in old.iterdir():
        (new / entry.name).write_bytes(entry.read_bytes())
    (new / "token").write_text(token)
    tmp = volume / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(new.name)
    tmp.rename(volume / "..data")


def test_a_rotated_projected_token_is_used_by_the_next_cell(hub: Hub, user: HubUser) -> None:
    """The pod's token T0 is made invalid (its ServiceAccount deleted and made again: a new
    uid) and the file replaced by a token of the new ServiceAccount, as the kubelet rotates
    it: the next cell gets a 401 with T0, reads the file again and works."""
    user.spawn()
    ns = user_ns(hub, user)
    pod = f"jupyter-{user.name}"
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics"))
    _connect(k, RUNTIME)
    _ok(k.run("%%trainjob\necho before-rotation"), "before-rotation")
    sa = users.SERVICE_ACCOUNT
    volume = _projected_token_dir(hub, ns, pod)
    old_token = (volume / "token").read_text().strip()
    controllers.kubectl(hub.ctx, "delete", "serviceaccount", sa, "-n", ns)
    controllers.kubectl(hub.ctx, "create", "serviceaccount", sa, "-n", ns)
    # the API server caches a token's success for 10 s: wait until it refuses the old one
    until("the pod's first token refused", lambda: not _accepted(hub, old_token), 60)
    token = controllers.kubectl(
        hub.ctx,
        "create",
        "token",
        sa,
        "-n",
        ns,
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod}",
        "--duration=1h",
    ).stdout.strip()
    _write_like_the_kubelet(volume, token)
    _ok(k.run("%%trainjob\necho after-rotation"), "after-rotation")
    _ok(k.run("%trainjob_close"))


def _patch_role(hub: Hub, ns: str, drop: tuple[str, str]) -> None:
    """Remove verb ``drop[1]`` on resource ``drop[0]`` from the user's Role."""
    role = json.loads(
        controllers.kubectl(
            hub.ctx, "get", "role", "trainjob-magics-user", "-n", ns, "-o", "json"
        ).stdout
    )
    for rule in role["rules"]:
        if drop[0] in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != drop[1]]
    role["rules"] = [r for r in role["rules"] if r["verbs"]]
    controllers.kubectl(hub.ctx, "replace", "-f", "-", input=json.dumps(role))


def test_bad_set_ups_say_what_is_missing_in_one_line(hub: Hub, user: HubUser) -> None:
    user.spawn()
    ns = user_ns(hub, user)
    k = user.kernel()
    _ok(k.run("%load_ext trainjob_magics"))
    # a LocalQueue the namespace does not have
    shown = _one_line_error(
        k.run(f"%trainjob_connect {RUNTIME} --queue no-such-queue"), "no-such-queue"
    )
    assert users.LOCAL_QUEUE in shown or "LocalQueue" in shown, shown
    # no pods/exec: the cell names the permission and what to apply
    _connect(k, RUNTIME)
    _patch_role(hub, ns, ("pods/exec", "create"))
    _patch_role(hub, ns, ("pods/exec", "get"))
    shown = _one_line_error(k.run("%%trainjob\necho hi"), "pods/exec")
    assert "rbac" in shown.lower() or "Role" in shown, shown
    _ok(k.run("%trainjob_close"))
    # no create on trainjobs
    _patch_role(hub, ns, ("trainjobs", "create"))
    shown = _one_line_error(k.run(f"%trainjob_connect {RUNTIME}"), "create", "trainjobs")


def test_an_image_without_ipywidgets_says_so_in_one_line(hub: Hub) -> None:
    u = HubUser(hub, prefix="nowidgets")
    try:
        u.spawn()
        k = u.kernel()
        r = _ok(k.run("%load_ext trainjob_magics"), "ipywidgets is not installed")
        assert r.stdout.count("\n") == 1, r.stdout
        _connect(k, RUNTIME)
        _ok(k.run("%%trainjob\necho text-panels"), "text-panels", "exit code 0")
        _ok(k.run("%trainjob_close"))
    finally:
        u.stop()


def test_the_hub_line_and_its_proxy(hub: Hub) -> None:
    """``status`` prints the line users log in with, and the proxy answers on it."""
    out = subprocess.run(
        ["python", "-m", "devtools.realstack", "status"], capture_output=True, text=True
    ).stdout
    line = f"jupyterhub: {hub.url} (any user name, password: {hub.password})"
    assert line in out.splitlines(), out
    assert procs.http_ok(f"{hub.url}hub/api/")
