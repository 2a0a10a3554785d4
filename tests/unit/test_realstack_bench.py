"""``python -m devtools.realstack bench`` without a cluster: which stacks it plans (versions,
pairs), its arguments, the rows a version that fails gets, the table it writes, the kubectl the
benchmarks run, and the kubectl build beside the cached servers (devtools/realstack/bench,
gobuild; benchmarks/baselines, bench_versions)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks import baselines, bench_versions
from benchmarks import versions_table as vt
from benchmarks.common import Stats
from devtools.realstack import __main__ as cli
from devtools.realstack import bench, gobuild, stack
from devtools.realstack.versions import DEFAULT, MATRIX_KUBERNETES


def test_without_versions_it_plans_the_matrix_versions() -> None:
    plans = bench.plan("")
    assert [p.kubernetes for p in plans] == list(MATRIX_KUBERNETES)


def test_a_minor_means_its_newest_patch_and_repeats_go() -> None:
    plans = bench.plan("1.31, v1.37.2,1.31")
    assert [p.kubernetes for p in plans] == ["v1.31.0", "v1.37.2"]


def test_each_version_gets_cis_pair_where_upstream_supports_it() -> None:
    by = {p.kubernetes: (p.trainer, p.kueue) for p in bench.plan("1.31,1.33,1.36,1.37")}
    ci = (DEFAULT.trainer, DEFAULT.kueue)
    assert by["v1.36.3"] == ci and by["v1.37.2"] == ci
    assert by["v1.31.0"] == ("v2.1.0", "v0.14.8")  # JobSet 0.11's CRD does not install on 1.31
    assert by["v1.33.13"] != ci and by["v1.33.13"][1] is not None


def test_a_pair_given_applies_to_every_version() -> None:
    plans = bench.plan("1.33,1.36", "2.1.0:none")
    assert {(p.trainer, p.kueue) for p in plans} == {("v2.1.0", None)}
    assert plans[0].label() == "v1.33.13 (Trainer v2.1.0, no Kueue)"
    with pytest.raises(ValueError, match="TRAINER:KUEUE"):
        bench.plan("1.36", ":v0.19.2")


def test_a_kueue_014_clash_leaves_kueue_out() -> None:
    old, new = bench.plan("1.31")[0], bench.plan("1.37")[0]
    assert bench.without_clashing_kueue(old, lambda port: False) == (old, "")
    got, why = bench.without_clashing_kueue(old, lambda port: port == 8082)
    assert got.kueue is None and got.trainer == old.trainer and "8082" in why
    assert bench.without_clashing_kueue(new, lambda port: True) == (new, "")


def test_every_run_folder_fits_under_roots_home() -> None:
    parent = Path("/root/.cache/trainjob-magics/realstack/run")
    for p in bench.plan(""):
        stack.check_run_path(parent / bench.run_name(p))


def test_the_command_line() -> None:
    args = cli._parser().parse_args(["bench", "--kubernetes", "1.31,1.37", "--exec-n", "30"])
    assert (args.kubernetes, args.exec_n, args.rounds, args.size_mb) == ("1.31,1.37", 30, 7, 256)
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["bench", "--rounds", "0"])


def test_a_bad_pair_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--kubernetes", "1.36", "--pair", ":x"]) == 2
    assert "TRAINER:KUEUE" in capsys.readouterr().err


def test_a_version_that_fails_gets_a_row_and_the_others_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Benchmark results\n")
    plans = bench.plan("1.31,1.37")

    def run_one(p: bench.Plan, parent: Path, command: str, sizes: dict) -> tuple[list, str]:
        if p.kubernetes == "v1.31.0":
            raise RuntimeError("the pod went away\nmore")
        row = vt.VersionRow(
            p.label(), "exec round trip", "1", "kubectl v1.37.2: 2", "2x", "1", "d", command
        )
        return [row], "alike"

    monkeypatch.setattr(bench, "run_one", run_one)
    assert bench.run(tmp_path, plans, "python -m devtools.realstack bench", out) == 1
    rows, notes = vt.parse(vt.split(out.read_text())[1])
    assert [(r.version, r.ours) for r in rows] == [
        ("v1.31.0", "failed: RuntimeError: the pod went away"),
        ("v1.37.2", "1"),
    ]
    assert notes == {"v1.37.2": "alike"}


def test_the_rows_of_one_version() -> None:
    m = bench_versions.Measured(
        exec={"ours": Stats([0.07] * 40), "kubectl": Stats([0.21] * 40), "raw": Stats([0.06])},
        download={"ours": Stats([2.0, 2.5, 3.0]), "kubectl": Stats([3.0, 4.0, 5.0])},
        size=256 << 20,
        rounds=3,
        mode="tunnel",
        kubectl_protocols={"exec": "x", "port-forward": "y"},
        ours_exec="v5.channel.k8s.io",
        load=(3.04, 5.96),
    )
    exec_row, fwd_row = bench_versions.rows(m, "v1.31.0 (x)", "kubectl v1.31.0", "d", "c")
    assert exec_row.ours == "p50 70.0 ms, p95 70.0 ms"
    assert exec_row.kubectl.startswith("kubectl v1.31.0: p50 210 ms")
    assert exec_row.ratio == "p50 3.00x, p95 3.00x" and exec_row.load == "3.0 -> 6.0"
    assert fwd_row.ours == "2.50 s (2.00 s-3.00 s), 107 MB/s"
    assert fwd_row.ratio == "1.60x kubectl's speed" and "tunnel" in fwd_row.what


def test_the_benchmarks_run_the_kubectl_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(baselines.KUBECTL_ENV, raising=False)
    assert baselines.kubectl() == "kubectl"
    fake = tmp_path / "kubectl"
    answer = {"clientVersion": {"gitVersion": "v1.31.0"}}
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    fake.chmod(0o755)
    with baselines.using_kubectl(str(fake)):
        assert baselines.kubectl() == str(fake) and baselines.kubectl_available()
        assert baselines.kubectl_label() == f"kubectl v1.31.0 ({fake})"
    assert baselines.KUBECTL_ENV not in os.environ
    assert baselines.kubectl_version(str(tmp_path / "missing")) == "unknown version"


def test_kubectl_is_built_alone_beside_cached_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servers may be running: only the missing kubectl is built, stamped like upstream."""
    monkeypatch.setenv("TRAINJOB_MAGICS_REALSTACK_CACHE", str(tmp_path))
    module = tmp_path / "mod"
    module.mkdir()
    (module / "go.mod").write_text("replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n)\n")
    monkeypatch.setattr(gobuild, "module_dir", lambda *a: module)
    calls: list[list[str]] = []
    monkeypatch.setattr(gobuild, "go_run", lambda args, cwd, log: calls.append(args))
    out = tmp_path / "bin" / "kubernetes-v1.31.0"
    out.mkdir(parents=True)
    for b in gobuild.KUBE_BINARIES:
        (out / b).touch()
    assert gobuild.build("kubernetes", "v1.31.0", tmp_path / "log") == out
    assert calls == []  # cached
    gobuild.build("kubectl", "v1.31.0", tmp_path / "log")
    tidy, build = calls
    assert tidy == ["mod", "tidy"] and build[-1] == "k8s.io/kubernetes/cmd/kubectl"
    assert not any(f"cmd/{b}" in " ".join(build) for b in gobuild.KUBE_BINARIES)
    stamp = build[build.index("-ldflags") + 1]
    assert "k8s.io/client-go/pkg/version.gitVersion=v1.31.0" in stamp
    src = tmp_path / "src" / "kubernetes-v1.31.0"
    tools = (src / "tools.go").read_text()
    assert all(f'cmd/{b}"' in tools for b in (*gobuild.KUBE_BINARIES, "kubectl"))
    assert "k8s.io/api => k8s.io/api v0.31.0" in (src / "go.mod").read_text()
    assert gobuild.kubectl_path("v1.31.0") == out / "kubectl"


@pytest.mark.parametrize(
    ("log", "said"),
    [  # client-go's -v=4 lines of 1.31 and of 1.37
        (
            "I1 websocket.go:133] The subprotocol is v5.channel.k8s.io\n",
            "WebSocket, v5.channel.k8s.io",
        ),
        (
            'I1 websocket.go:140] "Subprotocol negotiated" protocol="v5.channel.k8s.io"\n',
            "WebSocket, v5.channel.k8s.io",
        ),
        (
            "I1 tunneling_dialer.go:85] negotiated protocol: portforward.k8s.io\n",
            "WebSocket, portforward.k8s.io",
        ),
        (
            'I1 tunneling_dialer.go:130] "Negotiation complete" '
            'protocol="SPDY/3.1+portforward.k8s.io"',
            "WebSocket, SPDY/3.1+portforward.k8s.io",
        ),
        (
            "I1 fallback.go:56] RemoteCommand fallback: 403\n",
            "fell back (RemoteCommand fallback: 403)",
        ),
        ("", "no protocol logged"),
    ],
)
def test_what_kubectl_streamed_over(log: str, said: str) -> None:
    assert bench_versions.protocols(log) == said
