"""The k8s data built from the Go module cache: the one table of releases, and the builder.

``RELEASES`` names every release folder the CRD-reading tests see. A release the Go module
proxy serves is fetched with ``go mod download -json MODULE@VERSION`` (into the read-only module
cache, ``$GOMODCACHE``; a no-op once it is there) and laid out, as symlinks into that cache,
under ``~/.cache/trainjob-magics/k8s-data/<key>/<release>/{crds,runtimes}/*.yaml``: the shape of
``../shared/k8s``. A release the proxy does not serve (Kueue main) is linked from
``../shared/k8s/<release>`` when that is present, and left out otherwise.

The build runs once per process (``functools.cache`` in ``k8s_data``), under a file lock so
that parallel test processes build it once; a release whose folder is complete (its
``.source`` names a module directory that still exists) is not downloaded again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TRAINER = "github.com/kubeflow/trainer/v2"
KUEUE = "sigs.k8s.io/kueue"
# The Kueue CRDs the tests read (the other bases: admissionchecks, cohorts, topologies, ...).
KUEUE_CRDS = tuple(
    f"kueue.x-k8s.io_{plural}.yaml"
    for plural in (
        "clusterqueues",
        "localqueues",
        "resourceflavors",
        "workloadpriorityclasses",
        "workloads",
    )
)
FLUX_EXAMPLE = (("example_flux-interactive-trainjob.yaml", "examples/flux/flux-interactive.yaml"),)


@dataclass(frozen=True)
class Release:
    """One folder of the k8s data."""

    name: str  # the folder: "trainer-v2.3.0", "kueue-main"
    module: str | None = None  # Go module; None: not served by the proxy (../shared only)
    version: str | None = None
    crds: str = ""  # CRD directory inside the module
    crd_files: tuple[str, ...] | None = None  # only these files (None: every *.yaml)
    runtimes: str | None = None  # runtime directory (its subfolders flattened)
    extra_runtimes: tuple[tuple[str, str], ...] = ()  # (file name, path in the module)
    note: str = ""

    @property
    def spec(self) -> str:
        return f"{self.module}@{self.version}"


def _trainer(version: str, **kw: object) -> Release:
    return Release(
        f"trainer-{version}",
        TRAINER,
        version,
        crds="manifests/base/crds",
        runtimes="manifests/base/runtimes",
        **kw,  # type: ignore[arg-type]
    )


def _kueue(version: str, **kw: object) -> Release:
    return Release(
        f"kueue-{version}",
        KUEUE,
        version,
        crds="config/components/crd/bases",
        crd_files=KUEUE_CRDS,
        **kw,  # type: ignore[arg-type]
    )


NOT_SERVED = "Kueue main (0.20) is not served by the Go module proxy"

RELEASES: tuple[Release, ...] = (
    _trainer("v2.0.1"),
    _trainer("v2.1.0"),
    _trainer("v2.2.1"),
    _trainer("v2.3.0", extra_runtimes=FLUX_EXAMPLE),
    _kueue("v0.14.0"),
    # ../shared/k8s has v0.17.8, which the proxy does not serve (403 "not available").
    _kueue("v0.17.0", note="stands in for v0.17.8, which the Go module proxy does not serve"),
    _kueue("v0.19.2"),
    Release("kueue-main", note=f"{NOT_SERVED}; read from ../shared/k8s/kueue-main when present"),
)


class ModuleError(RuntimeError):
    """A release could not be fetched; the message is one line."""


def go_download(spec: str, go: str, timeout: float) -> Path:
    """``go mod download -json spec``: the module's directory in the module cache."""
    cmd = [go, "mod", "download", "-json", spec]
    env = {**os.environ, "GOWORK": "off", "GO111MODULE": "on"}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=Path.home()
        )
    except subprocess.TimeoutExpired:
        raise ModuleError(
            f"`go mod download {spec}` took over {timeout:.0f} s (is the Go module proxy, "
            f"$GOPROXY={os.environ.get('GOPROXY') or 'proxy.golang.org'}, reachable?)"
        ) from None
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if info.get("Error") or proc.returncode != 0 or not info.get("Dir"):
        why = info.get("Error") or proc.stderr.strip() or f"exit {proc.returncode}"
        raise ModuleError(f"`go mod download {spec}` failed: {' '.join(why.split())}")
    return Path(info["Dir"])


def _files(release: Release, src: Path) -> dict[str, dict[str, Path]]:
    """{"crds" | "runtimes": {file name: file in the module}}."""
    crd_dir = src / release.crds
    if release.crd_files is None:
        crds = {p.name: p for p in sorted(crd_dir.glob("*.yaml")) if p.name != "kustomization.yaml"}
    else:
        crds = {name: crd_dir / name for name in release.crd_files}
    out = {"crds": crds}
    if release.runtimes:
        found = sorted((src / release.runtimes).rglob("*.yaml"))
        runtimes = {p.name: p for p in found if p.name != "kustomization.yaml"}
        runtimes.update({name: src / path for name, path in release.extra_runtimes})
        out["runtimes"] = runtimes
    missing = [str(p) for files in out.values() for p in files.values() if not p.is_file()]
    if missing or not crds:
        raise ModuleError(f"{release.spec} lacks {', '.join(missing) or crd_dir}")
    return out


def _lay_out(target: Path, files: dict[str, dict[str, Path]], source: str) -> None:
    """Write ``target`` (symlinks) atomically: build beside it, then swap it in."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for sub, named in files.items():
        (tmp / sub).mkdir(parents=True)
        for name, path in named.items():
            (tmp / sub / name).symlink_to(path)
    (tmp / ".source").write_text(source + "\n")
    if target.is_symlink() or target.is_file():
        target.unlink()
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _fresh(target: Path) -> bool:
    """The folder was built before and every link still resolves."""
    stamp = target / ".source"
    if not stamp.is_file():
        return False
    links = list(target.glob("*/*.yaml"))
    return bool(links) and all(p.exists() for p in links)


def layout_key(shared: Path | None) -> str:
    """One folder per table and ../shared: checkouts with and without ../shared (or with
    another table) that run at the same time do not rebuild each other's folders."""
    text = repr((RELEASES, str(shared) if shared else None))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build(
    base: Path, go: str, shared: Path | None, timeout: float = 120.0
) -> tuple[Path, list[str], list[str]]:
    """Lay out every release of ``RELEASES`` under ``base/<layout_key>``.

    Returns (that folder, releases laid out, one-line notes on releases left out). Raises
    ``ModuleError`` when a release the proxy should serve cannot be fetched."""
    root = base / layout_key(shared)
    root.mkdir(parents=True, exist_ok=True)
    built: list[str] = []
    notes: list[str] = []
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for release in RELEASES:
            target = root / release.name
            if release.module is None:
                from_shared = shared / release.name if shared else None
                crds = sorted(from_shared.glob("crds/*.yaml")) if from_shared else []
                if not crds:
                    shutil.rmtree(target, ignore_errors=True)
                    notes.append(f"{release.name}: {NOT_SERVED} and {from_shared} is missing")
                    continue
                files = {
                    sub.name: {p.name: p for p in sorted(sub.glob("*.yaml"))}
                    for sub in sorted(from_shared.iterdir())
                    if sub.is_dir()
                }
                source = str(from_shared)
                if not (_fresh(target) and (target / ".source").read_text().strip() == source):
                    _lay_out(target, files, source)
                built.append(release.name)
                continue
            stamp = target / ".source"
            if _fresh(target) and stamp.read_text().split()[0] == release.spec:
                built.append(release.name)
                continue
            src = go_download(release.spec, go, timeout)
            _lay_out(target, _files(release, src), f"{release.spec} {src}")
            built.append(release.name)
        for stale in root.iterdir():
            if stale.is_dir() and not stale.name.startswith(".") and stale.name not in built:
                shutil.rmtree(stale, ignore_errors=True)
    return root, built, notes
