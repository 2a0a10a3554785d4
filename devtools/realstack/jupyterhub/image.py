"""The single-user image: what KubeSpawner starts for each user, built here like the runtime
images (no registry, no Docker).

A Debian rootfs (``mmdebstrap``, the same mirrors as the node's images) with Python, and in it a
venv ``/opt/jupyter`` holding JupyterLab, Notebook 7, ipywidgets, jupyter-server-proxy,
JupyterHub's single-user server and this project's wheel, built from the checkout with
``python -m build`` (its lab and server extensions inside): nothing is installed from the
repository folder. The user is ``jovyan`` (uid 1000), as in the Jupyter Docker stacks. The
same as a Dockerfile a user can copy: docs/jupyterhub.md.

A second name, ``NO_WIDGETS_IMAGE``, is the same image with one more layer that removes
ipywidgets (OCI whiteouts): a user's image that lacks a package the project needs.

Cached by content: the wheel's files, the package pins and this file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from devtools.realstack import images
from devtools.realstack.images import Blob, Entry
from devtools.realstack.procs import StackError

IMAGE = "trainjob-magics.local/singleuser:1"
NO_WIDGETS_IMAGE = "trainjob-magics.local/singleuser-no-ipywidgets:1"
VENV = "/opt/jupyter"
USER, UID = "jovyan", 1000
HOME = f"/home/{USER}"
PYTHON = "python3.11"  # Debian bookworm's
# what a user's notebook image has: the versions the project's tests run against (2026-12)
PIP_PACKAGES = (
    "jupyterlab==4.6.6",
    "notebook==7.6.5",
    "ipywidgets==8.1.9",
    "jupyter-server-proxy==4.6.0",
    "jupyterhub==6.1.1",  # jupyterhub-singleuser
)
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "procps", "passwd", "tini")
RECIPE_VERSION = "1"
# what `python -m build --no-isolation` needs here (pyproject.toml's [build-system] requires)
BUILD_MODULES = ("build", "hatchling", "hatch_jupyter_builder", "jupyter_builder")
REPO = Path(__file__).resolve().parents[3]


def build_wheel(out_dir: Path, log: Path) -> Path:
    """This checkout's wheel (``python -m build --wheel``, the lab extension inside)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.whl"):
        old.unlink()
    images._run(wheel_argv(out_dir), log, "the project's wheel for the single-user image")
    wheels = sorted(out_dir.glob("trainjob_magics-*.whl"))
    if not wheels:
        raise StackError(f"python -m build made no trainjob_magics wheel in {out_dir}")
    with zipfile.ZipFile(wheels[0]) as zf:
        names = zf.namelist()
    if not any(
        n.endswith("labextensions/trainjob-magics-labextension/package.json") for n in names
    ):
        raise StackError(f"{wheels[0].name} lacks the built lab extension (jlpm build:prod)")
    return wheels[0]


def wheel_argv(out_dir: Path) -> list[str]:
    """``python -m build --wheel``: with the project's build requirements at hand (its test
    extra, scripts/setup.sh) without isolation, else isolated (they come from PyPI); without
    the ``build`` package, pip's own ``pip wheel`` builds the same wheel."""
    have = {m: importlib.util.find_spec(m) is not None for m in BUILD_MODULES}
    if have["build"] and all(have.values()):
        return [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "-o",
            str(out_dir),
            str(REPO),
        ]
    if have["build"]:
        return [sys.executable, "-m", "build", "--wheel", "-o", str(out_dir), str(REPO)]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out_dir), str(REPO)]


def wheel_digest(wheel: Path) -> str:
    """The wheel's files and their bytes (not the zip's timestamps)."""
    sha = hashlib.sha256()
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            sha.update(name.encode() + b"\0" + zf.read(name))
    return sha.hexdigest()


def image_key(wheel: Path) -> str:
    spec = [
        wheel_digest(wheel),
        list(PIP_PACKAGES),
        list(DEBIAN_PACKAGES),
        images.apt_sources(),
        RECIPE_VERSION,
        hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


def mmdebstrap_argv(out: Path, build_dir: Path, wheel: str, sources: list[str]) -> list[str]:
    """Debian + the venv, all in the chroot: pip runs with the image's own Python and reaches
    PyPI as this machine does (its CA bundle is copied in for the build, then removed)."""
    pip = (
        f'chroot "$1" env -i PATH=/usr/bin:/bin HOME=/root PIP_CERT=/tmp/build/ca.crt '
        f"PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 "
        f"{VENV}/bin/pip install --no-cache-dir --quiet "
        f"/tmp/build/{wheel}[jupyter] " + " ".join(PIP_PACKAGES)
    )
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--include=" + ",".join(DEBIAN_PACKAGES),
        *(f"--dpkgopt={o}" for o in images.DPKG_OPTS),
        '--customize-hook=mkdir -p "$1"/tmp/build',
        f"--customize-hook=copy-in {build_dir}/ca.crt {build_dir}/{wheel} /tmp/build",
        f'--customize-hook=chroot "$1" {PYTHON} -m venv {VENV}',
        "--customize-hook=" + pip,
        f'--customize-hook=chroot "$1" useradd -m -u {UID} -U -s /bin/bash {USER}',
        '--customize-hook=rm -rf "$1"/tmp/build "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        images.SUITE,
        str(out),
        *sources,
    ]


def _config(diff_ids: list[str], widgets: bool) -> dict:
    what = "the single-user server" + ("" if widgets else " without ipywidgets")
    return {
        "architecture": images.goarch(),
        "os": "linux",
        "created": images.CREATED,
        "config": {
            "Env": [f"PATH={VENV}/bin:{images.PATH}", f"HOME={HOME}", "SHELL=/bin/bash"],
            "User": str(UID),
            "WorkingDir": HOME,
            "Entrypoint": ["tini", "-g", "--"],
            "Cmd": ["jupyterhub-singleuser"],
            "ExposedPorts": {"8888/tcp": {}},
            "Labels": {
                "org.opencontainers.image.title": f"trainjob-magics {what}",
                "trainjob-magics.local/recipe": "singleuser",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": images.CREATED, "created_by": "trainjob-magics singleuser"}],
    }


def _whiteouts(rootfs_tar: Path, package: str) -> list[Entry]:
    """Whiteout entries hiding ``package`` (its folder and dist-info) in the venv."""
    site = f"opt/jupyter/lib/{PYTHON}/site-packages"
    hidden: list[str] = []
    with images.tarfile.open(rootfs_tar) as tar:
        for m in tar:
            name = m.name.removeprefix("./")
            parent, _, leaf = name.rpartition("/")
            if parent == site and (leaf == package or leaf.startswith(f"{package}-")):
                hidden.append(leaf)
    if package not in hidden:
        raise StackError(f"the single-user rootfs has no {package} in {site}")
    dirs = [Entry(p, 0o755) for p in ("opt", "opt/jupyter", "opt/jupyter/lib")]
    dirs += [Entry(f"opt/jupyter/lib/{PYTHON}", 0o755), Entry(site, 0o755)]
    return dirs + [Entry(f"{site}/.wh.{leaf}", 0o644, data=b"") for leaf in sorted(hidden)]


def build(log: Path) -> list[Path]:
    """The OCI tars of both names, built or from the cache."""
    store = images.images_dir()
    with tempfile.TemporaryDirectory(prefix="tjm-singleuser-") as tmp:
        wheel = build_wheel(Path(tmp) / "dist", log)
        key = image_key(wheel)
        out = store / "oci" / f"singleuser-{key}.tar"
        out_nw = store / "oci" / f"singleuser-no-ipywidgets-{key}.tar"
        if out.is_file() and out_nw.is_file():
            out.touch()
            out_nw.touch()
            return [out, out_nw]
        if shutil.which("mmdebstrap") is None:
            raise StackError("the single-user image needs mmdebstrap: apt-get install mmdebstrap")
        build_dir = Path(tmp) / "in"
        build_dir.mkdir()
        shutil.copy(wheel, build_dir / wheel.name)
        ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        shutil.copy(ca, build_dir / "ca.crt")
        rootfs = Path(tmp) / "rootfs.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(images.EPOCH)}
        argv = mmdebstrap_argv(rootfs, build_dir, wheel.name, images.apt_sources())
        images._run(argv, log, "mmdebstrap the single-user image", env)
        with images._locked(store):
            base = images._pack_rootfs(rootfs, store)
            image = images.put_image(store, "singleuser", [base], _config([base.diff_id], True))
            images.write_oci_tar(store, image, [IMAGE], out)
            layer: Blob = images.put_layer(
                store, images.layer_tar(_whiteouts(rootfs, "ipywidgets"))
            )
            cfg = _config([base.diff_id, layer.diff_id], False)
            nw = images.put_image(store, "singleuser", [base, layer], cfg)
            images.write_oci_tar(store, nw, [NO_WIDGETS_IMAGE], out_nw)
        _prune(store / "oci", keep={out, out_nw})
    return [out, out_nw]


def _prune(oci: Path, keep: set[Path]) -> None:
    """Drop the tars of earlier checkouts' images (180 MB each)."""
    for old in oci.glob("singleuser-*.tar"):
        if old not in keep:
            old.unlink(missing_ok=True)
