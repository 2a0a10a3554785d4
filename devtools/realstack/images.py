"""Container images for the real node, built without a registry or Docker.

No registry is reachable here, so every image a runtime names is built locally and imported
into containerd under exactly that name (pods must not pull: ``imagePullPolicy`` ``Never`` or
``IfNotPresent``). One Debian rootfs (``mmdebstrap``, about 90 s) is the shared base layer of
every recipe image; each recipe adds one small layer written here with ``tarfile`` (users,
sshd configuration, directories). The images are OCI image layouts in tars for
``ctr -n k8s.io images import``.

Recipes (stand-ins: the frameworks themselves are too big and need GPUs):

- ``mpi``: Trainer's ``cmd/runtimes/deepspeed/Dockerfile`` and ``cmd/runtimes/mlx/Dockerfile``
  on mpi-operator's ``build/base/Dockerfile`` (user ``mpiuser`` uid 1000, ``~/.sshd_config``,
  ssh on port 2222). Debian's Open MPI, python3, sshd; NO deepspeed/mlx/torch packages.
- ``torch``: stands in for ``pytorch/pytorch``, ``torchtune-trainer``, ``nvidia/jax``,
  ``xgboost-runtime`` and the initializers: python3 as root in ``/workspace``, NO torch.
- ``pause``: the sandbox image, a busybox shell that sleeps until SIGTERM.
- ``minimal``: a shell (dash) and a few busybox applets; no python3, no tar.
- ``mpi5``: the ``mpi`` layer on a Debian trixie base: Open MPI 5.0.x (PRRTE), which ignores the
  ``OMPI_MCA_orte_*`` variables Trainer's MPI plugin sets (kubeflow/trainer#4028). Built only when
  asked for (``build_openmpi5``, ``python -m devtools.realstack openmpi5``): a second base costs a
  second mmdebstrap.

Cache: ``cache_root()/images``. ``blobs/sha256`` holds every blob; a base is keyed by its
suite, mirrors and package list, the OCI tars by the recipe code (this file) and the names.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools.realstack.gobuild import module_dir
from devtools.realstack.paths import cache_root
from devtools.realstack.procs import StackError

TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
PAUSE_IMAGE = "trainjob-magics.local/pause:1"
MINIMAL_IMAGE = "trainjob-magics.local/minimal:1"
NAME_ANNOTATION = "io.containerd.image.name"
NAMESPACE = "k8s.io"

SUITE = "bookworm"
# Debian 13: Open MPI 5.0.x over PRRTE 3.0.x, from the same mirrors as SUITE (this machine's apt
# sources name only bookworm: the trixie entries are the bookworm ones with the suite renamed)
OPENMPI5_SUITE = "trixie"
OPENMPI5_IMAGE = "trainjob-magics.local/mpi-openmpi5:1"
# tar, coreutils, bash, hostname, util-linux are Essential (minbase has them); busybox-static
# gives the pause and minimal images their /bin/busybox
PACKAGES = (
    "openssh-server",
    "openssh-client",
    "openmpi-bin",
    "python3",
    "python-is-python3",
    "procps",
    "iproute2",
    "netbase",
    "busybox-static",
)
DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
BASE_VERSION = "1"  # bump when the base's recipe (not its inputs above) changes
EPOCH = 1700000000  # every mtime and the config's "created": the tars are reproducible
CREATED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))

MPI_USER, MPI_UID = "mpiuser", 1000
MPI_HOME = "home/mpiuser"
SSH_PORT = 2222
# mpi-operator build/base/sshd_config + the Dockerfile's `echo "Port $port"`
MPI_SSHD_CONFIG = (
    "PidFile /home/mpiuser/sshd.pid\n"
    "HostKey /home/mpiuser/.ssh/id_rsa\n"
    "StrictModes no\n"
    f"Port {SSH_PORT}\n"
)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what the minimal image's busybox answers to (no tar, no python3 on purpose)
MINIMAL_APPLETS = (
    "ls", "cat", "echo", "sleep", "env", "id", "true", "false", "kill", "ps", "head",
    "mkdir", "rm", "hostname", "timeout", "stat", "base64", "grep", "printf", "test", "[",
)  # fmt: skip
# the sandbox: PID 1 exits on SIGTERM/SIGINT (a bare `sleep infinity` would ignore them)
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

STAND_INS = {
    "mpi": "ghcr.io/kubeflow/trainer/{deepspeed,mlx}-runtime: Debian Open MPI, python3, sshd; "
    "no deepspeed, mlx or torch",
    "torch": "pytorch/pytorch, torchtune-trainer, nvidia/jax, xgboost-runtime, initializers: "
    "Debian python3; no torch, jax, xgboost or huggingface",
    "pause": "the sandbox (pause) image: busybox sh sleeping until SIGTERM",
    "minimal": "an image with only a shell (dash) and busybox applets: no python3, no tar",
    "mpi5": "an Open MPI 5 variant of the deepspeed/mlx runtimes (kubeflow/trainer#4028): Debian "
    "trixie's Open MPI 5.0, python3, sshd",
}


# ---------------------------------------------------------------- the runtimes' images


def normalise(ref: str) -> str:
    """The full reference containerd stores: ``docker.io/library/`` and ``:latest`` added."""
    first, _, rest = ref.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        ref = "docker.io/" + ("library/" if not rest else "") + ref
    if "@" not in ref and ":" not in ref.rsplit("/", 1)[1]:
        ref += ":latest"
    return ref


def recipe_for(ref: str) -> str:
    """The recipe standing in for an upstream image: MPI ones get ``mpi``, others ``torch``."""
    repo = ref.rsplit("/", 1)[-1]
    return "mpi" if re.match(r"(deepspeed|mlx)", repo) else "torch"


def _container_images(obj: object) -> Iterator[str]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c["image"] for c in value if isinstance(c, dict) and "image" in c)
            yield from _container_images(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _container_images(item)


def _overlay_images(manifests: Path) -> list[dict]:
    """The ``images:`` transformers of ``overlays/runtimes`` (the tags the stack applies)."""
    kust = manifests / "overlays" / "runtimes" / "kustomization.yaml"
    if not kust.is_file():
        return []
    return (yaml.safe_load(kust.read_text()) or {}).get("images") or []


def _split(ref: str) -> tuple[str, str]:
    """``name:tag`` -> (name, tag); a digest reference keeps its digest in the name."""
    if "@" not in ref and ":" in ref.rsplit("/", 1)[-1]:
        name, tag = ref.rsplit(":", 1)
        return name, tag
    return ref, ""


def _retag(ref: str, rules: list[dict]) -> str:
    """Apply kustomize ``images:`` rules (``newName``, ``newTag``, ``digest``) to ``ref``."""
    name, tag = _split(ref)
    for rule in rules:
        if rule.get("name") == name:
            name = rule.get("newName", name)
            if "digest" in rule:
                return f"{name}@{rule['digest']}"
            tag = str(rule.get("newTag", tag))
    return f"{name}:{tag}" if tag else name


def runtime_images(trainer_version: str) -> dict[str, str]:
    """Every container image of the ClusterTrainingRuntimes Trainer ships -> its recipe.

    Reads every YAML under the module's ``manifests/base/runtimes`` (nested folders too) and
    applies the tags of ``manifests/overlays/runtimes`` as kustomize would; keys are normalised.
    """
    if shutil.which("go") is None:
        raise StackError("the runtimes' images are read from Trainer's Go module: install Go")
    log = cache_root() / "images" / "build.log"
    manifests = module_dir(TRAINER_MODULE, trainer_version, log) / "manifests"
    rules = _overlay_images(manifests)
    found: dict[str, str] = {}
    for path in sorted((manifests / "base" / "runtimes").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ClusterTrainingRuntime":
                for ref in _container_images(doc.get("spec")):
                    full = normalise(_retag(ref, rules))
                    found[full] = recipe_for(full)
    if not found:
        raise StackError(f"Trainer {trainer_version}: no runtime images under {manifests}")
    return found


# ---------------------------------------------------------------- blobs and layers


@dataclass(frozen=True)
class Blob:
    """A blob in the store: its digest (``sha256:...``), size and, for a layer, its diff_id."""

    digest: str
    size: int
    diff_id: str = ""

    def descriptor(self, media_type: str) -> dict:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size}


def images_dir() -> Path:
    return cache_root() / "images"


def blob_path(store: Path, digest: str) -> Path:
    return store / "blobs" / "sha256" / digest.split(":", 1)[1]


def put_blob(store: Path, data: bytes) -> Blob:
    """Store ``data`` under its digest (idempotent)."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = blob_path(store, digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return Blob(digest, len(data))


def put_json(store: Path, obj: dict) -> Blob:
    return put_blob(store, json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no name, mtime 0)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6, filename="") as gz:
        gz.write(data)
    return out.getvalue()


def put_layer(store: Path, tar_bytes: bytes) -> Blob:
    """Store an uncompressed layer tar gzipped; the Blob carries its diff_id."""
    blob = put_blob(store, gzip_bytes(tar_bytes))
    return Blob(blob.digest, blob.size, "sha256:" + hashlib.sha256(tar_bytes).hexdigest())


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory (``data is None``), file, or symlink (``link``)."""

    path: str
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytes | None = None
    link: str = ""


def layer_tar(entries: list[Entry]) -> bytes:
    """A layer tar of ``entries`` in order, fixed mtimes, numeric owners only."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.path)
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, EPOCH
            info.uname = info.gname = ""
            if e.link:
                info.type, info.linkname = tarfile.SYMTYPE, e.link
                tar.addfile(info)
            elif e.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return out.getvalue()


# ---------------------------------------------------------------- the Debian base


def apt_sources(suite: str = SUITE) -> list[str]:
    """One-line ``deb`` entries of this machine's apt sources for ``suite`` and its updates.

    A suite the sources do not name (trixie on a bookworm machine) gets SUITE's entries with the
    suite renamed (``bookworm-security`` -> ``trixie-security``): the same mirrors and keyring."""
    if suite == SUITE:
        return apt_sources_of_machine(suite)
    with contextlib.suppress(StackError):
        return apt_sources_of_machine(suite)
    return [_renamed(line, SUITE, suite) for line in apt_sources_of_machine(SUITE)]


def _renamed(line: str, old: str, new: str) -> str:
    """A one-line ``deb`` entry whose suite (the token after the URI) ``old[-x]`` becomes
    ``new[-x]``."""
    parts = line.split()
    uri = next(i for i, t in enumerate(parts) if "://" in t or t.startswith(("file:", "cdrom:")))
    suite = parts[uri + 1]
    if _wanted([suite], old):
        parts[uri + 1] = new + suite[len(old) :]
    return " ".join(parts)


def apt_sources_of_machine(suite: str) -> list[str]:
    """The entries of /etc/apt for ``suite`` and its updates; StackError when there is none."""
    lines: list[str] = []
    src = Path("/etc/apt")
    for path in [src / "sources.list", *sorted((src / "sources.list.d").glob("*"))]:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            lines += _deb822(text, suite)
        else:
            lines += [
                ln.strip()
                for ln in text.splitlines()
                if ln.strip().startswith("deb ") and _wanted(ln.split()[-2:-1], suite)
            ]
    if not lines:
        raise StackError(f"no apt source for Debian {suite} in /etc/apt: images need its mirror")
    return lines


def _wanted(suites: list[str], suite: str) -> bool:
    return any(s == suite or s.startswith(suite + "-") for s in suites)


def _deb822(text: str, suite: str) -> list[str]:
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(
            (k.strip(), v.strip())
            for k, _, v in (ln.partition(":") for ln in stanza.splitlines())
            if k and not k.startswith(("#", " "))
        )
        if "deb" not in fields.get("Types", "").split():
            continue
        opt = f"[signed-by={fields['Signed-By']}] " if fields.get("Signed-By") else ""
        comps = fields.get("Components", "main")
        for uri in fields.get("URIs", "").split():
            for s in fields.get("Suites", "").split():
                if _wanted([s], suite):
                    out.append(f"deb {opt}{uri} {s} {comps}")
    return out


def base_key(sources: list[str], suite: str = SUITE) -> str:
    spec = [suite, list(PACKAGES), list(DPKG_OPTS), sources, BASE_VERSION, platform.machine()]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


# files of the base that the recipe layers edit or copy
BASE_FILES = (
    "etc/passwd",
    "etc/group",
    "etc/shadow",
    "etc/gshadow",
    "etc/ssh/ssh_config",
    "etc/ssh/sshd_config",
    "etc/skel/.bashrc",
    "etc/skel/.profile",
    "etc/skel/.bash_logout",
    "usr/bin/busybox",
    "usr/bin/dash",
)
# the minimal image's /bin/sh is dash: busybox-static's ash runs its own applets (tar too)
# before PATH (FEATURE_SH_STANDALONE), so that image could never lack tar. dash needs libc.
LIBC = {
    "x86_64": ("x86_64-linux-gnu", "ld-linux-x86-64.so.2", "lib64"),
    "aarch64": ("aarch64-linux-gnu", "ld-linux-aarch64.so.1", "lib"),
}


def libc_files() -> tuple[str, str]:
    """libc and the dynamic loader in the base (merged /usr): what dash links against."""
    triple, loader, _ = LIBC.get(platform.machine(), LIBC["x86_64"])
    return f"usr/lib/{triple}/libc.so.6", f"usr/lib/{triple}/{loader}"


def base_files() -> tuple[str, ...]:
    return (*BASE_FILES, *libc_files())


@dataclass(frozen=True)
class Base:
    """The shared Debian layer and the few of its files the recipes need."""

    layer: Blob
    files: dict[str, bytes]


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(argv, stdout=out, stderr=out, env=env)
        except FileNotFoundError as exc:
            raise StackError(f"{what}: {argv[0]} is not installed") from exc
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise StackError(f"{what} failed (exit {proc.returncode}): {tail[0]} (log: {log})")


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts what goes to ``out``."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.size += len(b)
        return self.out.write(b)


def _pack_rootfs(rootfs: Path, store: Path) -> Blob:
    """Gzip the rootfs tar into the store, hashing both forms in one pass."""
    tmp = store / "blobs" / "rootfs.gz.tmp"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    diff = hashlib.sha256()
    with open(tmp, "wb") as raw, open(rootfs, "rb") as src:
        sink = _Hashing(raw)
        with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0, compresslevel=6, filename="") as gz:
            while chunk := src.read(1 << 20):
                diff.update(chunk)
                gz.write(chunk)
    digest = "sha256:" + sink.sha.hexdigest()
    path = blob_path(store, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.replace(path)
    return Blob(digest, sink.size, "sha256:" + diff.hexdigest())


def _read_files(rootfs: Path, wanted: tuple[str, ...]) -> dict[str, bytes]:
    """Regular files of a rootfs tar (plain or gzipped) by path."""
    files: dict[str, bytes] = {}
    with tarfile.open(rootfs) as tar:
        for m in tar:
            name = m.name.removeprefix("./")
            if name in wanted and m.isfile():
                files[name] = tar.extractfile(m).read()
    missing = sorted(set(wanted) - set(files))
    if missing:
        raise StackError(f"the Debian rootfs lacks {', '.join(missing)}")
    return files


def mmdebstrap_argv(out: Path, sources: list[str], suite: str = SUITE) -> list[str]:
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--include=" + ",".join(PACKAGES),
        *(f"--dpkgopt={o}" for o in DPKG_OPTS),
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        suite,
        str(out),
        *sources,
    ]


def _save_files(files_dir: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (files_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (files_dir / name).write_bytes(data)


def ensure_base(store: Path, log: Path, suite: str = SUITE) -> Base:
    """The Debian base layer: built once per key with mmdebstrap, then read from the cache."""
    sources = apt_sources(suite)
    meta = store / "base" / f"{base_key(sources, suite)}.json"
    if meta.is_file():
        info = json.loads(meta.read_text())
        layer = Blob(**info["layer"])
        files_dir = meta.with_suffix("")
        blob = blob_path(store, layer.digest)
        if blob.is_file():
            if not all((files_dir / f).is_file() for f in base_files()):
                _save_files(files_dir, _read_files(blob, base_files()))
            return Base(layer, {f: (files_dir / f).read_bytes() for f in base_files()})
    if shutil.which("mmdebstrap") is None:
        raise StackError("the node's images need mmdebstrap: apt-get install mmdebstrap")
    rootfs = store / "base" / ("rootfs.tar" if suite == SUITE else f"rootfs-{suite}.tar")
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)}
    try:
        t0 = time.monotonic()
        _run(mmdebstrap_argv(rootfs, sources, suite), log, f"mmdebstrap {suite}", env)
        took = round(time.monotonic() - t0, 1)
        layer = _pack_rootfs(rootfs, store)
        files = _read_files(rootfs, base_files())
    finally:
        rootfs.unlink(missing_ok=True)
    _save_files(meta.with_suffix(""), files)
    info = {"layer": layer.__dict__, "sources": sources, "suite": suite, "mmdebstrap_s": took}
    meta.write_text(json.dumps(info, indent=1))
    return Base(layer, files)


# ---------------------------------------------------------------- recipe layers


def _dirs(*paths: str) -> list[Entry]:
    """Root-owned 0755 entries for existing parents (same as the base's)."""
    return [Entry(p, 0o755) for p in paths]


def _append(text: bytes, line: str) -> bytes:
    return text.rstrip(b"\n") + b"\n" + line.encode() + b"\n"


def _gid(group_file: bytes, name: str) -> int:
    for line in group_file.decode().splitlines():
        parts = line.split(":")
        if parts[0] == name:
            return int(parts[2])
    raise StackError(f"the Debian rootfs has no group {name!r}")


def ssh_client_config(text: bytes) -> bytes:
    """mpi-operator build/base/Dockerfile's seds on /etc/ssh/ssh_config."""
    s = text.decode()
    s = re.sub(r"(?m)^[ #](.*StrictHostKeyChecking ).*$", r" \1no", s)
    s = re.sub(r"(?m)^[ #](.*Port ).*$", rf" \g<1>{SSH_PORT}", s)
    return _append(s.encode(), "    UserKnownHostsFile /dev/null")


def sshd_config(text: bytes) -> bytes:
    """mpi-operator build/base/Dockerfile's seds on /etc/ssh/sshd_config."""
    s = re.sub(r"(?m)^#(StrictModes ).*$", r"\1no", text.decode())
    return re.sub(r"(?m)^#(Port ).*$", rf"\g<1>{SSH_PORT}", s).encode()


def mpi_entries(files: dict[str, bytes]) -> list[Entry]:
    """The ``mpi`` layer: ``useradd -m mpiuser`` (uid/gid 1000), ssh configs, sshd dirs."""
    u = MPI_UID
    shadow_gid = _gid(files["etc/group"], "shadow")
    user = f"{MPI_USER}:x:{u}:{u}::/home/{MPI_USER}:/bin/sh"
    day = EPOCH // 86400
    owned = {"uid": u, "gid": u}
    return [
        *_dirs("etc", "etc/ssh"),
        Entry("etc/passwd", 0o644, data=_append(files["etc/passwd"], user)),
        Entry("etc/group", 0o644, data=_append(files["etc/group"], f"{MPI_USER}:x:{u}:")),
        Entry(
            "etc/shadow",
            0o640,
            gid=shadow_gid,
            data=_append(files["etc/shadow"], f"{MPI_USER}:!:{day}:0:99999:7:::"),
        ),
        Entry(
            "etc/gshadow",
            0o640,
            gid=shadow_gid,
            data=_append(files["etc/gshadow"], f"{MPI_USER}:!::"),
        ),
        Entry("etc/ssh/ssh_config", 0o644, data=ssh_client_config(files["etc/ssh/ssh_config"])),
        Entry("etc/ssh/sshd_config", 0o644, data=sshd_config(files["etc/ssh/sshd_config"])),
        *_dirs("home", "run"),
        # the privilege separation directory (`mkdir -p /var/run/sshd`; /var/run -> /run)
        Entry("run/sshd", 0o755),
        Entry(MPI_HOME, 0o755, **owned),
        *(
            Entry(f"{MPI_HOME}/{f}", 0o644, data=files[f"etc/skel/{f}"], **owned)
            for f in (".bash_logout", ".bashrc", ".profile")
        ),
        # COPY --chown=mpiuser sshd_config .sshd_config (+ "Port 2222"); the HostKey it names,
        # ~/.ssh/id_rsa, comes from the ssh Secret Trainer mounts at /home/mpiuser/.ssh
        Entry(f"{MPI_HOME}/.sshd_config", 0o644, data=MPI_SSHD_CONFIG.encode(), **owned),
        Entry(f"{MPI_HOME}/.cache", 0o755, **owned),
        Entry(f"{MPI_HOME}/.local", 0o755, **owned),
        Entry(f"{MPI_HOME}/.local/bin", 0o755, **owned),
    ]


def torch_entries(files: dict[str, bytes]) -> list[Entry]:
    """The ``torch`` layer: the pytorch image's working directory ``/workspace``."""
    return [Entry("workspace", 0o755)]


def dash_entries(files: dict[str, bytes]) -> list[Entry]:
    """/bin/sh as Debian's dash, its libc and the loader at the path dash was linked with."""
    triple, loader, loader_dir = LIBC.get(platform.machine(), LIBC["x86_64"])
    libc, ld = libc_files()
    return [
        *_dirs("lib", f"lib/{triple}", *([loader_dir] if loader_dir != "lib" else [])),
        Entry(f"lib/{triple}/libc.so.6", 0o755, data=files[libc]),
        Entry(f"lib/{triple}/{loader}", 0o755, data=files[ld]),
        Entry(f"{loader_dir}/{loader}", 0o777, link=f"/lib/{triple}/{loader}"),
        Entry("bin/sh", 0o755, data=files["usr/bin/dash"]),
    ]


def busybox_entries(files: dict[str, bytes], applets: tuple[str, ...]) -> list[Entry]:
    """A whole rootfs of busybox-static: /bin/busybox, applet links, root in /etc/passwd.

    Without ``sh`` among ``applets``, /bin/sh is dash (see LIBC: ash would find tar)."""
    return [
        *_dirs("bin", "dev", "etc", "proc", "sys", "run"),
        Entry("root", 0o700),
        Entry("tmp", 0o1777),
        Entry("bin/busybox", 0o755, data=files["usr/bin/busybox"]),
        *(Entry(f"bin/{a}", 0o777, link="busybox") for a in applets),
        *([] if "sh" in applets else dash_entries(files)),
        Entry("etc/passwd", 0o644, data=b"root:x:0:0:root:/root:/bin/sh\n"),
        Entry("etc/group", 0o644, data=b"root:x:0:\n"),
    ]


# ---------------------------------------------------------------- images


@dataclass(frozen=True)
class Image:
    """A built image: its manifest blob and the config it names."""

    recipe: str
    manifest: Blob
    config: dict


def image_config(recipe: str, diff_ids: list[str], env: list[str], **extra: object) -> dict:
    labels = {
        "org.opencontainers.image.title": f"trainjob-magics {recipe} stand-in",
        "trainjob-magics.local/recipe": recipe,
        "trainjob-magics.local/stand-in-for": STAND_INS[recipe],
    }
    cfg = {"Env": env, "Labels": labels, **extra}
    return {
        "architecture": goarch(),
        "os": "linux",
        "created": CREATED,
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": CREATED, "created_by": f"trainjob-magics images.py {recipe}"}],
    }


def goarch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def put_image(store: Path, recipe: str, layers: list[Blob], config: dict) -> Image:
    """Store config and manifest of an image made of ``layers``."""
    cfg = put_json(store, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": cfg.descriptor(MEDIA_CONFIG),
        "layers": [b.descriptor(MEDIA_LAYER) for b in layers],
    }
    return Image(recipe, put_json(store, manifest), config)


def build_recipe(store: Path, recipe: str, base: Base) -> Image:
    """One recipe's image: the base + its layer, or (pause, minimal) a busybox rootfs."""
    if recipe in ("pause", "minimal"):
        applets = MINIMAL_APPLETS if recipe == "minimal" else ("sh", "sleep")
        layer = put_layer(store, layer_tar(busybox_entries(base.files, applets)))
        cmd = ["/bin/sh", "-c", PAUSE_SCRIPT] if recipe == "pause" else ["/bin/sh"]
        cfg = image_config(recipe, [layer.diff_id], [f"PATH={PATH}"], Cmd=cmd, WorkingDir="/")
        return put_image(store, recipe, [layer], cfg)
    if recipe in ("mpi", "mpi5"):  # mpi5: the same layer on the trixie base
        layer = put_layer(store, layer_tar(mpi_entries(base.files)))
        home = f"/home/{MPI_USER}"
        env = [f"PATH={home}/.local/bin:{PATH}", f"HOME={home}"]
        cfg = image_config(
            recipe,
            [base.layer.diff_id, layer.diff_id],
            env,
            Cmd=["/bin/bash"],
            WorkingDir=home,
            ExposedPorts={f"{SSH_PORT}/tcp": {}},
        )
        return put_image(store, recipe, [base.layer, layer], cfg)
    if recipe == "torch":
        layer = put_layer(store, layer_tar(torch_entries(base.files)))
        diff_ids = [base.layer.diff_id, layer.diff_id]
        cfg = image_config(
            recipe, diff_ids, [f"PATH={PATH}"], Cmd=["/bin/bash"], WorkingDir="/workspace"
        )
        return put_image(store, recipe, [base.layer, layer], cfg)
    raise StackError(f"no image recipe {recipe!r}")


def index_json(image: Image, names: list[str]) -> dict:
    """An OCI index naming ``image`` once per name (``io.containerd.image.name``)."""
    manifests = []
    for name in sorted(names):
        desc = image.manifest.descriptor(MEDIA_MANIFEST)
        desc["platform"] = {"architecture": goarch(), "os": "linux"}
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[1] else ""
        desc["annotations"] = {NAME_ANNOTATION: name, "org.opencontainers.image.ref.name": tag}
        manifests.append(desc)
    return {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}


def _blobs_of(store: Path, image: Image) -> list[str]:
    manifest = json.loads(blob_path(store, image.manifest.digest).read_bytes())
    return [image.manifest.digest, manifest["config"]["digest"]] + [
        layer["digest"] for layer in manifest["layers"]
    ]


def write_oci_tar(store: Path, image: Image, names: list[str], out: Path) -> Path:
    """An OCI image layout tar (index.json first) of ``image`` under ``names``."""
    index = json.dumps(index_json(image, names), indent=1, sort_keys=True).encode()
    tmp = out.with_suffix(".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        small = {"index.json": index, "oci-layout": b'{"imageLayoutVersion":"1.0.0"}'}
        for name, data in small.items():
            _add(tar, name, io.BytesIO(data), len(data))
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)
        for digest in _blobs_of(store, image):
            path = blob_path(store, digest)
            with open(path, "rb") as f:
                _add(tar, f"blobs/sha256/{path.name}", f, path.stat().st_size)
    tmp.replace(out)
    return out


def _add(tar: tarfile.TarFile, name: str, f: io.IOBase, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, EPOCH
    tar.addfile(info, f)


def recipe_code_hash() -> str:
    """The recipes' version: this file's bytes."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def wanted_images(trainer_versions: list[str]) -> dict[str, str]:
    """Every image name to build -> recipe: the runtimes' of each version, pause, minimal."""
    names: dict[str, str] = {PAUSE_IMAGE: "pause", MINIMAL_IMAGE: "minimal"}
    for version in trainer_versions:
        names.update(runtime_images(version))
    return names


@contextlib.contextmanager
def _locked(store: Path) -> Iterator[None]:
    store.mkdir(parents=True, exist_ok=True)
    with open(store / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_images(trainer_versions: list[str], log: Path) -> list[Path]:
    """OCI tars (one per recipe, naming every image of that recipe), built or from the cache."""
    by_recipe: dict[str, list[str]] = {}
    for name, recipe in wanted_images(trainer_versions).items():
        by_recipe.setdefault(recipe, []).append(name)
    store = images_dir()
    key = [base_key(apt_sources()), recipe_code_hash()]
    tars: list[Path] = []
    base: Base | None = None
    with _locked(store):
        for recipe, refs in sorted(by_recipe.items()):
            tag = hashlib.sha256(json.dumps([*key, sorted(refs)]).encode()).hexdigest()[:16]
            out = store / "oci" / f"{recipe}-{tag}.tar"
            if out.is_file():
                out.touch()  # in use: _prune keeps it
            else:
                base = base or ensure_base(store, log)
                write_oci_tar(store, build_recipe(store, recipe, base), refs, out)
            tars.append(out)
        _prune(store / "oci", keep=tars)
    return tars


def build_openmpi5(log: Path) -> Path:
    """The OCI tar of OPENMPI5_IMAGE (recipe ``mpi5``, Debian trixie), built or from the cache.

    Not part of ``build_images``: the default stack does not pay for a second base. The first
    build runs mmdebstrap for trixie (its time is kept in the base's ``.json``); later ones
    reuse that base, and a new recipe (this file) only rewrites the small layer."""
    store = images_dir()
    key = [base_key(apt_sources(OPENMPI5_SUITE), OPENMPI5_SUITE), recipe_code_hash()]
    tag = hashlib.sha256(json.dumps([*key, [OPENMPI5_IMAGE]]).encode()).hexdigest()[:16]
    out = store / "oci" / f"mpi5-{tag}.tar"
    with _locked(store):
        if out.is_file():
            out.touch()  # in use: build_images' _prune keeps it
        else:
            base = ensure_base(store, log, OPENMPI5_SUITE)
            write_oci_tar(store, build_recipe(store, "mpi5", base), [OPENMPI5_IMAGE], out)
            for old in (store / "oci").glob("mpi5-*.tar"):
                if old != out:
                    old.unlink(missing_ok=True)
    return out


def base_build_seconds(suite: str) -> float | None:
    """How long mmdebstrap took for the cached base of ``suite`` (None: not built here)."""
    meta = images_dir() / "base" / f"{base_key(apt_sources(suite), suite)}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(meta.read_text()).get("mmdebstrap_s")
    return None


def _prune(oci: Path, keep: list[Path], age: float = 86400) -> None:
    """Drop OCI tars of other recipe versions or name sets unused for ``age`` seconds."""
    for old in oci.glob("*.tar"):
        if old not in keep and time.time() - old.stat().st_mtime > age:
            old.unlink(missing_ok=True)


# ---------------------------------------------------------------- import into containerd


def tar_index(tar_path: Path) -> dict[str, str]:
    """The image names of an OCI tar -> their manifest digests."""
    with tarfile.open(tar_path) as tar:
        index = json.loads(tar.extractfile("index.json").read())
    return {m["annotations"][NAME_ANNOTATION]: m["digest"] for m in index["manifests"]}


def present_images(ctr: Path, address: Path, log: Path) -> dict[str, str]:
    """``ctr images ls`` of the k8s.io namespace: name -> target digest."""
    argv = [str(ctr), "-n", NAMESPACE, "--address", str(address), "images", "ls"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise StackError(f"ctr images ls at {address} failed: {why}")
    out = {}
    for line in proc.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("sha256:"):
            out[parts[0]] = parts[2]
    return out


def import_images(ctr: Path, address: Path, tars: list[Path], log: Path) -> None:
    """Import every tar whose names are not all present with the same digest."""
    have = present_images(ctr, address, log)
    for tar in tars:
        want = tar_index(tar)
        if all(have.get(n) == d for n, d in want.items()):
            continue
        argv = [str(ctr), "-n", NAMESPACE, "--address", str(address), "images", "import", str(tar)]
        _run(argv, log, f"ctr images import {tar.name}")
    have = present_images(ctr, address, log)
    for tar in tars:
        for name, digest in tar_index(tar).items():
            if have.get(name) != digest:
                raise StackError(f"{name} is not in containerd after importing {tar.name}")
