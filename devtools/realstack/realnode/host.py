"""Where the real node lives on the host, what it changes there, and how that is put back.

Each stack's node gets a network namespace of its own (``tjm-node-N``, N its slot), joined to the
host by one veth pair (``tjmhN`` on the host with ``HOST_IP``, ``eth0`` inside with ``NODE_IP``,
a /30 nothing else routes to). containerd, the kubelet, kube-proxy and CoreDNS run inside it
(``nsenter --net``: the host's mount namespace, so the kubelet's volume mounts are the ones runc
sees). So the pods' bridge, the iptables rules kube-proxy writes and the sysctls the CNI bridge
plugin sets (``net.ipv4.ip_forward`` is per network namespace) never touch the host's, two stacks
(the CI stack and the fault tests' own) do not collide, and deleting the namespace takes them
all away. The kubelet reaches the API server (which listens on 127.0.0.1 only) through a relay
on ``HOST_IP``; the API server reaches the kubelet at ``NODE_IP``.

What stays on the host, recorded before ``up`` in ``marker(slot)`` (in ``/run``, emptied at
boot) and undone by ``restore``:
- mounts under the stack's node folder (the kubelet's root bind mount, pod volumes, containerd's
  overlay rootfs and shm, the pods' network namespaces): unmounted deepest first;
- cgroups: the pods' ``kubepods`` tree under ``cgroup_root(slot)``, one folder below the cgroup
  this process runs in, in every v1 hierarchy: removed deepest first once their tasks are gone;
- folders containerd and the kubelet write wherever their roots are (``FIXED_PATHS``): removed
  when no stack had them before;
- the network namespace and its veth.

A run killed instead of taken down leaves all of this behind, in the folder of a clone that a
later run may not know (CI starts in a fresh clone right after a session is killed): ``up``
claims a slot whose marker is missing or names a stack with no live process, and clears what
that marker names first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

SLOTS = 8
MARKERS = Path("/run/trainjob-magics-realstack")
BRIDGE = "tjm0"  # inside the node's namespace
POD_CIDR = "10.244.0.0/24"  # inside the node's namespace: every stack may use the same
POD_GATEWAY = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DNS = "10.96.0.10"
# written by containerd, runc, CNI and the kubelet whatever their configured roots
FIXED_PATHS = (
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/lib/kubelet"),
    Path("/run/netns"),
)
CGROUP_LEAF = "trainjob-realstack"
HOST_SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


def netns(slot: int) -> str:
    return f"tjm-node-{slot}"


def netns_path(slot: int) -> Path:
    return Path("/run/netns") / netns(slot)


def host_link(slot: int) -> str:
    return f"tjmh{slot}"


def host_ip(slot: int) -> str:
    """The host's end of the veth: where the kubelet reaches the API server's relay."""
    return f"10.250.{slot}.1"


def node_ip(slot: int) -> str:
    """The node's end: its InternalIP, where the API server reaches the kubelet."""
    return f"10.250.{slot}.2"


def marker(slot: int) -> Path:
    return MARKERS / f"slot-{slot}.json"


def socket_dir(slot: int) -> Path:
    """Where the slot's node keeps containerd's sockets: a path short whatever the run folder."""
    return MARKERS / f"slot-{slot}-sockets"


def in_node(slot: int, argv: list[str]) -> list[str]:
    """``argv`` run in the node's network namespace (and the host's mount namespace)."""
    return ["nsenter", f"--net={netns_path(slot)}", "--", *argv]


# --- slots -------------------------------------------------------------------------------------


def _owner_alive(state: dict) -> bool:
    from devtools.realstack import procs

    run = state.get("run")
    return bool(run) and Path(run).is_dir() and bool(procs.running(Path(run)))


def claim_slot(run: Path) -> int:
    """A slot for the stack in ``run``: its own, else the lowest free one. Every slot whose
    stack has no live process (a killed run) is cleared first."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    mine = None
    for slot in range(SLOTS):
        try:
            state = json.loads(marker(slot).read_text())
        except (OSError, ValueError):
            continue
        if state.get("run") == str(run):
            mine = slot
            restore(slot)
        elif not _owner_alive(state):
            restore(slot)
    if mine is not None:
        return mine
    for slot in range(SLOTS):
        if not marker(slot).exists():
            return slot
    from devtools.realstack.procs import StackError

    raise StackError(f"all {SLOTS} real-node slots are in use by live stacks ({MARKERS})")


def record(slot: int, run: Path) -> dict:
    """Write the slot's marker before the node changes anything."""
    others = [s for s in range(SLOTS) if s != slot and marker(s).exists()]
    state = {
        "run": str(run),
        "node_dir": str(run / "node"),
        "cgroup_root": cgroup_root(slot),
        # a fixed path another live stack made is that stack's to remove
        "paths": {str(p): p.exists() or bool(others) for p in FIXED_PATHS},
        "at": time.time(),
    }
    MARKERS.mkdir(parents=True, exist_ok=True)
    marker(slot).write_text(json.dumps(state, indent=2))
    return state


def restore(slot: int) -> list[str]:
    """Undo what the slot's stack changed on the host (its processes are killed if still
    alive); returns what could not be undone (empty when the host is clean)."""
    try:
        state = json.loads(marker(slot).read_text())
    except (OSError, ValueError):
        return []
    left: list[str] = []
    node_dir = Path(state.get("node_dir", "/nonexistent-realstack-node"))
    kill_pids(Path(state["run"]) / "pids" if state.get("run") else None)
    kill_under(node_dir)
    # the shims name only containerd's socket, which lives in the slot's socket folder
    kill_under(socket_dir(slot))
    left += remove_cgroup_root(state.get("cgroup_root", cgroup_root(slot)))
    left += unmount_under([node_dir])
    delete_netns(slot)
    shutil.rmtree(socket_dir(slot), ignore_errors=True)
    others = [s for s in range(SLOTS) if s != slot and marker(s).exists()]
    if others:
        _hand_over_paths(state.get("paths", {}), others)
    if not others:
        left += unmount_under([p for p in FIXED_PATHS if p != Path("/run/netns")])
        for path, existed in state.get("paths", {}).items():
            if not existed:
                if path == "/run/netns":
                    # `ip netns add` made it a mount of itself: gone only when empty
                    if Path(path).is_dir() and not any(Path(path).iterdir()):
                        subprocess.run(["umount", path], capture_output=True)
                        with contextlib.suppress(OSError):
                            Path(path).rmdir()
                else:
                    shutil.rmtree(path, ignore_errors=True)
    if not left:
        marker(slot).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            MARKERS.rmdir()
    return left


def _hand_over_paths(paths: dict[str, bool], others: list[int]) -> None:
    """A fixed path this stack made while others ran stays theirs to remove: the last one down
    removes it (stacks that overlapped left /run/containerd behind)."""
    made = [path for path, existed in paths.items() if not existed]
    for other in others:
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(marker(other).read_text())
            state["paths"] = {**state.get("paths", {}), **dict.fromkeys(made, False)}
            marker(other).write_text(json.dumps(state, indent=2))


# --- network -----------------------------------------------------------------------------------


def make_netns(slot: int) -> None:
    """The node's namespace, its veth to the host and its loopback."""
    delete_netns(slot)
    ns, link = netns(slot), host_link(slot)
    _run("ip", "netns", "add", ns)
    _run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _run("ip", "addr", "add", f"{host_ip(slot)}/30", "dev", link)
    _run("ip", "link", "set", link, "up")
    _run("ip", "-n", ns, "addr", "add", f"{node_ip(slot)}/30", "dev", "eth0")
    _run("ip", "-n", ns, "link", "set", "eth0", "up")
    _run("ip", "-n", ns, "link", "set", "lo", "up")


def delete_netns(slot: int) -> None:
    if Path(f"/sys/class/net/{host_link(slot)}").exists():
        subprocess.run(["ip", "link", "delete", host_link(slot)], capture_output=True)
    if netns_path(slot).exists():
        subprocess.run(["ip", "netns", "delete", netns(slot)], capture_output=True)
        if netns_path(slot).exists():  # a mount left by a killed `ip netns add`
            subprocess.run(["umount", "-l", str(netns_path(slot))], capture_output=True)
            netns_path(slot).unlink(missing_ok=True)


def _run(*argv: str) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if proc.returncode != 0:
        from devtools.realstack.procs import StackError

        raise StackError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")


# --- cgroups -----------------------------------------------------------------------------------


def own_cgroup() -> str:
    """This process's cgroup (v1 ``memory`` first: that is where this machine's limit is)."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(","):
            paths[c] = path
    return paths.get("memory") or max(paths.values(), key=len, default="/")


def cgroup_root(slot: int) -> str:
    """The kubelet's ``cgroupRoot``: a folder of ours under this process's cgroup."""
    return f"{own_cgroup().rstrip('/')}/{CGROUP_LEAF}-{slot}"


def hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if fstype == "cgroup":
            found.append(Path(mnt))
    return found


def mounted_cgroups() -> list[Path]:
    """Every mounted cgroup hierarchy: v1's, and v2's (in hybrid mode, ``unified``: runc makes
    each container's cgroup there too, so cleaning up looks there as well)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(mnt))
    return found


def make_cgroup_root(root: str) -> None:
    """Create ``root`` in every v1 hierarchy (the kubelet refuses a cgroupRoot that is missing),
    cpuset's cpus and mems copied down (a new v1 cpuset is empty)."""
    for h in hierarchies():
        parent = h
        for part in root.strip("/").split("/"):
            child = parent / part
            child.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (child / knob).exists() and not (child / knob).read_text().strip():
                    (child / knob).write_text((parent / knob).read_text())
            parent = child


def cgroup_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for h in mounted_cgroups():
        base = h / root.lstrip("/")
        if base.is_dir():
            for procs in base.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in procs.read_text().split())
    return pids


def kill_cgroup(root: str, timeout: float = 15.0) -> None:
    """SIGKILL every task under ``root`` until none is left (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(root)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove_cgroup_root(root: str, timeout: float = 15.0) -> list[str]:
    """SIGKILL what still runs under ``root``, then remove its folders deepest first; returns
    what could not be removed."""
    kill_cgroup(root, timeout)
    left = []
    for h in mounted_cgroups():
        base = h / root.lstrip("/")
        if not base.is_dir():
            continue
        dirs = sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, base]:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(str(d))
    return left


# --- mounts and processes ----------------------------------------------------------------------


def mounts_under(prefixes: list[Path]) -> list[str]:
    """Mount points under any of ``prefixes``, deepest first."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if any(mnt == str(p) or mnt.startswith(f"{p}/") for p in prefixes):
            found.append(mnt)
    return sorted(set(found), key=lambda m: -m.count("/"))


def unmount_under(prefixes: list[Path]) -> list[str]:
    """Unmount (lazily when busy) everything under ``prefixes``; returns what is still mounted."""
    for _ in range(5):
        mounts = mounts_under(prefixes)
        if not mounts:
            return []
        for mnt in mounts:
            if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mnt], capture_output=True)
    return mounts_under(prefixes)


def kill_pids(folder: Path | None) -> None:
    """SIGKILL the process groups of a run's pid files (the relay names no folder of ours)."""
    if folder is None or not folder.is_dir():
        return
    for pid_file in folder.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError, ProcessLookupError, PermissionError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def _ancestors() -> set[int]:
    """This process and its parents: never ours to kill, whatever their command lines say."""
    chain, pid = set(), os.getpid()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


def processes_under(prefix: Path) -> set[int]:
    """Processes whose command line names ``prefix`` (this process and its parents excluded)."""
    found = set()
    skip = _ancestors()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in skip:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{prefix}/" in cmdline or cmdline.rstrip().endswith(str(prefix)):
            found.add(int(proc.name))
    return found


def kill_under(prefix: Path, wait: float = 15.0) -> int:
    """SIGKILL every process whose command line names ``prefix`` (a killed run's containerd,
    shims, kubelet, kube-proxy, CoreDNS) and wait (at most ``wait`` s) until they are gone."""
    from devtools.realstack import procs

    pids = processes_under(prefix)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    procs.wait_gone(pids, wait)
    return len(pids)


def snapshot() -> dict:
    """What a node may change on the host, as a value to compare before ``up`` and after
    ``down``."""
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {
        "links": sorted(p.name for p in Path("/sys/class/net").iterdir()),
        "sysctls": {name: _sysctl(name) for name in HOST_SYSCTLS},
        "iptables": sorted(
            line for line in rules.splitlines() if line and not line.startswith("#")
        ),
        "mounts": sorted(
            line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ),
        "paths": {str(p): p.exists() for p in FIXED_PATHS},
        "cgroups": {
            str(h): sorted(str(p) for p in (h / own_cgroup().lstrip("/")).glob("*") if p.is_dir())
            for h in hierarchies()
            if (h / own_cgroup().lstrip("/")).is_dir()
        },
        "netns": sorted(p.name for p in Path("/run/netns").iterdir())
        if Path("/run/netns").is_dir()
        else [],
    }


def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def stacks_on_host() -> dict[int, str]:
    """slot -> node folder of every stack whose marker is on the host."""
    found = {}
    for slot in range(SLOTS):
        with contextlib.suppress(OSError, ValueError):
            found[slot] = json.loads(marker(slot).read_text()).get("node_dir", "")
    return found


def only_slot(snap: dict, slot: int, others: dict[int, str]) -> dict:
    """``snap`` without what the stacks of ``others`` (slot -> node folder) own, so a test can
    compare the host before and after its own stack while other stacks come and go."""
    theirs = {s: d for s, d in others.items() if s != slot}
    links = {host_link(s) for s in theirs}
    spaces = {netns(s) for s in theirs}
    leaves = {f"{CGROUP_LEAF}-{s}" for s in theirs}
    dirs = [d for d in theirs.values() if d] + [str(netns_path(s)) for s in theirs]
    view = dict(snap)
    view["links"] = [x for x in snap["links"] if x not in links]
    view["netns"] = [x for x in snap["netns"] if x not in spaces]
    view["mounts"] = [
        m for m in snap["mounts"] if not any(m == d or m.startswith(f"{d}/") for d in dirs)
    ]
    view["cgroups"] = {
        h: [c for c in cs if Path(c).name not in leaves] for h, cs in snap["cgroups"].items()
    }
    if theirs:  # a fixed folder another stack made is that stack's
        view.pop("paths", None)
    return view
