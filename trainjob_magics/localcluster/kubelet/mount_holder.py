"""The first process of a pod that has mounts: it makes the pod's mount namespace and keeps it.

Run as ``python -I mount_holder.py PLAN.json`` by ``kubelet/mount_namespace.py``. It
``unshare(CLONE_NEWNS)`` (as root) or ``unshare(CLONE_NEWUSER | CLONE_NEWNS)`` (a user who is
not root, where unprivileged user namespaces are allowed), makes every mount private, then for
each mount of the plan (parents first) creates the mount point and mounts:

- a bind mount of the source (read-only by a remount when asked);
- a tmpfs (``size=``) for an emptyDir of medium Memory.

A mount point that does not exist is made without touching this machine's filesystem: its
nearest existing parent directory is covered, inside the namespace only, by a tmpfs that holds
a bind mount of each of the directory's entries (symlinks copied), plus the new directory.

Its working directory is then the pod's (``workdir``), which the pod's processes take with
its root (``nsenter -r -w``). It prints ``ready root`` or ``ready userns`` (or
``error: <text>`` and exits 1) on stdout, then waits until it is killed (by the kubelet when
the pod goes, or with the thread that started it: ``PR_SET_PDEATHSIG``); the pod's processes
join the namespace with ``nsenter -t PID`` meanwhile. Nothing here imports the
rest of the package (``-I``, a single thread).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import signal
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    _check(
        _libc.mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            flags,
            data.encode() if data is not None else None,
        ),
        f"mount {source or fstype} on {target}",
    )


def enter_namespace() -> str:
    """A new mount namespace (as root), else a user and mount namespace; returns the mode."""
    if _libc.unshare(CLONE_NEWNS) == 0:
        mode = "root"
    else:
        first = ctypes.get_errno()
        uid, gid = os.getuid(), os.getgid()
        if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            second = ctypes.get_errno()
            raise OSError(
                second,
                f"unshare: {os.strerror(first)} (mount namespace), {os.strerror(second)} "
                "(user namespace)",
            )
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"{gid} {gid} 1")
        mode = "userns"
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    return mode


# Where this namespace may make mount points without changing this machine's filesystem:
# directories it covered with a tmpfs or made inside one (not their bound entries), and the
# trees of the volumes it mounted (a mount point inside a volume is made in the volume, as a
# container runtime does).
_own_dirs: set[str] = set()
_own_trees: set[str] = set()


_staging = ""  # an empty directory of the cluster's own, for covering "/"


def _cover(directory: str) -> None:
    """A tmpfs on ``directory`` with a bind mount of each entry, so that new entries can be
    made in it without changing the directory outside the namespace.

    "/" is covered through ``_staging``: the tmpfs is filled there, moved onto "/", and this
    process changes its root to it (a process keeps the root it had under a mount on "/";
    ``nsenter``/setns(2) lands on the topmost mount of the namespace's root).
    """
    st = os.stat(directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    where = _staging if directory == "/" else directory
    try:
        entries = os.listdir(fd)
        mode = stat.S_IMODE(st.st_mode)
        mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")
        for name in entries:
            old = f"/proc/self/fd/{fd}/{name}"
            new = os.path.join(where, name)
            try:
                est = os.lstat(old)
            except OSError:
                continue
            if stat.S_ISLNK(est.st_mode):
                os.symlink(os.readlink(old), new)
                continue
            if stat.S_ISDIR(est.st_mode):
                os.mkdir(new)
            else:
                open(new, "w").close()
            try:
                mount(old, new, None, MS_BIND | MS_REC)
            except OSError:
                continue  # e.g. a file this user may not bind: left as an empty placeholder
        if os.getuid() == 0:
            os.chown(where, st.st_uid, st.st_gid)
    finally:
        os.close(fd)
    if directory == "/":
        top = os.open(_staging, os.O_RDONLY | os.O_DIRECTORY)
        try:
            mount(_staging, "/", None, MS_MOVE)
            os.fchdir(top)
            os.chroot(".")
            os.chdir("/")
        finally:
            os.close(top)
    _own_dirs.add(directory)


def ensure_mount_point(path: str, is_file: bool) -> str:
    """``path`` exists (as a directory, or a file); returns its real path."""
    if os.path.lexists(path):
        return os.path.realpath(path)
    parent = ensure_mount_point(os.path.dirname(path.rstrip("/")) or "/", False)
    target = os.path.join(parent, os.path.basename(path.rstrip("/")))
    if not _writable_here(parent):
        _cover(parent)
    if is_file:
        open(target, "w").close()
    else:
        os.mkdir(target, 0o755)
        if parent in _own_dirs:
            _own_dirs.add(target)
    return target


def _writable_here(directory: str) -> bool:
    """Whether a new entry in ``directory`` stays inside this namespace or its volumes."""
    if directory in _own_dirs:
        return True
    return any(directory == t or directory.startswith(t.rstrip("/") + "/") for t in _own_trees)


def apply(plan: list[dict]) -> None:
    for m in plan:
        target = ensure_mount_point(m["target"], bool(m.get("file")))
        if m.get("tmpfs"):
            size = m.get("tmpfs_size")
            data = "mode=1777" + (f",size={int(size)}" if size else "")
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, data)
            _own_trees.add(target)
            continue
        mount(m["source"], target, None, MS_BIND | MS_REC)
        _own_trees.add(target)
        if m.get("read_only"):
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            try:
                mount(None, target, None, flags)
            except OSError as exc:
                if exc.errno != errno.EPERM:
                    raise
                # in a user namespace the locked flags of the mount must be kept
                vfs = os.statvfs(target).f_flag
                for st_flag, ms_flag in (
                    (os.ST_NOSUID, MS_NOSUID),
                    (os.ST_NODEV, MS_NODEV),
                    (os.ST_NOEXEC, MS_NOEXEC),
                ):
                    if vfs & st_flag:
                        flags |= ms_flag
                mount(None, target, None, flags)


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the thread that started this process ends (the local cluster stops)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def main() -> int:
    global _staging
    _die_with_parent(int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid())
    with open(sys.argv[1]) as fh:
        doc = json.load(fh)
    plan, _staging = doc["mounts"], doc["staging"]
    try:
        mode = enter_namespace()
        apply(plan)
        # the pod's processes take this process's root and working directory (nsenter -r -w)
        # the container's workingDir when it names a directory of the namespace (a volume)
        working_dir = doc.get("working_dir") or ""
        os.chdir(working_dir if working_dir and os.path.isdir(working_dir) else doc["workdir"])
    except OSError as exc:
        print(f"error: {exc.strerror or exc}", flush=True)
        return 1
    print(f"ready {mode}", flush=True)
    while True:  # until the kubelet kills it (or its thread ends: PR_SET_PDEATHSIG)
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
