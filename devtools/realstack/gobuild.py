"""Build the components from their Go modules at pinned versions, into a cache keyed by version.

- Kubernetes: ``k8s.io/kubernetes`` replaces its staging modules with ``./staging/...``, which
  ``go install pkg@version`` refuses, so a generated wrapper module requires it and pins every
  staging module to the matching ``v0.N.M`` tag (as out-of-tree scheduler plugins do). The same
  module builds ``kubectl`` of that version into the same folder (``build("kubectl", ...)``),
  for the benchmarks' baseline; the stack itself does not need it.
- etcd: ``go.etcd.io/etcd/server/v3`` has ``replace`` directives too; the same kind of wrapper.
- JobSet, Trainer, Kueue, containerd, CoreDNS, crictl: a wrapper module that requires the
  module at the version (no replace directives), then ``go build``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from devtools.realstack.paths import bin_dir, src_dir
from devtools.realstack.procs import StackError

KUBE_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
)
KUBECTL = "kubectl"  # built on demand (build_kubectl), beside KUBE_BINARIES

# component -> (module, package paths, binary names)
GO_INSTALL = {
    "jobset": ("sigs.k8s.io/jobset", ("",), ("jobset",)),
    "trainer": (
        "github.com/kubeflow/trainer/v2",
        ("cmd/trainer-controller-manager",),
        ("trainer-controller-manager",),
    ),
    "kueue": ("sigs.k8s.io/kueue", ("cmd/kueue",), ("kueue",)),
    # the real node: the container runtime, its shim and CLI, the cluster DNS, the CRI CLI
    "containerd": (
        "github.com/containerd/containerd/v2",
        ("cmd/containerd", "cmd/containerd-shim-runc-v2", "cmd/ctr"),
        ("containerd", "containerd-shim-runc-v2", "ctr"),
    ),
    "crictl": ("sigs.k8s.io/cri-tools", ("cmd/crictl",), ("crictl",)),
}

# build tags per component (containerd's snapshotters that need C libraries stay out)
GO_TAGS = {"containerd": "no_btrfs no_devmapper"}


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    env["CGO_ENABLED"] = "0"
    return env


def go_run(args: list[str], cwd: Path | None, log: Path) -> None:
    """Run ``go ARGS`` in ``cwd``, output to ``log``; a failure raises with the last lines."""
    if shutil.which("go") is None:
        raise StackError(
            "the real stack is built with Go, and `go` is not on PATH: install Go 1.26"
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n--- {time.strftime('%H:%M:%S')} go {' '.join(args)} (in {cwd})\n".encode())
        out.flush()
        proc = subprocess.run(["go", *args], cwd=cwd, env=go_env(), stdout=out, stderr=out)
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").splitlines()[-20:]
        raise StackError(
            f"go {' '.join(args)} failed (exit {proc.returncode}):\n" + "\n".join(lines)
        )


def module_dir(module: str, version: str, log: Path) -> Path:
    """The module's read-only source in the module cache (downloaded when missing)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        env=go_env(),
        capture_output=True,
        text=True,
    )
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        why = info.get("Error") or proc.stderr.strip() or proc.stdout.strip()
        raise StackError(f"the Go module proxy did not serve {module}@{version}: {why}")
    return Path(info["Dir"])


# the version packages hack/lib/version.sh stamps: the servers read component-base's, kubectl
# (`kubectl version --client`) and client-go's User-Agent read client-go's
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")


def _stamp(version: str) -> str:
    major, minor = re.match(r"v(\d+)\.(\d+)", version).groups()
    flags = ["-s -w"]
    for pkg in VERSION_PACKAGES:
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _wrapper(component: str, version: str, require: str, replaces: list[str], log: Path) -> Path:
    src = src_dir(component, version)
    src.mkdir(parents=True, exist_ok=True)
    body = [f"module trainjob-magics.local/realstack/{component}", "", "go 1.26.0", ""]
    body.append(f"require {require} {version}")
    if replaces:
        body += ["", "replace ("] + [f"\t{r}" for r in replaces] + [")"]
    wanted = "\n".join(body) + "\n"
    gomod = src / "go.mod"
    if not gomod.exists() or not gomod.read_text().startswith(wanted.split("require")[0]):
        gomod.write_text(wanted)
    return src


def _build_kube(version: str, binaries: tuple[str, ...], log: Path) -> Path:
    """Build those of ``binaries`` (``cmd/NAME`` of k8s.io/kubernetes) that are missing; the
    others are left alone (a running stack may be executing them)."""
    out = bin_dir("kubernetes", version)
    missing = [b for b in binaries if not (out / b).exists()]
    if not missing:
        return out
    kube = module_dir("k8s.io/kubernetes", version, log)
    staging = re.findall(
        r"^\s*(k8s\.io/[\w.-]+) => \./staging/", (kube / "go.mod").read_text(), re.M
    )
    if not staging:
        raise StackError(f"k8s.io/kubernetes@{version}: no staging replace directives found")
    tag = "v0." + version.split(".", 1)[1]
    src = _wrapper(
        "kubernetes", version, "k8s.io/kubernetes", [f"{m} => {m} {tag}" for m in staging], log
    )
    # the servers' imports, and kubectl's when it is built (the servers' build is as before)
    wanted = dict.fromkeys((*KUBE_BINARIES, *binaries))
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{b}"' for b in wanted)
    tools = f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"
    if not (src / "tools.go").exists() or (src / "tools.go").read_text() != tools:
        (src / "tools.go").write_text(tools)
    go_run(["mod", "tidy"], src, log)
    out.mkdir(parents=True, exist_ok=True)
    pkgs = [f"k8s.io/kubernetes/cmd/{b}" for b in missing]
    go_run(["build", "-trimpath", "-ldflags", _stamp(version), "-o", f"{out}/", *pkgs], src, log)
    return out


def build_kubernetes(version: str, log: Path) -> Path:
    """The control plane, kubelet and kube-proxy of ``version``."""
    return _build_kube(version, KUBE_BINARIES, log)


def build_kubectl(version: str, log: Path) -> Path:
    """``kubectl`` of ``version`` (cmd/kubectl of the same module), beside the other binaries."""
    return _build_kube(version, (KUBECTL,), log)


def kubectl_path(version: str) -> Path:
    """Where ``build_kubectl`` puts kubectl of ``version``."""
    return bin_dir("kubernetes", version) / KUBECTL


def build_etcd(version: str, log: Path) -> Path:
    out = bin_dir("etcd", version)
    if (out / "etcd").exists():
        return out
    src = _wrapper("etcd", version, "go.etcd.io/etcd/server/v3", [], log)
    (src / "tools.go").write_text(
        '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n'
    )
    go_run(["mod", "tidy"], src, log)
    out.mkdir(parents=True, exist_ok=True)
    go_run(
        [
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(out / "etcd"),
            "go.etcd.io/etcd/server/v3",
        ],
        src,
        log,
    )
    return out


def build_go_install(component: str, version: str, log: Path) -> Path:
    """A wrapper module that requires the component's module: ``go install pkg@version`` would
    also ask the proxy for the module's version list (deprecation check), which it refuses for
    some modules here (403), while a pinned ``require`` needs only that version."""
    module, packages, binaries = GO_INSTALL[component]
    out = bin_dir(component, version)
    if all((out / b).exists() for b in binaries):
        return out
    src = _wrapper(component, version, module, [], log)
    pkgs = [f"{module}/{p}".rstrip("/") for p in packages]
    imports = "\n".join(f'\t_ "{p}"' for p in pkgs)
    (src / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    go_run(["mod", "tidy"], src, log)
    out.mkdir(parents=True, exist_ok=True)
    tags = ["-tags", GO_TAGS[component]] if component in GO_TAGS else []
    for pkg, binary in zip(pkgs, binaries, strict=True):
        go_run(
            ["build", "-trimpath", *tags, "-ldflags", "-s -w", "-o", str(out / binary), pkg],
            src,
            log,
        )
    return out


# The plugins the stack's Corefile uses (realnode/dns.py). CoreDNS's own main links every plugin,
# cloud DNS providers' SDKs included (about 5 minutes on 2 cores); a main of our own with these
# is CoreDNS's documented way to build with selected plugins (coremain.Run, the plugins imported
# for their registration; dnsserver.Directives still orders them).
COREDNS_PLUGINS = ("bind", "cache", "errors", "health", "kubernetes", "template")


def build_coredns(version: str, log: Path) -> Path:
    out = bin_dir("coredns", version)
    if (out / "coredns").exists():
        return out
    src = _wrapper("coredns", version, "github.com/coredns/coredns", [], log)
    imports = "\n".join(f'\t_ "github.com/coredns/coredns/plugin/{p}"' for p in COREDNS_PLUGINS)
    (src / "main.go").write_text(
        'package main\n\nimport (\n\t"github.com/coredns/coredns/coremain"\n'
        f"{imports}\n)\n\nfunc main() {{\n\tcoremain.Run()\n}}\n"
    )
    (src / "tools.go").unlink(missing_ok=True)
    go_run(["mod", "tidy"], src, log)
    out.mkdir(parents=True, exist_ok=True)
    go_run(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "coredns"), "."], src, log)
    return out


def build(component: str, version: str, log: Path) -> Path:
    """The folder with the component's binaries at ``version``, built when missing."""
    if component == "kubernetes":
        return build_kubernetes(version, log)
    if component == KUBECTL:
        return build_kubectl(version, log)
    if component == "coredns":
        return build_coredns(version, log)
    if component == "etcd":
        return build_etcd(version, log)
    return build_go_install(component, version, log)
