"""The README's Python API example runs as written against the local cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.kube import trainjob_names

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    examples = [b for b in blocks if "with connect(" in b]
    assert len(examples) == 1, "the README should hold one `with connect(...)` example"
    return examples[0]


@pytest.mark.timeout(120)
def test_readme_python_example_runs(local_cluster, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.kubeconfig_path))
    monkeypatch.chdir(tmp_path)
    kubeconfig = local_cluster.kubeconfig_path
    before = set(trainjob_names(kubeconfig))
    namespace: dict[str, object] = {}
    exec(compile(_python_example(), str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert re.search(r"-launcher-0-0\n", out) and out.count("-node-0-") == 3
    assert re.search(r"^stderr .*-launcher-0-0", out, flags=re.M)  # on_output saw stderr live
    assert json.loads((tmp_path / "result.json").read_text()) == {"loss": 0.1}
    per_pod = namespace["per_pod"]
    assert len(per_pod.results) == 4 and per_pod.ok  # type: ignore[attr-defined]
    # leaving the `with` block deleted the TrainJob it created
    assert set(trainjob_names(kubeconfig, include_deleting=False)) <= before
