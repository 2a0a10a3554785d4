"""The torchrun prelude (engine/exec/torchrun_prelude.py) in real shells, under the engine's
pid-file wrapper (whose streams are the exec's: here pipes of the test), with a stand-in
``torchrun`` that prints what it was given: where ``--tee 3`` goes, when nothing is added, and
what the markers say. The real torchrun's side is in test_torchrun_ranks.py (recordings) and
tests/integration/test_torchrun_local.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.end_marks import unmarked
from trainjob_magics.engine.exec.ranks import RANKS_SCRIPT
from trainjob_magics.engine.exec.scripts import ARGV0, WRAPPER
from trainjob_magics.engine.exec.torchrun_prelude import (
    launcher_argv,
    prelude,
    wants_launchers,
    wants_torchrun,
)

TOKEN = "tjm0123456789abcdef"
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]

# The stand-in interpreter answers the prelude's version question; anything else runs the
# script with sh (the stand-in torchrun is sh code under a python-like #! line).
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -c ]; then [ -n "$FAKE_TORCH" ] && echo "$FAKE_TORCH"; exit 0; fi
exec sh "$@"
"""
FAKE_PYTHON3 = """#!/bin/sh
case "$1 $2" in "-c import importlib.metadata"*)
  [ -n "$FAKE_TORCH" ] && echo "$FAKE_TORCH"; exit 0;;
esac
printf 'PY:%s\\n' "$@"
"""
FAKE_TORCHRUN = """#!{python}
printf 'ARG:%s\\n' "$@"
printf 'TPL:%s\\n' "${{TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE-unset}}"
prev=; for a; do [ "$prev" = --log_dir ] && [ -d "$a" ] && echo LOGDIR; prev=$a; done
exit "${{FAKE_RC:-0}}"
"""


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    """``tmp_path/bin`` with a stand-in ``torchrun`` and ``python3``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = tmp_path / "fakepython"
    fake_python.write_text(FAKE_PYTHON)
    (bin_dir / "torchrun").write_text(FAKE_TORCHRUN.format(python=fake_python))
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    for path in (fake_python, bin_dir / "torchrun", bin_dir / "python3"):
        path.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def run(
    body: str, home: Path, shell: str = "sh", torch: str = "2.6.0", **env: str
) -> subprocess.CompletedProcess[str]:
    argv = [shell, "-c", WRAPPER, ARGV0, "x-test", *launcher_argv([shell, "-c", body], TOKEN)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    environ.update(
        PATH=f"{home / 'bin'}:{os.environ['PATH']}", TMPDIR=str(home / "tmp"), FAKE_TORCH=torch
    )
    environ.update(env)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environ, cwd=home)
    return unmarked(done, "x-test")


def begin_words(out: str) -> list[str]:
    m = re.search("\x1e" + TOKEN + " tbegin (.*)\n", out)
    assert m is not None, out
    return m.group(1).split()


def args(out: str) -> list[str]:
    return [ln[4:] for ln in out.splitlines() if ln.startswith("ARG:")]


@pytest.mark.parametrize("shell", SHELLS)
def test_tee_before_the_users_arguments_and_the_template_on_new_torch(
    stand_ins: Path, shell: str
) -> None:
    done = run(
        "echo before; torchrun --nproc_per_node 2 s.py --tee 0; echo rc=$?", stand_ins, shell
    )
    out = done.stdout
    assert out.startswith("before\n\x1e" + TOKEN + " tbegin 1 template default static 1:1 0 2 ")
    a = args(out)
    assert a[:2] == ["--tee", "3"] and a[2] == "--log_dir"
    assert a[3].startswith(str(stand_ins / "tmp" / "trainjob-torchrun."))
    assert a[4:] == ["--nproc_per_node", "2", "s.py", "--tee", "0"]  # the script's own --tee
    assert "TPL:\x1e${rank}:${local_rank}\x1f\n" in out and "LOGDIR\n" in out
    assert out.endswith(f"\x1e{TOKEN} tend 1 0\nrc=0\n")
    assert done.stderr == f"\x1e{TOKEN} tbegin {' '.join(begin_words(out))}\n\x1e{TOKEN} tend 1 0\n"
    assert not list((stand_ins / "tmp").glob("trainjob-torchrun.*"))  # its log dir is gone
    w = begin_words(out)
    assert w[8:11] == ["1", "torchrun", "2.6.0"] and w[11] not in ("", "-")


@pytest.mark.parametrize("torch", ["1.13.0a0+gitunknown", "2.2.2", ""])
def test_older_or_unknown_torch_gets_the_default_prefix(stand_ins: Path, torch: str) -> None:
    out = run("torchrun s.py", stand_ins, torch=torch).stdout
    assert "TPL:unset\n" in out
    w = begin_words(out)
    assert w[1] == "default" and w[10] == (torch or "-")


@pytest.mark.parametrize(
    "body",
    [
        "torchrun --tee 1 s.py",
        "torchrun -t 3 s.py",
        "torchrun -t3 s.py",
        "torchrun --te 3 s.py",  # argparse takes a prefix
        "torchrun --redirects 3 s.py",
        "torchrun -r3 s.py",
        "torchrun --log-dir d s.py",
        "torchrun --log_dir=d s.py",
        "torchrun --logs-specs x s.py",
        "torchrun --log-line-prefix-template x s.py",
        "torchrun --help",
        "torchrun --nproc 2 s.py",  # not an option torchrun has: its arguments are not known
        "PET_TEE=3 torchrun s.py",
        "PET_REDIRECTS=0 torchrun s.py",
        "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=x; torchrun s.py",
        "torchrun s.py | cat",
        'x=$(torchrun s.py); echo "$x"',
        "torchrun s.py > f; cat f",
        "torchrun s.py 2>&1",
    ],
)
def test_nothing_added_when_the_user_chose_or_redirected(stand_ins: Path, body: str) -> None:
    done = run(body, stand_ins)
    assert TOKEN not in done.stdout + done.stderr
    assert "--tee\n3" not in "\n".join(args(done.stdout)) or "--tee 1" in body
    assert done.returncode == 0, done.stderr


def test_a_role_the_default_prefix_cannot_hold_exactly(stand_ins: Path) -> None:
    old = "1.13.0a0"
    assert TOKEN not in run("torchrun --role 'a b' s.py", stand_ins, torch=old).stdout
    words = begin_words(run("torchrun --role=trainer s.py", stand_ins, torch=old).stdout)
    assert words[2] == "trainer"
    assert TOKEN in run("torchrun --role 'a b' s.py", stand_ins).stdout  # the template: any role


@pytest.mark.parametrize(
    ("body", "env", "expected"),
    [
        ("torchrun s.py", {}, ["static", "1:1", "0", "1", "-", "0"]),
        (
            "torchrun s.py",
            {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "4"},
            ["static", "2", "1", "4", "4", "0"],
        ),
        (
            "torchrun --nnodes=2 --node-rank 1 --nproc-per-node 8 --rdzv_backend c10d s.py",
            {"PET_NPROC_PER_NODE": "4"},
            ["c10d", "2", "1", "8", "4", "1"],
        ),
        ("torchrun --standalone --nproc_per_node=4 s.py", {}, ["c10d", "1:1", "0", "4", "-", "1"]),
        ("torchrun s.py", {"PET_STANDALONE": "1"}, ["c10d", "1:1", "0", "1", "-", "0"]),
        ("torchrun --nnodes '1 2' s.py", {}, ["static", "-", "0", "1", "-", "0"]),
    ],
)
def test_the_rendezvous_facts_in_the_marker(
    stand_ins: Path, body: str, env: dict[str, str], expected: list[str]
) -> None:
    words = begin_words(run(body, stand_ins, **env).stdout)
    assert words[3:9] == expected


def test_python_m_torch_distributed_run(stand_ins: Path) -> None:
    body = (
        "python3 -c 'print(1)'; python3 -m other x; "
        "python3 -u -X dev -m torch.distributed.run --nproc_per_node 2 s.py"
    )
    out = run(body, stand_ins).stdout
    py = [ln[3:] for ln in out.splitlines() if ln.startswith("PY:")]
    assert py[:5] == ["-c", "print(1)", "-m", "other", "x"]  # untouched, no marker before them
    assert out.count("tbegin") == 1 and begin_words(out)[9] == "python3"
    tail = py[5:]
    assert tail[:5] == ["-u", "-X", "dev", "-m", "torch.distributed.run"]
    assert tail[5:8] == ["--tee", "3", "--log_dir"] and tail[9:] == [
        "--nproc_per_node",
        "2",
        "s.py",
    ]


def test_exit_codes_set_e_and_a_missing_torchrun(stand_ins: Path) -> None:
    done = run("set -e; torchrun s.py; echo after", stand_ins, FAKE_RC="3")
    assert done.returncode == 3 and "after" not in done.stdout
    assert done.stdout.endswith(f"\x1e{TOKEN} tend 1 3\n") and done.stderr.endswith("tend 1 3\n")
    done = run("torchrun a.py; torchrun b.py; echo rc=$?", stand_ins)
    assert "tbegin 2 " in done.stdout and done.stdout.endswith("tend 2 0\nrc=0\n")
    missing = run("PATH=/nonexistent; torchrun s.py; echo rc=$?", stand_ins)
    assert TOKEN not in missing.stdout and missing.stdout.endswith("rc=127\n")


def test_which_commands_get_which_prelude() -> None:
    assert wants_launchers(["sh", "-c", "cd x && torchrun --nproc-per-node 4 t.py"])
    assert wants_launchers(["bash", "-c", "python -m torch.distributed.run t.py"])
    assert wants_launchers(["sh", "-c", "mpirun -np 2 hostname"])
    assert not wants_launchers(["sh", "-c", "torchrun.sh x; echo torchrun_log"])
    assert not wants_launchers(["torchrun", "t.py"])  # argv: no shell, no functions
    assert prelude("mpirun x") == RANKS_SCRIPT
    torch_only = prelude("torchrun x")
    assert "mpirun()" not in torch_only and "python()" not in torch_only
    assert "python3()" in prelude("python3 -m torch.distributed.run x")
    both = prelude("mpirun x; torchrun y")
    assert both.startswith(RANKS_SCRIPT[:-15]) and "torchrun()" in both
    assert both.endswith('eval "$__Tc"\n') and both.count('eval "$__Tc"') == 1
    argv = launcher_argv(["/bin/sh", "-c", "torchrun x"], TOKEN)
    assert argv == ["/bin/sh", "-c", torch_only, "sh", TOKEN, "torchrun x"]


def test_several_pods_get_torchruns_prelude_only() -> None:
    text = "mpirun -np 2 hostname; torchrun t.py"
    assert wants_torchrun(["sh", "-c", text])
    assert not wants_torchrun(["sh", "-c", "mpirun -np 2 hostname"])
    argv = launcher_argv(["sh", "-c", text], TOKEN, mpi=False)
    assert "torchrun()" in argv[2] and "mpirun()" not in argv[2]
