"""The local cluster's imitation of Open MPI's mpirun (stdlib only): only the fallback.

:mod:`.mpirun` runs the real Open MPI ``mpirun`` whenever it is installed; this imitation runs
only where it is not (a quickstart without ``openmpi-bin``), or with
``TRAINJOB_LOCAL_MPIRUN=imitation``.

Reads the job's hostfile (``--hostfile``/``-H``; else ``$TRAINJOB_LOCAL_HOSTFILE``; the usual
``/etc/mpi/hostfile`` is mapped to it) and its ``<hostfile>.json`` sidecar, which maps each
hostname to that pod's ``workdir`` and ``env``. It starts every rank concurrently "in" its pod:
the pod's working directory (mpirun's cwd mapped into the pod, as OpenMPI keeps the cwd on every
node) and environment (HOSTNAME, HOME, ...) plus ``OMPI_COMM_WORLD_*``/``PMIX_RANK``.

Like OpenMPI: ranks are mapped by slot (or ``--map-by node``, ``-N``/``ppr:N:node``); asking for
more slots than exist fails unless ``--oversubscribe``; stdin goes to rank 0; the first rank
that exits non-zero aborts the job and its code is mpirun's exit code; SIGINT/SIGTERM make
mpirun SIGTERM every rank's process tree, then SIGKILL it after a grace period; SIGUSR1/SIGUSR2
are forwarded. Output passes straight through (no buffering) unless ``--tag-output``.
Ranks stay in mpirun's process group so killing that group stops all of them.
Without a hostfile or -H it runs the ranks locally. Root is allowed without
``--allow-run-as-root`` (the local cluster runs as whoever started it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

KILL_GRACE = 2.0
STANDARD_HOSTFILE = "/etc/mpi/hostfile"
BAR = "-" * 74

VALUE_OPTS = {
    "np": "np", "n": "np", "c": "np",
    "hostfile": "hostfile", "machinefile": "hostfile", "default-hostfile": "hostfile",
    "H": "host", "host": "host",
    "x": "x",
    "N": "npernode", "npernode": "npernode",
    "map-by": "map_by", "bind-to": None, "rank-by": None,
    "wdir": "wdir", "wd": "wdir",
    "stdin": "stdin",
    "prefix": None, "path": None, "output-filename": None, "timeout": None,
    "tmpdir": None, "cpus-per-proc": None, "cpus-per-rank": None, "npersocket": None,
    "report-bindings-file": None, "display-map-file": None,
}  # fmt: skip
PAIR_OPTS = {"mca", "gmca", "omca"}
FLAG_OPTS = {
    "tag-output": "tag_output", "oversubscribe": "oversubscribe",
    "nooversubscribe": "no_oversubscribe",
    "merge-stderr-to-stdout": "merge_stderr",
    "bynode": "bynode", "byslot": "byslot",
    "allow-run-as-root": None, "timestamp-output": None, "report-bindings": None,
    "display-map": "display_map", "display-allocation": None, "display-devel-map": None,
    "q": None, "quiet": None, "v": None, "verbose": None, "noprefix": None,
    "use-hwthread-cpus": None, "bind-to-core": None, "bind-to-socket": None,
    "enable-recovery": None, "disable-recovery": None, "show-progress": None,
}  # fmt: skip


class UsageError(Exception):
    """A command line mpirun rejects."""


@dataclass
class Options:
    np: int | None = None
    hostfile: str | None = None
    hosts: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)
    npernode: int | None = None
    map_by: str = "slot"
    wdir: str | None = None
    stdin: str = "0"
    tag_output: bool = False
    oversubscribe: bool = False
    merge_stderr: bool = False
    display_map: bool = False
    command: list[str] = field(default_factory=list)


def parse_args(argv: list[str]) -> Options:
    """Parse OpenMPI-style options (single or double dash, ``--opt=value``) up to the command."""
    opts = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            opts.command = argv[i + 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            opts.command = argv[i:]
            break
        name = arg.lstrip("-")
        value: str | None = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in ("V", "version"):
            print("mpirun (Open MPI) 4.1.5 [trainjob-magics local cluster shim]")
            sys.exit(0)
        if name in ("h", "help"):
            print(__doc__)
            sys.exit(0)
        if name in FLAG_OPTS:
            attr = FLAG_OPTS[name]
            if attr == "no_oversubscribe":
                opts.oversubscribe = False
            elif attr == "bynode":
                opts.map_by = "node"
            elif attr == "byslot":
                opts.map_by = "slot"
            elif attr:
                setattr(opts, attr, True)
            i += 1
            continue
        if name in PAIR_OPTS:
            i += 3
            continue
        if name not in VALUE_OPTS:
            raise UsageError(f'unknown option "{arg}"')
        if value is None:
            if i + 1 >= len(argv):
                raise UsageError(f'option "{arg}" needs a value')
            value = argv[i + 1]
            i += 2
        else:
            i += 1
        _set_value(opts, VALUE_OPTS[name], arg, value)
    if not opts.command:
        raise UsageError("no executable was specified on the mpirun command line")
    return opts


def _set_value(opts: Options, attr: str | None, arg: str, value: str) -> None:
    if attr is None:
        return
    if attr in ("np", "npernode"):
        try:
            setattr(opts, attr, int(value))
        except ValueError:
            raise UsageError(f'option "{arg}" needs a number, got "{value}"') from None
    elif attr == "host":
        opts.hosts.extend(h for h in value.split(",") if h)
    elif attr == "x":
        opts.exports.append(value)
    elif attr == "map_by":
        spec = value.split(":")
        if spec[0].lower() == "ppr" and len(spec) >= 3:
            opts.npernode = int(spec[1])
        else:
            opts.map_by = spec[0].lower()
    else:
        setattr(opts, attr, value)


def read_hostfile(path: str) -> list[tuple[str, int]]:
    """``host [slots=N] [max_slots=M]`` lines; ``#`` comments."""
    hosts: list[tuple[str, int]] = []
    with open(path) as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            slots = 1
            for word in words[1:]:
                key, _, val = word.partition("=")
                if key in ("slots", "cpu") and val.isdigit():
                    slots = int(val)
            hosts.append((words[0], slots))
    return hosts


def hosts_from_option(specs: list[str]) -> list[tuple[str, int]]:
    """``-H a,b:2,a`` -> [(a, 2), (b, 2)]."""
    counts: dict[str, int] = {}
    for spec in specs:
        name, _, slots = spec.partition(":")
        counts[name] = counts.get(name, 0) + (int(slots) if slots.isdigit() else 1)
    return list(counts.items())


def resolve_hostfile(opts: Options) -> str | None:
    local = os.environ.get("TRAINJOB_LOCAL_HOSTFILE") or None
    path = opts.hostfile
    if path is None:
        default = os.environ.get("OMPI_MCA_orte_default_hostfile")  # noqa: SIM112
        path = local or (default if default and os.path.exists(default) else None)
    elif not os.path.exists(path) and path == STANDARD_HOSTFILE and local:
        path = local
    if path is not None and not os.path.exists(path):
        raise UsageError(f"open failed for hostfile {path}: No such file or directory")
    return path


def load_sidecar(hostfile: str | None) -> dict[str, dict]:
    if hostfile is None:
        return {}
    candidates = [hostfile + ".json"]
    local = os.environ.get("TRAINJOB_LOCAL_HOSTFILE")
    if local:
        candidates.append(local + ".json")
    for path in candidates:
        if os.path.exists(path):
            with open(path) as fh:
                return json.load(fh)
    return {}


def place(opts: Options, hosts: list[tuple[str, int]]) -> list[str]:
    """Host of each rank, in rank order."""
    if opts.npernode is not None:
        per_host = [(h, opts.npernode) for h, _ in hosts]
        capacity = sum(n for _, n in per_host)
        np = opts.np if opts.np is not None else capacity
        hosts, oversubscribe = per_host, opts.oversubscribe
    else:
        capacity = sum(n for _, n in hosts)
        np = opts.np if opts.np is not None else capacity
        oversubscribe = opts.oversubscribe
    if np < 1:
        raise UsageError("the number of processes (-np) must be at least 1")
    if np > capacity and not oversubscribe:
        raise UsageError(
            f"There are not enough slots available in the system to satisfy the {np}\n"
            f"slots that were requested by the application:\n\n  {opts.command[0]}\n\n"
            "Either request fewer slots for your application, or make more slots\n"
            "available for use (or use --oversubscribe)."
        )
    order: list[str] = []
    if opts.map_by == "node":
        while len(order) < np:
            for host, _ in hosts:
                if len(order) < np:
                    order.append(host)
        return order
    while len(order) < np:  # by slot: fill each host, then wrap around (oversubscribe)
        for host, slots in hosts:
            order.extend([host] * min(slots, np - len(order)))
    return order


@dataclass
class Rank:
    rank: int
    host: str
    proc: subprocess.Popen | None = None
    code: int | None = None


class Job:
    """The running ranks, their exit codes, and signal handling."""

    def __init__(self, opts: Options, order: list[str], sidecar: dict[str, dict]) -> None:
        self.opts = opts
        self.sidecar = sidecar
        self.ranks = [Rank(i, h) for i, h in enumerate(order)]
        self.first_failure: Rank | None = None
        self.aborting = False
        self.signalled: int | None = None
        self.out_lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    # --- placement into pods --------------------------------------------------------------
    def _own_workdir(self) -> str:
        me = self.sidecar.get(os.environ.get("HOSTNAME", ""), {})
        return me.get("workdir") or os.environ.get("HOME") or os.getcwd()

    def _is_local(self, host: str) -> bool:
        return host in ("localhost", "127.0.0.1", os.environ.get("HOSTNAME"))

    def _cwd(self, host: str) -> str:
        if self.opts.wdir:
            return self.opts.wdir
        cwd = os.getcwd()
        entry = self.sidecar.get(host)
        if entry is None or self._is_local(host) or not entry.get("workdir"):
            return cwd
        own, theirs = os.path.realpath(self._own_workdir()), entry["workdir"]
        rel = os.path.relpath(os.path.realpath(cwd), own)
        if not rel.startswith(".."):
            mapped = os.path.normpath(os.path.join(theirs, rel))
            if os.path.isdir(mapped):
                return mapped
        return theirs

    def _env(self, rank: Rank, local_rank: int, local_size: int) -> dict[str, str]:
        env = dict(os.environ)
        entry = self.sidecar.get(rank.host)
        if not self._is_local(rank.host):  # a rank on another pod gets that pod's environment
            env.update((entry or {}).get("env") or {"HOSTNAME": rank.host})
        for spec in self.opts.exports:
            name, eq, value = spec.partition("=")
            if eq:
                env[name] = value
            elif name in os.environ:
                env[name] = os.environ[name]
        size = str(len(self.ranks))
        env.update(
            {
                "OMPI_COMM_WORLD_RANK": str(rank.rank),
                "OMPI_COMM_WORLD_SIZE": size,
                "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
                "OMPI_COMM_WORLD_NODE_RANK": str(local_rank),
                "OMPI_UNIVERSE_SIZE": size,
                "PMIX_RANK": str(rank.rank),
            }
        )
        return env

    # --- launching ------------------------------------------------------------------------
    def start(self) -> None:
        per_host: dict[str, int] = {}
        for r in self.ranks:
            per_host[r.host] = per_host.get(r.host, 0) + 1
        seen: dict[str, int] = {}
        for r in self.ranks:
            if self.aborting:  # interrupted while launching: start no more ranks
                return
            local_rank = seen.get(r.host, 0)
            seen[r.host] = local_rank + 1
            env = self._env(r, local_rank, per_host[r.host])
            exe = self.opts.command[0]
            if "/" not in exe and shutil.which(exe, path=env.get("PATH")) is None:
                self._not_found(r, exe)
                return
            tag = self.opts.tag_output
            stdin = None if self._gets_stdin(r.rank) else subprocess.DEVNULL
            stderr = subprocess.STDOUT if self.opts.merge_stderr else None
            argv = list(self.opts.command)
            entry = self.sidecar.get(r.host) or {}
            if entry.get("enter") and not self._is_local(r.host):
                argv = [*entry["enter"], *argv]  # into that pod's mount namespace
            try:
                r.proc = subprocess.Popen(
                    argv,
                    cwd=self._cwd(r.host),
                    env=env,
                    stdin=stdin,
                    stdout=subprocess.PIPE if tag else None,
                    stderr=subprocess.PIPE if tag and stderr is None else stderr,
                    bufsize=0,
                )
            except OSError:
                self._not_found(r, exe)
                return
            if self.aborting:  # a signal came while Popen ran: this rank missed the SIGTERM
                self._signal_tree(signal.SIGTERM)
            if tag:
                self._tag(r, r.proc.stdout, sys.stdout.buffer, "stdout")
                if r.proc.stderr is not None:
                    self._tag(r, r.proc.stderr, sys.stderr.buffer, "stderr")

    def _gets_stdin(self, rank: int) -> bool:
        which = self.opts.stdin
        return which == "all" or (which.isdigit() and int(which) == rank)

    def _not_found(self, rank: Rank, exe: str) -> None:
        sys.stderr.write(
            f"{BAR}\nmpirun was unable to find the specified executable file, and therefore\n"
            "did not launch the job.  This error was first reported for process\n"
            f"rank {rank.rank}; it may have occurred for other processes as well.\n\n"
            f"Node:       {rank.host}\nExecutable: {exe}\n{BAR}\n"
        )
        self.first_failure = self.first_failure or Rank(rank.rank, rank.host, code=1)
        self.abort()

    def _tag(self, rank: Rank, pipe, out, stream: str) -> None:
        prefix = f"[1,{rank.rank}]<{stream}>:".encode()

        def pump() -> None:
            pending = b""
            while True:
                chunk = os.read(pipe.fileno(), 65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    self._write(out, b"".join(prefix + ln + b"\n" for ln in lines))
            if pending:
                self._write(out, prefix + pending + b"\n")
            pipe.close()

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _write(self, out, data: bytes) -> None:
        with self.out_lock:
            try:
                out.write(data)
                out.flush()
            except (BrokenPipeError, ValueError):
                pass

    # --- signals and teardown -------------------------------------------------------------
    def _tree(self) -> list[int]:
        """Pids of every running rank and all of its descendants."""
        roots = [r.proc.pid for r in self.ranks if r.proc is not None and r.code is None]
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        found, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def _signal_tree(self, sig: int) -> None:
        for pid in self._tree():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def abort(self) -> None:
        """SIGTERM every rank's tree, SIGKILL what is left after the grace period."""
        if self.aborting:
            return
        self.aborting = True
        self._signal_tree(signal.SIGTERM)
        timer = threading.Timer(KILL_GRACE, self._signal_tree, args=(signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def on_signal(self, signum: int, _frame) -> None:
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            self._signal_tree(signum)
            return
        if self.signalled is not None:  # second interrupt: no more grace
            self._signal_tree(signal.SIGKILL)
            return
        self.signalled = signum
        self.abort()

    def wait(self) -> int:
        by_pid = {r.proc.pid: r for r in self.ranks if r.proc is not None}
        while any(r.code is None for r in by_pid.values()):
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            rank = by_pid.get(pid)
            if rank is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            rank.code = 128 - code if code < 0 else code
            if rank.proc is not None:
                rank.proc.returncode = code
            if rank.code != 0 and self.first_failure is None and not self.aborting:
                self.first_failure = rank
                self._report_failure(rank)
                self.abort()
        for thread in self.threads:
            thread.join(timeout=5)
        if self.first_failure is not None:
            return self.first_failure.code or 1
        if self.signalled is not None:
            return 128 + self.signalled
        return 0

    def _report_failure(self, rank: Rank) -> None:
        sys.stderr.write(
            f"{BAR}\nPrimary job  terminated normally, but 1 process returned\n"
            "a non-zero exit code. Per user-direction, the job has been aborted.\n"
            f"{BAR}\n{BAR}\n"
            "mpirun detected that one or more processes exited with non-zero status, thus "
            "causing\nthe job to be terminated. The first process to do so was:\n\n"
            f"  Process name: [[1,1],{rank.rank}]\n  Exit code:    {rank.code}\n{BAR}\n"
        )
        sys.stderr.flush()


def print_map(order: list[str]) -> None:
    """``--display-map`` in Open MPI 4.1's form (rmaps_base_support_fns.c), on stdout."""
    out = [f" Data for JOB [1,1] offset 0 Total slots allocated {len(order)}", ""]
    out += [" ========================   JOB MAP   ========================", ""]
    for host in dict.fromkeys(order):
        ranks = [r for r, h in enumerate(order) if h == host]
        out.append(f" Data for node: {host}\tNum slots: {len(ranks)}\tMax slots: 0\t"
                   f"Num procs: {len(ranks)}")  # fmt: skip
        out += [f" \tProcess OMPI jobid: [1,1] App: 0 Process rank: {r} Bound: N/A" for r in ranks]
        out.append("")
    out.append(" =============================================================")
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    try:
        opts = parse_args(argv)
        hostfile = None if opts.hosts else resolve_hostfile(opts)
        if opts.hosts:
            hosts = hosts_from_option(opts.hosts)
            sidecar = load_sidecar(os.environ.get("TRAINJOB_LOCAL_HOSTFILE") or None)
        elif hostfile is not None:
            hosts = read_hostfile(hostfile)
            sidecar = load_sidecar(hostfile)
        else:  # no hostfile: run locally (lenient: any -np is allowed)
            hosts = [("localhost", opts.np or os.cpu_count() or 1)]
            sidecar = {}
        if not hosts:
            raise UsageError(f"the hostfile {hostfile} lists no hosts")
        order = place(opts, hosts)
    except UsageError as exc:
        sys.stderr.write(f"mpirun: Error: {exc}\nType 'mpirun --help' for usage.\n")
        return 1
    if opts.display_map:
        print_map(order)
    job = Job(opts, order, sidecar)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, job.on_signal)
    job.start()
    return job.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
