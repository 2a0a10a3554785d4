"""The benchmark suite runs end to end at a tiny size (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_suite_smoke(tmp_path: Path) -> None:
    """`python -m benchmarks --smoke` writes a table with a row for every benchmark."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.run import BENCHMARKS
    finally:
        sys.path.remove(str(ROOT))
    out, js = tmp_path / "results.md", tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--output", str(out), "--json", str(js)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = out.read_text()
    assert "| What | Ours | Baseline | Floor | Ratio | Goal | Met? |" in table
    assert "Machine:" in table
    rows = json.loads(js.read_text())["rows"]
    assert {r["bench"] for r in rows} == set(BENCHMARKS)
    errors = [r for r in rows if r["ours"].startswith("error") or r["baseline"].startswith("error")]
    assert not errors, errors
    for r in rows:
        assert f"| {r['what']} |" in table


def test_profile_script_smoke(tmp_path: Path) -> None:
    """`python -m benchmarks.profile_hotpaths --smoke` writes the three profile sections."""
    out = tmp_path / "PROFILE.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_hotpaths", "--smoke", "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for section in (
        "## session.execute of",
        "## `%%trainjob` with",
        "x `session.execute(['true'])`",
    ):
        assert section in text
    assert text.count("ncalls") >= 4
