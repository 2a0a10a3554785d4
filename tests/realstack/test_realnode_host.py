"""The real node's host bookkeeping (devtools/realstack/realnode/host.py) on this machine: a slot
left behind by a killed run (its network namespace and veth, a process, a mount, a cgroup) is
cleared by the next claim, and a clean slot leaves nothing behind. Needs root and iproute2, as
the real node does."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from devtools.realstack.realnode import host

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _root_and_ip() -> None:
    why = ""
    if os.geteuid() != 0:
        why = "the real node's host setup needs root"
    elif shutil.which("ip") is None or shutil.which("nsenter") is None:
        why = "iproute2 (ip) and util-linux (nsenter) are needed"
    if why:
        if REQUIRE:
            pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
        pytest.skip(why)


def _free_slot() -> int:
    for slot in range(host.SLOTS - 1, -1, -1):
        if not host.marker(slot).exists() and not host.netns_path(slot).exists():
            return slot
    pytest.skip("no free real-node slot on this host")


def test_a_killed_runs_leftovers_are_cleared_by_the_next_claim(tmp_path: Path) -> None:
    slot = _free_slot()
    before = host.snapshot()
    run = tmp_path / "killed-run"
    node = run / "node"
    (node / "kubelet" / "root").mkdir(parents=True)
    (run / "pids").mkdir()
    host.record(slot, run)
    # what a killed run leaves: its namespace and veth, a mount, a cgroup with a task, a process
    host.make_netns(slot)
    mnt = node / "kubelet" / "root"
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], check=True)
    root = host.cgroup_root(slot)
    host.make_cgroup_root(root)
    sleeper = subprocess.Popen(
        host.in_node(slot, ["sh", "-c", "exec sleep 300", str(node / "kubelet")]),
        start_new_session=True,
    )
    memory = Path("/sys/fs/cgroup/memory") / root.lstrip("/") / "pod-x"
    memory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            (memory / "cgroup.procs").write_text(str(sleeper.pid))
            break
        except OSError:
            time.sleep(0.05)  # nsenter has not exec'd sleep yet
    (run / "pids" / "relay.pid").write_text(str(sleeper.pid))
    shutil.rmtree(run / "pids")  # the folder of a clone that is gone: only the marker knows
    assert host.netns_path(slot).exists() and host.mounts_under([node])

    # a new run claims the slot: the marker names a stack with no live process
    state = json.loads(host.marker(slot).read_text())
    assert state["run"] == str(run)
    new_run = tmp_path / "new-run"
    got = host.claim_slot(new_run)
    try:
        assert not host.marker(slot).exists() or got == slot
        sleeper.wait(timeout=10)
        assert sleeper.returncode is not None
        assert not host.netns_path(slot).exists()
        assert not Path(f"/sys/class/net/{host.host_link(slot)}").exists()
        assert not host.mounts_under([node])
        assert not (Path("/sys/fs/cgroup/memory") / root.lstrip("/")).exists()
        after = host.snapshot()
        for key in ("links", "sysctls", "iptables", "netns", "cgroups"):
            assert after[key] == before[key], key
    finally:
        host.marker(got).unlink(missing_ok=True)
        if sleeper.poll() is None:
            sleeper.kill()


def test_the_node_namespace_keeps_its_network_changes_to_itself(tmp_path: Path) -> None:
    slot = _free_slot()
    run = tmp_path / "run"
    (run / "node").mkdir(parents=True)
    before = host.snapshot()
    host.record(slot, run)
    try:
        host.make_netns(slot)
        # what the CNI bridge plugin and kube-proxy do, inside the node
        for argv in (
            ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
            ["iptables", "-t", "nat", "-N", "KUBE-SERVICES"],
            ["ip", "link", "add", host.BRIDGE, "type", "bridge"],
        ):
            subprocess.run(host.in_node(slot, argv), check=True, capture_output=True)
        inside = subprocess.run(
            host.in_node(slot, ["cat", "/proc/sys/net/ipv4/ip_forward"]),
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert inside == "1"
        during = host.snapshot()
        assert during["sysctls"] == before["sysctls"]
        assert during["iptables"] == before["iptables"]
        assert host.BRIDGE not in during["links"] or host.BRIDGE in before["links"]
        assert host.host_link(slot) in during["links"]
        # the host reaches a port the node listens on, across the veth
        listener = subprocess.Popen(
            host.in_node(slot, ["socat", f"TCP-LISTEN:7000,bind={host.node_ip(slot)}", "STDOUT"]),
            stdout=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                sent = subprocess.run(
                    ["socat", "-", f"TCP:{host.node_ip(slot)}:7000"],
                    input=b"hello\n",
                    capture_output=True,
                )
                if sent.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert listener.communicate(timeout=10)[0] == b"hello\n"
        finally:
            listener.kill()
    finally:
        left = host.restore(slot)
    assert left == []
    assert host.snapshot() == before


def test_a_cgroup_root_is_removed_from_every_hierarchy_v2s_too() -> None:
    """In hybrid mode runc makes each container's cgroup in v2's ``unified`` hierarchy too:
    ``down`` found 15 empty ``trainjob-realstack-N`` trees left there before it looked."""
    mounts = host.mounted_cgroups()
    v2 = [m for m in mounts if m not in host.hierarchies()]
    if not v2:
        pytest.skip("no cgroup v2 hierarchy is mounted on this host")
    root = f"trainjob-test-{os.getpid()}"
    host.make_cgroup_root(root)
    child = v2[0] / root / "pod" / "container"
    child.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (child / "cgroup.procs").write_text(str(sleeper.pid))
        assert sleeper.pid in host.cgroup_pids(root)
        assert host.remove_cgroup_root(root) == []
        assert sleeper.wait(timeout=30) == -9
        assert [m for m in mounts if (m / root).exists()] == []
    finally:
        sleeper.kill()
        sleeper.wait()
        host.remove_cgroup_root(root)


def test_a_fixed_path_made_while_another_stack_ran_is_left_to_the_last_one_down(
    tmp_path: Path,
) -> None:
    """Two stacks overlap; the first made /run/containerd. Taken down first, it leaves the
    folder to the other, whose marker now says it was not there before: the last one down
    removes it (overlapping stacks left /run/containerd behind)."""
    free = [
        s
        for s in range(host.SLOTS)
        if not host.marker(s).exists() and not host.netns_path(s).exists()
    ]
    if len(free) < 2:
        pytest.skip("two free real-node slots are needed on this host")
    first, second = free[:2]
    made = str(host.FIXED_PATHS[0])
    try:
        state = host.record(first, tmp_path / "first")
        state["paths"][made] = False  # as when the first stack made it
        host.marker(first).write_text(json.dumps(state))
        assert host.record(second, tmp_path / "second")["paths"][made] is True  # another ran
        host.restore(first)
        assert json.loads(host.marker(second).read_text())["paths"][made] is False
    finally:
        for slot in (first, second):
            host.marker(slot).unlink(missing_ok=True)
        if not any(host.marker(s).exists() for s in range(host.SLOTS)):
            with contextlib.suppress(OSError):
                host.MARKERS.rmdir()
