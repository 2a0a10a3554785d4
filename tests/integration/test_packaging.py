"""What a user installs (issue 29): ``python -m build`` makes an sdist and a wheel that
``twine check`` accepts, and the wheel, installed in a new venv away from the repository, brings
the magics, the server extension and the prebuilt lab extension, both shown enabled by
``jupyter server extension list`` and ``jupyter labextension list`` with no other step."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABEXT = "trainjob-magics-labextension"
pytestmark = pytest.mark.timeout(900)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=800, check=False
    )
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build requirements (hatchling, hatch-jupyter-builder, jupyterlab's
    # jlpm) are in the test venv already; the build itself is the same
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)], REPO)
    return out


def test_the_sdist_and_the_wheel_pass_twine_check(dist: Path) -> None:
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    out = _run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], REPO
    )
    assert out.count("PASSED") == 2, out
    names = zipfile.ZipFile(wheels[0]).namelist()
    shared = f"trainjob_magics-{wheels[0].name.split('-')[1]}.data/data/share/jupyter"
    assert f"{shared}/labextensions/{LABEXT}/package.json" in names
    assert any(n.startswith(f"{shared}/labextensions/{LABEXT}/static/") for n in names)
    assert any(n.endswith("jupyter_server_config.d/trainjob_magics.json") for n in names), names
    assert "trainjob_magics/magics/__init__.py" in names
    assert not any("node_modules" in n or n.startswith("tests/") for n in names)


def test_the_wheel_in_a_new_venv_brings_magics_and_both_extensions(
    dist: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    away = tmp_path / "elsewhere"  # not the repository: nothing importable from the checkout
    away.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    clean["PATH"] = f"{env_dir / 'bin'}:{clean.get('PATH', '')}"
    clean["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter-config")  # the user's config: empty
    wheel = next(dist.glob("*.whl"))
    # what the README says: pip install trainjob-magics (here the wheel), beside JupyterLab
    _run([py, "-m", "pip", "install", "--quiet", str(wheel), "jupyterlab"], away, clean)
    where = _run([py, "-c", "import trainjob_magics; print(trainjob_magics.__file__)"], away, clean)
    assert str(env_dir) in where and str(REPO) not in where, where
    servers = _run([py, "-m", "jupyter", "server", "extension", "list"], away, clean)
    assert "trainjob_magics.jupyter" in servers and "enabled" in servers, servers
    assert "OK" in servers.split("trainjob_magics.jupyter", 1)[1][:200], servers
    labs = _run([py, "-m", "jupyter", "labextension", "list"], away, clean)
    line = next((ln for ln in labs.splitlines() if LABEXT in ln), "")
    assert "enabled" in line and "OK" in line, labs
    magics = _run(
        [
            str(env_dir / "bin" / "ipython"),
            "--quick",
            "-c",
            "%load_ext trainjob_magics\n"
            "line = get_ipython().magics_manager.magics['line']\n"
            "print(sorted(m for m in line if m.startswith('trainjob')))\n"
            "print('cell', 'trainjob' in get_ipython().magics_manager.magics['cell'])",
        ],
        away,
        clean,
    )
    assert "trainjob_connect" in magics and "cell True" in magics, magics
