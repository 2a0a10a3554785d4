"""Tests that need the upstream CRDs skip without them, with one clear line, and fail instead
under CI's switch (TRAINJOB_MAGICS_REQUIRE_K8S_DATA, exported by .ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import k8s_data
from tests.helpers.k8s_data import ENV_K8S_DATA, ENV_REQUIRE, missing_line, require_k8s_data

REPO = Path(__file__).resolve().parents[2]


def test_default_is_shared_k8s_beside_the_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_K8S_DATA, raising=False)
    assert k8s_data.k8s_data_dir() == REPO.parent / "shared" / "k8s"
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
