"""Tests that need the upstream CRDs skip without them, with one clear line, and fail instead
under CI's switch (TRAINJOB_MAGICS_REQUIRE_K8S_DATA, exported by .ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import k8s_data, k8s_modules
from tests.helpers.k8s_data import ENV_K8S_DATA, ENV_REQUIRE, missing_line, require_k8s_data

REPO = Path(__file__).resolve().parents[2]


def test_default_is_the_module_cache_or_shared_k8s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_K8S_DATA, raising=False)
    assert k8s_data.shared_dir() == REPO.parent / "shared" / "k8s"
    source = k8s_data.default_source()
    assert k8s_data.k8s_data_dir() == source.path
    if shutil.which("go") and source.origin == "module cache":
        assert source.path.parent == k8s_data.cache_dir()
    else:
        assert source.path == k8s_data.shared_dir()
    monkeypatch.setenv(ENV_K8S_DATA, "/somewhere/else")
    assert k8s_data.k8s_data_dir() == Path("/somewhere/else")


def test_missing_data_skips_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_K8S_DATA, str(tmp_path / "nowhere"))
    monkeypatch.delenv(ENV_REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        require_k8s_data()
    line = str(info.value)
    assert "\n" not in line
    assert str(tmp_path / "nowhere") in line and ENV_K8S_DATA in line
    assert "kubeflow/trainer manifests/base/crds" in line
    assert "kubernetes-sigs/kueue config/components/crd/bases" in line
    assert line == missing_line(tmp_path / "nowhere")
    monkeypatch.setenv(ENV_REQUIRE, "0")
    with pytest.raises(pytest.skip.Exception):
        require_k8s_data()


def test_missing_data_fails_under_the_ci_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_K8S_DATA, str(tmp_path))
    monkeypatch.setenv(ENV_REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception) as info:
        require_k8s_data()
    assert str(tmp_path) in str(info.value) and ENV_REQUIRE in str(info.value)
    (tmp_path / "kueue-main" / "crds").mkdir(parents=True)
    (tmp_path / "kueue-main" / "crds" / "x.yaml").write_text("kind: CustomResourceDefinition\n")
    assert require_k8s_data() == tmp_path


@pytest.mark.parametrize(("require", "outcome"), [("", "skipped"), ("1", "failed")])
def test_whole_modules_skip_or_fail(tmp_path: Path, require: str, outcome: str) -> None:
    """End to end, through collection: the modules that read the k8s data skip every test
    that needs it (or fail every one under the switch), and run the rest."""
    env = {**os.environ, ENV_K8S_DATA: str(tmp_path / "none"), ENV_REQUIRE: require}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    modules = ["tests/unit/test_engine_body.py", "tests/unit/test_cel_rules.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *modules],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    tail = proc.stdout.strip().splitlines()[-1]
    assert f" {outcome}" in tail, proc.stdout[-3000:]
    assert "passed" in tail  # the tests that need no data still run
    if outcome == "skipped":
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert missing_line(tmp_path / "none") in proc.stdout
        assert "failed" not in tail and "error" not in tail
    else:
        assert proc.returncode == 1
        assert "skipped" not in tail


# --- the Go module cache (k8s_modules), with a stand-in `go` ------------------------------

FAKE_GO = """
import json, os, sys, time
spec = sys.argv[4]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
time.sleep(float(os.environ.get("FAKE_GO_SLEEP") or 0))
if spec == os.environ.get("FAKE_GO_REFUSE"):
    error = f"{spec}: reading https://proxy.golang.org/m: 403 Forbidden\\n\\tserver response: "
    print(json.dumps({"Path": "m", "Error": error + "This module version is not available."}))
    sys.exit(1)
print(json.dumps({"Dir": os.path.join(os.environ["FAKE_MODS"], spec)}))
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `go` that "downloads" every release of the table from tmp_path/mods."""
    mods = tmp_path / "mods"
    for release in k8s_modules.RELEASES:
        if release.module is None:
            continue
        src = mods / release.spec
        names = release.crd_files or ("a_trainjobs.yaml", "kustomization.yaml")
        for name in names:
            (src / release.crds).mkdir(parents=True, exist_ok=True)
            (src / release.crds / name).write_text("kind: CustomResourceDefinition\n")
        if release.runtimes:
            (src / release.runtimes / "sub").mkdir(parents=True)
            (src / release.runtimes / "top.yaml").write_text("kind: ClusterTrainingRuntime\n")
            (src / release.runtimes / "sub" / "deep.yaml").write_text("kind: X\n")
            (src / release.runtimes / "kustomization.yaml").write_text("resources: []\n")
        for _, path in release.extra_runtimes:
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text("kind: TrainJob\n")
    go = tmp_path / "bin" / "go"
    go.parent.mkdir()
    go.write_text(f"#!{sys.executable}\n{FAKE_GO}")
    go.chmod(0o755)
    monkeypatch.setenv("FAKE_MODS", str(mods))
    monkeypatch.setenv("FAKE_GO_LOG", str(tmp_path / "go.log"))
    monkeypatch.delenv("FAKE_GO_REFUSE", raising=False)
    monkeypatch.delenv("FAKE_GO_SLEEP", raising=False)
    return go


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    (shared / "kueue-main" / "crds").mkdir(parents=True, exist_ok=True)
    (shared / "kueue-main" / "crds" / "kueue.x-k8s.io_workloads.yaml").write_text("kind: C\n")
    return shared


def test_module_cache_has_the_shape_of_shared_k8s(fake_go: Path, tmp_path: Path) -> None:
    root, built, notes = k8s_modules.build(tmp_path / "cache", str(fake_go), _shared(tmp_path))
    assert built == [r.name for r in k8s_modules.RELEASES] and notes == []
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(built)
    trainer = root / "trainer-v2.3.0"
    assert sorted(p.name for p in (trainer / "crds").iterdir()) == ["a_trainjobs.yaml"]
    runtimes = sorted(p.name for p in (trainer / "runtimes").iterdir())
    assert runtimes == ["deep.yaml", "example_flux-interactive-trainjob.yaml", "top.yaml"]
    kueue = sorted(p.name for p in (root / "kueue-v0.17.0" / "crds").iterdir())
    assert kueue == list(k8s_modules.KUEUE_CRDS)
    link = root / "kueue-main" / "crds" / "kueue.x-k8s.io_workloads.yaml"
    assert link.is_symlink() and link.resolve().parent == tmp_path / "shared/kueue-main/crds"
    served = [r for r in k8s_modules.RELEASES if r.module]
    assert len((tmp_path / "go.log").read_text().splitlines()) == len(served)
    # Built once: a second build (another test process) does not run go again.
    assert k8s_modules.build(tmp_path / "cache", str(fake_go), _shared(tmp_path))[1] == built
    assert len((tmp_path / "go.log").read_text().splitlines()) == len(served)


def test_kueue_main_is_left_out_without_shared(fake_go: Path, tmp_path: Path) -> None:
    with_main, _, _ = k8s_modules.build(tmp_path / "cache", str(fake_go), _shared(tmp_path))
    root, built, [note] = k8s_modules.build(tmp_path / "cache", str(fake_go), None)
    assert "kueue-main" not in built and not (root / "kueue-main").exists()
    assert root != with_main and (with_main / "kueue-main").is_dir()  # both at once
    assert note.startswith("kueue-main: Kueue main (0.20) is not served by the Go module proxy")


def test_the_proxy_refusing_is_one_line(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_REFUSE", "sigs.k8s.io/kueue@v0.19.2")
    with pytest.raises(k8s_modules.ModuleError) as info:
        k8s_modules.build(tmp_path / "cache", str(fake_go), None)
    line = str(info.value)
    assert "\n" not in line and "sigs.k8s.io/kueue@v0.19.2" in line
    assert "403 Forbidden" in line and "not available" in line
    monkeypatch.setenv("FAKE_GO_REFUSE", "")
    monkeypatch.setenv("FAKE_GO_SLEEP", "5")
    with pytest.raises(k8s_modules.ModuleError, match=r"took over 1 s .*proxy"):
        k8s_modules.build(tmp_path / "cache2", str(fake_go), None, timeout=1)


def _sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str) -> None:
    """The default source found afresh, with PATH=path and nothing at ../shared/k8s."""
    monkeypatch.delenv(ENV_K8S_DATA, raising=False)
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(k8s_data, "shared_dir", lambda: tmp_path / "no-shared")
    monkeypatch.setattr(k8s_data, "default_source", k8s_data.find_source)


def test_without_go_the_line_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sources(monkeypatch, tmp_path, str(tmp_path / "empty-bin"))
    monkeypatch.delenv(ENV_REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        require_k8s_data()
    line = str(info.value)
    assert "\n" not in line and line.startswith(k8s_data.NO_GO + "; ")
    assert str(tmp_path / "no-shared") in line
    monkeypatch.setenv(ENV_REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="Go not found"):
        require_k8s_data()


def test_with_go_the_module_cache_is_used(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sources(monkeypatch, tmp_path, str(fake_go.parent))
    assert k8s_data.k8s_data_dir().parent == tmp_path / "xdg/trainjob-magics/k8s-data"
    assert k8s_data.releases("kueue") == ["kueue-v0.14.0", "kueue-v0.17.0", "kueue-v0.19.2"]
    assert require_k8s_data() == k8s_data.k8s_data_dir()
    monkeypatch.setenv("FAKE_GO_REFUSE", "sigs.k8s.io/kueue@v0.14.0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg2"))
    monkeypatch.delenv(ENV_REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^`go mod download sigs.k8s.io/kueue@v0.14"):
        require_k8s_data()
