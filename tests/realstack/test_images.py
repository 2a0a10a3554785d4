"""The real node's images (devtools/realstack/images.py): OCI layouts, recipe layers, the runtime
images Trainer names, and (with a containerd binary) import and run in a private containerd.

The unit tests need nothing. ``runtime_images`` needs Go (the Trainer module); the integration
test needs root, mmdebstrap, runc and the stack's containerd build. Each skips naming what is
missing, and fails instead under ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1``."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from devtools.realstack import images
from devtools.realstack.paths import bin_dir
from devtools.realstack.procs import StackError

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
CONTAINERD = "v2.2.10"
CGROUP = f"/tjm-img-{os.getpid()}"  # the test containers' cgroups, removed at teardown

PASSWD = (
    b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = b"root:x:0:\nshadow:x:42:\nnogroup:x:65534:\n"
SSH_CONFIG = b"Host *\n#   StrictHostKeyChecking ask\n#   Port 22\n    SendEnv LANG LC_*\n"
SSHD_CONFIG = b"#Port 22\n#StrictModes yes\nUsePAM yes\n"
FAKE_FILES = {
    "etc/passwd": PASSWD,
    "etc/group": GROUP,
    "etc/shadow": b"root:*:19000:0:99999:7:::\n",
    "etc/gshadow": b"root:*::\nshadow:*::\n",
    "etc/ssh/ssh_config": SSH_CONFIG,
    "etc/ssh/sshd_config": SSHD_CONFIG,
    "etc/skel/.bashrc": b"# bashrc\n",
    "etc/skel/.profile": b"# profile\n",
    "etc/skel/.bash_logout": b"# logout\n",
    "usr/bin/busybox": b"\x7fELF fake busybox",
    "usr/bin/dash": b"\x7fELF fake dash",
    **{f: b"\x7fELF fake lib" for f in images.libc_files()},
}


def missing(why: str) -> None:
    """Skip, or fail under TRAINJOB_MAGICS_REQUIRE_REALSTACK=1."""
    if REQUIRE:
        pytest.fail(f"{why} (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1)", pytrace=False)
    pytest.skip(why)


def fake_base(store: Path) -> images.Base:
    rootfs = images.layer_tar([images.Entry("etc", 0o755), images.Entry("usr", 0o755)])
    return images.Base(images.put_layer(store, rootfs), dict(FAKE_FILES))


def members(tar_bytes: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(tar_bytes: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return tar.extractfile(name).read()


# ---------------------------------------------------------------- the mpi layer


def test_mpi_layer_adds_mpiuser_1000_with_its_home_and_sshd_config():
    layer = images.layer_tar(images.mpi_entries(FAKE_FILES))
    m = members(layer)
    passwd = read(layer, "etc/passwd").decode().splitlines()
    assert passwd[:2] == PASSWD.decode().splitlines()
    assert passwd[-1] == "mpiuser:x:1000:1000::/home/mpiuser:/bin/sh"
    assert read(layer, "etc/group").decode().splitlines()[-1] == "mpiuser:x:1000:"
    assert read(layer, "etc/shadow").decode().splitlines()[-1].startswith("mpiuser:!:")
    for secret in ("etc/shadow", "etc/gshadow"):
        assert (m[secret].mode, m[secret].uid, m[secret].gid) == (0o640, 0, 42)
    for d in ("home/mpiuser", "home/mpiuser/.cache", "home/mpiuser/.local/bin"):
        assert m[d].isdir() and (m[d].mode, m[d].uid, m[d].gid) == (0o755, 1000, 1000), d
    cfg = m["home/mpiuser/.sshd_config"]
    assert cfg.isfile() and (cfg.mode, cfg.uid, cfg.gid) == (0o644, 1000, 1000)
    assert read(layer, "home/mpiuser/.sshd_config").decode().splitlines() == [
        "PidFile /home/mpiuser/sshd.pid",
        "HostKey /home/mpiuser/.ssh/id_rsa",
        "StrictModes no",
        "Port 2222",
    ]
    assert m["home/mpiuser/.bashrc"].uid == 1000
    assert m["run/sshd"].isdir() and (m["run/sshd"].mode, m["run/sshd"].uid) == (0o755, 0)
    assert {i.mtime for i in m.values()} == {images.EPOCH}
    assert all(not i.uname and not i.gname for i in m.values())
    # the Secret mounts ~/.ssh; the image must not shadow it with keys of its own
    assert not any(n.split("/")[2:3] == [".ssh"] for n in m)


def test_mpi_layer_points_ssh_at_port_2222_without_host_key_checks():
    layer = images.layer_tar(images.mpi_entries(FAKE_FILES))
    client = read(layer, "etc/ssh/ssh_config").decode()
    assert "    StrictHostKeyChecking no\n" in client
    assert "    Port 2222\n" in client
    assert client.endswith("    UserKnownHostsFile /dev/null\n")
    server = read(layer, "etc/ssh/sshd_config").decode().splitlines()
    assert server == ["Port 2222", "StrictModes no", "UsePAM yes"]


def test_minimal_and_pause_have_a_shell_but_no_python_or_tar():
    for applets in (images.MINIMAL_APPLETS, ("sh", "sleep")):
        m = members(images.layer_tar(images.busybox_entries(FAKE_FILES, applets)))
        assert m["bin/busybox"].mode == 0o755
        assert m["tmp"].mode == 0o1777
        names = {n.rsplit("/", 1)[-1] for n in m}
        assert not names & {"tar", "python3", "python"}
    # busybox ash would run its tar applet: the minimal image's sh is dash, with its libc
    m = members(images.layer_tar(images.busybox_entries(FAKE_FILES, images.MINIMAL_APPLETS)))
    assert m["bin/sh"].isfile() and m["bin/sh"].size == len(FAKE_FILES["usr/bin/dash"])
    if images.platform.machine() == "x86_64":
        assert m["lib64/ld-linux-x86-64.so.2"].linkname == (
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        )
        assert m["lib/x86_64-linux-gnu/libc.so.6"].isfile()
    pause = members(images.layer_tar(images.busybox_entries(FAKE_FILES, ("sh", "sleep"))))
    assert pause["bin/sh"].issym() and pause["bin/sh"].linkname == "busybox"


# ---------------------------------------------------------------- OCI layout


def unpack(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def blob(files: dict[str, bytes], desc: dict) -> bytes:
    data = files["blobs/sha256/" + desc["digest"].removeprefix("sha256:")]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
    assert len(data) == desc["size"]
    return data


@pytest.mark.parametrize("recipe", ["mpi", "torch", "pause", "minimal"])
def test_oci_tar_is_a_valid_layout_naming_each_image(tmp_path, recipe):
    store = tmp_path / "store"
    image = images.build_recipe(store, recipe, fake_base(store))
    names = ["ghcr.io/x/y:v1", "docker.io/library/z:latest"]
    files = unpack(images.write_oci_tar(store, image, names, tmp_path / "out.tar"))
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and index["mediaType"] == images.MEDIA_INDEX
    named = {d["annotations"][images.NAME_ANNOTATION]: d for d in index["manifests"]}
    assert set(named) == set(names)
    assert named["ghcr.io/x/y:v1"]["annotations"]["org.opencontainers.image.ref.name"] == "v1"
    for desc in index["manifests"]:
        assert desc["mediaType"] == images.MEDIA_MANIFEST
        assert desc["platform"] == {"architecture": images.goarch(), "os": "linux"}
        manifest = json.loads(blob(files, desc))
        assert manifest["schemaVersion"] == 2
        config = json.loads(blob(files, manifest["config"]))
        assert manifest["config"]["mediaType"] == images.MEDIA_CONFIG
        diff_ids = []
        for layer in manifest["layers"]:
            assert layer["mediaType"] == images.MEDIA_LAYER
            raw = gzip.decompress(blob(files, layer))
            assert members(raw)  # a readable tar
            diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
        assert (config["os"], config["architecture"]) == ("linux", images.goarch())
        labels = config["config"]["Labels"]
        assert labels["trainjob-magics.local/recipe"] == recipe
        assert labels["trainjob-magics.local/stand-in-for"]
    expected = 4 if recipe in ("mpi", "torch") else 3  # base + layer, or the busybox rootfs
    assert len([f for f in files if f.startswith("blobs/")]) == expected


def test_mpi_config_matches_the_upstream_dockerfile(tmp_path):
    store = tmp_path / "store"
    cfg = images.build_recipe(store, "mpi", fake_base(store)).config["config"]
    assert cfg["WorkingDir"] == "/home/mpiuser"
    assert "HOME=/home/mpiuser" in cfg["Env"]
    assert next(e for e in cfg["Env"] if e.startswith("PATH=")).startswith(
        "PATH=/home/mpiuser/.local/bin:"
    )
    assert "deepspeed" in cfg["Labels"]["trainjob-magics.local/stand-in-for"]
    assert "User" not in cfg  # root by default, as upstream: the runtime sets runAsUser 1000


def test_oci_tars_are_reproducible(tmp_path):
    digests = set()
    for n in range(2):
        store = tmp_path / f"s{n}"
        image = images.build_recipe(store, "mpi", fake_base(store))
        out = images.write_oci_tar(store, image, ["a/b:c"], tmp_path / f"{n}.tar")
        digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
    assert len(digests) == 1


# ---------------------------------------------------------------- names, sources, keys


@pytest.mark.parametrize(
    ("ref", "full"),
    [
        ("pytorch/pytorch:2.10.0", "docker.io/pytorch/pytorch:2.10.0"),
        ("busybox", "docker.io/library/busybox:latest"),
        ("ghcr.io/kubeflow/trainer/mlx-runtime", "ghcr.io/kubeflow/trainer/mlx-runtime:latest"),
        ("localhost:5000/a/b", "localhost:5000/a/b:latest"),
        ("nvcr.io/nvidia/jax:25.10-py3", "nvcr.io/nvidia/jax:25.10-py3"),
        ("ghcr.io/a/b@sha256:" + "0" * 64, "ghcr.io/a/b@sha256:" + "0" * 64),
    ],
)
def test_normalise(ref, full):
    assert images.normalise(ref) == full


def test_retag_applies_kustomize_image_rules():
    rules = [
        {"name": "ghcr.io/kubeflow/trainer/mlx-runtime", "newTag": "v2.2.1"},
        {"name": "old/name", "newName": "new/name", "newTag": 3},
        {"name": "pinned", "digest": "sha256:ab"},
    ]
    assert images._retag("ghcr.io/kubeflow/trainer/mlx-runtime", rules).endswith(":v2.2.1")
    assert images._retag("old/name:1", rules) == "new/name:3"
    assert images._retag("pinned:7", rules) == "pinned@sha256:ab"
    assert images._retag("other:1", rules) == "other:1"


def test_deb822_sources_keep_the_suite_and_its_updates_only():
    text = (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /k.gpg\n\n"
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n"
        "Components: main\n\n"
        "Types: deb-src\nURIs: http://x\nSuites: bookworm\nComponents: main\n"
    )
    assert images._deb822(text, "bookworm") == [
        "deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main",
        "deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm-updates main",
    ]
    assert not images._wanted(["cloud-sdk-bookworm"], "bookworm")


def test_base_key_changes_with_packages_and_sources(monkeypatch):
    key = images.base_key(["deb http://m bookworm main"])
    assert key == images.base_key(["deb http://m bookworm main"])
    assert key != images.base_key(["deb http://other bookworm main"])
    monkeypatch.setattr(images, "PACKAGES", (*images.PACKAGES, "curl"))
    assert key != images.base_key(["deb http://m bookworm main"])


def test_recipes():
    assert images.recipe_for("ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.2.1") == "mpi"
    assert images.recipe_for("ghcr.io/kubeflow/trainer/mlx-runtime:v2.2.1") == "mpi"
    assert images.recipe_for("docker.io/pytorch/pytorch:2.10.0") == "torch"
    with pytest.raises(StackError):
        images.build_recipe(Path("/nonexistent"), "nope", images.Base(images.Blob("x", 0), {}))


@pytest.mark.parametrize("version", ["v2.1.0", "v2.2.1", "v2.3.0"])
def test_runtime_images_finds_the_runtimes_images(version):
    if shutil.which("go") is None:
        missing("Go is not installed: Trainer's runtime manifests come from the Go module cache")
    try:
        found = images.runtime_images(version)
    except StackError as e:
        if REQUIRE:
            raise
        pytest.skip(f"the Trainer module {version} is not available: {e}")
    assert found[f"ghcr.io/kubeflow/trainer/deepspeed-runtime:{version}"] == "mpi"
    assert found[f"ghcr.io/kubeflow/trainer/mlx-runtime:{version}"] == "mpi"
    torch = [n for n in found if n.startswith("docker.io/pytorch/pytorch:")]
    assert len(torch) == 1 and found[torch[0]] == "torch"
    assert found[f"ghcr.io/kubeflow/trainer/dataset-initializer:{version}"] == "torch"
    if version == "v2.2.1":
        assert torch == ["docker.io/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"]
        assert found["nvcr.io/nvidia/jax:25.10-py3"] == "torch"
    assert all(n == images.normalise(n) and ":" in n.rsplit("/", 1)[1] for n in found)


# ---------------------------------------------------------------- import (a fake ctr)


def fake_ctr(tmp_path: Path, listing: str) -> tuple[Path, Path]:
    calls = tmp_path / "calls"
    ctr = tmp_path / "ctr"
    ls = tmp_path / "ls.txt"
    ls.write_text(listing)
    ctr.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'case "$*" in *" images ls"*) cat {ls};;\n'
        f'  *" images import "*) cat {ls}.after > {ls};; esac\n'
    )
    ctr.chmod(0o755)
    return ctr, calls


def test_import_skips_tars_whose_names_are_present_with_the_same_digest(tmp_path):
    store = tmp_path / "store"
    image = images.build_recipe(store, "minimal", fake_base(store))
    tar = images.write_oci_tar(store, image, ["a.local/m:1"], tmp_path / "m.tar")
    digest = image.manifest.digest
    header = "REF TYPE DIGEST SIZE PLATFORMS LABELS\n"
    ctr, calls = fake_ctr(tmp_path, header + f"a.local/m:1 {images.MEDIA_MANIFEST} {digest} 1 -\n")
    images.import_images(ctr, tmp_path / "sock", [tar], tmp_path / "log")
    assert " images import " not in calls.read_text()

    # an older digest under the name: imported, then checked
    ctr, calls = fake_ctr(tmp_path, header + "a.local/m:1 x sha256:0000 1 -\n")
    (tmp_path / "ls.txt.after").write_text(header + f"a.local/m:1 x {digest} 1 -\n")
    images.import_images(ctr, tmp_path / "sock", [tar], tmp_path / "log")
    assert f"-n k8s.io --address {tmp_path / 'sock'} images import {tar}" in calls.read_text()

    # an import that leaves the name missing is an error
    (tmp_path / "ls.txt.after").write_text(header)
    ctr, calls = fake_ctr(tmp_path, header)
    with pytest.raises(StackError, match=r"a\.local/m:1 is not in containerd"):
        images.import_images(ctr, tmp_path / "sock", [tar], tmp_path / "log")


# ---------------------------------------------------------------- a private containerd


def _our_mounts(root: Path) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(root) or point.startswith(f"{root}/"):
            out.append(point)
    return out


@pytest.fixture
def containerd(tmp_path_factory):
    """A containerd of the stack's build with its own root, state and socket (no CRI)."""
    bins = bin_dir("containerd", CONTAINERD)
    for tool, why in (
        (bins / "containerd", f"containerd {CONTAINERD} is not built in {bins}"),
        (shutil.which("runc"), "runc is not installed (apt-get install runc)"),
        (shutil.which("mmdebstrap"), "mmdebstrap is not installed (apt-get install mmdebstrap)"),
    ):
        if not tool or not Path(tool).exists():
            missing(why)
    if os.geteuid() != 0:
        missing("containerd needs root")
    d = Path("/tmp") / f"tjm-img-{os.getpid()}"  # short: the socket path has a length limit
    d.mkdir(exist_ok=True)
    sock = d / "c.sock"
    (d / "config.toml").write_text(
        "version = 3\n"
        f'root = "{d}/root"\nstate = "{d}/state"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",'
        ' "io.containerd.cri.v1.images"]\n'
        f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{d}/t.sock"\n'
        f'[debug]\n  address = "{d}/d.sock"\n'
    )
    env = {**os.environ, "PATH": f"{bins}:{os.environ['PATH']}"}
    log = open(d / "containerd.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [bins / "containerd", "--config", d / "config.toml"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"containerd did not start: {(d / 'containerd.log').read_text()[-800:]}"
                )
            time.sleep(0.2)
        yield bins / "ctr", sock, d
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        for point in reversed(_our_mounts(d)):
            subprocess.run(["umount", "-l", point], check=False)
        for cg in Path("/sys/fs/cgroup").glob(f"*{CGROUP}"):  # v1 hierarchies (or v2)
            for leaf in sorted(cg.glob("**/"), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    leaf.rmdir()
        shutil.rmtree(d, ignore_errors=True)


def ctr_run(
    ctr: Path, sock: Path, image: str, user: str, script: str
) -> subprocess.CompletedProcess:
    name = f"tjm-img-test-{os.getpid()}"
    argv = [ctr, "-n", "k8s.io", "--address", sock, "run", "--rm", "--cgroup", f"{CGROUP}/{name}"]
    argv += ["--user", user]
    return subprocess.run(
        [*map(str, argv), image, name, "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mpi_image_runs_in_containerd(containerd, tmp_path):
    ctr, sock, d = containerd
    log = d / "images.log"
    tars = images.build_images(["v2.2.1"], log)
    images.import_images(ctr, sock, tars, log)
    present = images.present_images(ctr, sock, log)
    for name in ("ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.2.1", images.PAUSE_IMAGE):
        assert name in present
    started = time.monotonic()
    images.import_images(ctr, sock, tars, log)  # everything present: nothing imported
    assert time.monotonic() - started < 10

    script = (
        "set -e; id mpiuser; id -u; mpirun --version; mkdir -p ~/.ssh; "
        "ssh-keygen -q -t ecdsa -b 521 -N '' -f ~/.ssh/id_rsa; "
        "/usr/sbin/sshd -t -f /home/mpiuser/.sshd_config; echo SSHD-CONFIG-OK; "
        "python3 -c 'print(6*7)'; command -v tar ps ip"
    )
    run = ctr_run(ctr, sock, "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.2.1", "1000", script)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "uid=1000(mpiuser) gid=1000(mpiuser)" in out
    assert "\n1000\n" in out
    assert "Open MPI" in out or "mpirun (Open MPI)" in out
    assert "SSHD-CONFIG-OK" in out and "\n42\n" in out

    # as the node pods: sshd -De as mpiuser on 2222 with the Secret's key; ssh as the launcher
    # does (port and host key checking from /etc/ssh/ssh_config)
    as_mpiuser = (
        "set -e; mkdir -p ~/.ssh; ssh-keygen -q -t ecdsa -b 521 -N '' -f ~/.ssh/id_rsa; "
        "cp ~/.ssh/id_rsa.pub ~/.ssh/authorized_keys; "
        "/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config 2>/tmp/sshd.log & "
        "for i in $(seq 50); do ssh -o BatchMode=yes 127.0.0.1 'echo SSH-OK $(id -u)' "
        "2>/dev/null && exit 0; sleep 0.2; done; cat /tmp/sshd.log; exit 1"
    )
    setpriv = "setpriv --reuid=1000 --regid=1000 --init-groups"
    script = f"ip link set lo up; exec {setpriv} sh -c {shlex.quote(as_mpiuser)}"
    ssh = ctr_run(ctr, sock, "ghcr.io/kubeflow/trainer/mlx-runtime:v2.2.1", "0", script)
    assert ssh.returncode == 0 and "SSH-OK 1000" in ssh.stdout, ssh.stdout + ssh.stderr

    lean = ctr_run(
        ctr, sock, images.MINIMAL_IMAGE, "0", "echo hi; command -v python3 || command -v tar || :"
    )
    assert lean.returncode == 0 and lean.stdout == "hi\n", lean.stdout + lean.stderr


def test_pause_image_exits_on_sigterm(containerd):
    ctr, sock, d = containerd
    log = d / "images.log"
    tars = [t for t in images.build_images(["v2.2.1"], log) if t.name.startswith("pause-")]
    images.import_images(ctr, sock, tars, log)
    name = f"tjm-pause-{os.getpid()}"
    base = [str(ctr), "-n", "k8s.io", "--address", str(sock)]
    run = subprocess.Popen(
        [*base, "run", "--rm", "--cgroup", f"{CGROUP}/{name}", images.PAUSE_IMAGE, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            name
            not in subprocess.run([*base, "tasks", "ls"], capture_output=True, text=True).stdout
        ):
            assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()
            time.sleep(0.2)
        time.sleep(0.5)  # the shell sets its trap
        subprocess.run([*base, "tasks", "kill", "--signal", "SIGTERM", name], check=True)
        assert run.wait(10) == 0
    finally:
        if run.poll() is None:
            subprocess.run([*base, "tasks", "kill", "--signal", "SIGKILL", name], check=False)
            run.wait(10)
