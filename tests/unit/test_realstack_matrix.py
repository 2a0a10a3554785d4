"""The version matrix: its rows (a Kubernetes version with the Trainer/Kueue pairs upstream
supports on it), the parsing of ``--kubernetes``/``--pairs``, and the merge that keeps the rows a
run did not cover (devtools/realstack/matrix, versions)."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.realstack import matrix, versions
from devtools.realstack.versions import KUBERNETES, MATRIX, ROWS


def _row(
    trainer: str,
    kueue: str | None,
    result: str = "pass",
    date: str = "d1",
    kubernetes: str | None = KUBERNETES,
) -> dict:
    row = {
        "trainer": trainer,
        "kueue": kueue,
        "jobset": "v0.0.0",
        "result": result,
        "passed": 3,
        "failed": 0,
        "error": 0,
        "skipped": 0,
        "realcluster": {"runtimes": {"torch-distributed": [3, 3]}, "failures": []},
        "differential": {"passed": 2, "failed": 0, "error": 0, "skipped": 0, "seconds": 1.0},
        "build_s": 0.0,
        "up_s": 1.0,
        "test_s": 2.0,
        "date": date,
    }
    if kubernetes:
        row["kubernetes"] = kubernetes
    return row


def _unbuilt(kubernetes: str, why: str = "go build failed: x.go:1:2: undefined: y") -> dict:
    return {
        "kubernetes": kubernetes,
        "trainer": matrix.ANY,
        "kueue": matrix.ANY,
        "jobset": "",
        "node": "real",
        "result": "does not build here",
        "why": why,
        "build_s": 600.0,
        "date": "d2",
    }


def _keys(rows: list[dict]) -> list[tuple]:
    return [(matrix.kubernetes_of(r), r["trainer"], r["kueue"], r["date"]) for r in rows]


def test_a_partial_run_keeps_the_other_rows_in_matrix_order(tmp_path: Path) -> None:
    (first_t, first_k, _), (second_t, second_k, _) = MATRIX[0], MATRIX[1]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps([_row(second_t, second_k), _row(first_t, first_k, "fail")]))
    rows = matrix.merge([_row(first_t, first_k, "pass", "d2")], saved)
    assert _keys(rows) == [
        (KUBERNETES, first_t, first_k, "d2"),
        (KUBERNETES, second_t, second_k, "d1"),
    ]
    table = matrix._table(rows)
    assert table.count("| pass |") == 2 and "| d2 |" in table and "| d1 |" in table


def test_a_first_run_has_nothing_to_keep(tmp_path: Path) -> None:
    t, k, _ = MATRIX[0]
    assert matrix.merge([_row(t, k)], tmp_path / "none.json") == [_row(t, k)]


def test_rows_saved_before_the_kubernetes_axis_are_the_first_version_s(tmp_path: Path) -> None:
    t, k, _ = MATRIX[0]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps([_row(t, k, kubernetes=None)]))
    # the same pair on the version those rows ran on replaces them; on another it does not
    rows = matrix.merge([_row(t, k, date="d2", kubernetes="v1.31.14")], saved)
    assert _keys(rows) == [("v1.31.14", t, k, "d2"), (matrix.FIRST_KUBERNETES, t, k, "d1")]
    rows = matrix.merge([_row(t, k, date="d2", kubernetes=matrix.FIRST_KUBERNETES)], saved)
    assert _keys(rows) == [(matrix.FIRST_KUBERNETES, t, k, "d2")]


def test_rows_sort_by_kubernetes_version_then_pair(tmp_path: Path) -> None:
    (t0, k0, _), (t1, k1, _) = MATRIX[0], MATRIX[1]
    new = [
        _row(t1, k1, kubernetes="v1.37.2"),
        _row(t0, k0, kubernetes="v1.37.2"),
        _row(t1, k1, kubernetes="v1.9.1"),
        _unbuilt("v1.31.14"),
    ]
    rows = matrix.merge(new, tmp_path / "none.json")
    assert [(r["kubernetes"], r["trainer"]) for r in rows] == [
        ("v1.9.1", t1),
        ("v1.31.14", matrix.ANY),
        ("v1.37.2", t0),
        ("v1.37.2", t1),
    ]


def test_a_version_that_does_not_build_is_one_row_replacing_its_old_rows(tmp_path: Path) -> None:
    (t0, k0, _), (t1, k1, _) = MATRIX[0], MATRIX[1]
    saved = tmp_path / "saved.json"
    saved.write_text(
        json.dumps(
            [
                _row(t0, k0, kubernetes="v1.31.14"),
                _row(t1, k1, kubernetes="v1.31.14"),
                _row(t0, k0, kubernetes="v1.35.4"),
            ]
        )
    )
    rows = matrix.merge([_unbuilt("v1.31.14")], saved)
    assert _keys(rows) == [
        ("v1.31.14", matrix.ANY, matrix.ANY, "d2"),
        ("v1.35.4", t0, k0, "d1"),
    ]
    table = matrix._table(rows)
    line = next(x for x in table.splitlines() if x.startswith("| v1.31.14 "))
    assert "| does not build here: go build failed: x.go:1:2: undefined: y |" in line
    assert "| 600.0 |" in line and line.count("|") == table.splitlines()[2].count("|")
    # once it builds, any row of the version replaces the "does not build here" row
    saved.write_text(json.dumps(rows))
    rows = matrix.merge([_row(t1, k1, date="d3", kubernetes="v1.31.14")], saved)
    assert _keys(rows) == [("v1.31.14", t1, k1, "d3"), ("v1.35.4", t0, k0, "d1")]


def test_the_committed_rows_make_a_table() -> None:
    rows = json.loads(matrix.SAVED.read_text())
    pairs = {(t, k) for t, k, _ in MATRIX} | {(matrix.ANY, matrix.ANY)}
    assert {(r["trainer"], r["kueue"]) for r in rows} <= pairs
    assert all("kubernetes" in r for r in rows)
    table = matrix._table(rows)
    assert table.count("\n| v") == len(rows)
    widths = {line.count("|") for line in table.splitlines() if line.startswith("|")}
    assert len(widths) == 1, widths


def test_rows_parse_versions_and_pairs() -> None:
    assert matrix.rows("", "") == list(ROWS)
    # minors mean the newest patch that builds; each version gets the pairs upstream tests on it
    got = matrix.rows("1.31,v1.33", "")
    assert [(k, t, q) for k, t, q, _ in got] == [
        ("v1.31.0", "v2.1.0", "v0.14.8"),
        ("v1.33.13", "v2.1.0", "v0.14.8"),
        ("v1.33.13", "v2.2.1", "v0.17.0"),
    ]
    # pairs alone run on CI's Kubernetes, as before the Kubernetes axis; a full version stays
    notes = {(t, k): note for t, k, note in MATRIX}
    assert matrix.rows("", "2.2.1:0.19.2,v2.1.0:none") == [
        (KUBERNETES, "v2.2.1", "v0.19.2", notes[("v2.2.1", "v0.19.2")]),
        (KUBERNETES, "v2.1.0", None, "given"),
    ]
    assert [r[:3] for r in matrix.rows("v1.37.9", "v2.3.0:v0.19.2")] == [
        ("v1.37.9", "v2.3.0", "v0.19.2")
    ]


def test_upstream_pairs_on_each_kubernetes_version() -> None:
    def on(k8s: str) -> list[tuple[str, str | None]]:
        return [(t, k) for t, k, _ in versions.pairs_on(k8s)]

    assert on("v1.31.14") == [("v2.1.0", "v0.14.8")]  # Kueue 0.14's e2e: 1.31-1.34
    assert on("v1.35.4") == [("v2.2.1", "v0.17.0"), ("v2.2.1", "v0.19.2"), ("v2.3.0", "v0.19.2")]
    # the version the pair table was made on: every pair
    assert on(versions.EVERY_PAIR_ON) == [(t, k) for t, k, _ in MATRIX]
    # newer than any served Kueue's e2e: the newest Kueue's pairs, the note says untested
    newest = versions.pairs_on("v1.37.2")
    assert [(t, k) for t, k, _ in newest] == [
        ("v2.2.1", "v0.19.2"),
        ("v2.3.0", "v0.19.2"),
        ("v2.3.0", "v0.20.0"),
    ]
    assert all("newer than any served Kueue's e2e" in note for _, _, note in newest)
    assert on("v1.30.14") == []  # Trainer needs 1.31, no Kueue of the matrix tested 1.30
    # the default axis covers the minors the issue asks for, each at its newest patch that builds
    assert {versions.minor(k) for k in versions.MATRIX_KUBERNETES} >= {31, 33, 35, 36, 37}
    assert set(versions.MATRIX_KUBERNETES) <= set(versions.KUBERNETES_NEWEST.values())
    assert not set(versions.NOT_BUILDING) & set(versions.KUBERNETES_NEWEST.values())
    assert KUBERNETES in versions.MATRIX_KUBERNETES
    assert versions.kubernetes_version("1.37") == "v1.37.2"
    assert versions.kubernetes_version("1.31") == "v1.31.0"  # v1.31.14 does not build here
    assert versions.kubernetes_version(" v1.31.14") == "v1.31.14"


def test_one_line_picks_the_line_that_says_why() -> None:
    go = (
        "go build -trimpath ... failed (exit 1):\n"
        "# k8s.io/kubernetes/pkg/kubelet\n"
        "../../go/pkg/mod/k8s.io/kubernetes@v1.31.14/pkg/kubelet/x.go:12:3: undefined: foo\n"
        "../../go/pkg/mod/k8s.io/kubernetes@v1.31.14/pkg/kubelet/y.go:1:1: other\n"
    )
    assert matrix.one_line(go) == (
        "go build -trimpath ... failed (exit 1): "
        "../../go/pkg/mod/k8s.io/kubernetes@v1.31.14/pkg/kubelet/x.go:12:3: undefined: foo"
    )
    # what `go mod tidy` said for v1.31.14 here (2026-12-07), shortened
    tidy = (
        "go mod tidy failed (exit 1):\n"
        "\tk8s.io/endpointslice/metrics: k8s.io/endpointslice@v0.31.14: reading "
        "https://proxy.golang.org/k8s.io/endpointslice/@v/v0.31.14.zip: 403 Forbidden\n"
        "\tserver response: This module version is not available.\n"
        "go: trainjob-magics.local/realstack/kubernetes imports\n"
        "\tk8s.io/kubernetes/cmd/kube-scheduler imports\n"
        "\tk8s.io/kube-scheduler/config/v1: k8s.io/kube-scheduler@v0.31.14: reading "
        "https://proxy.golang.org/k8s.io/kube-scheduler/@v/v0.31.14.zip: 403 Forbidden\n"
    )
    assert matrix.one_line(tidy) == (
        "go mod tidy failed (exit 1): the Go module proxy does not serve "
        "k8s.io/endpointslice@v0.31.14 (403), k8s.io/kube-scheduler@v0.31.14 (403)"
    )
    other = "go mod tidy failed (exit 1):\ngo: trainjob imports\ngo: go.mod requires go >= 1.27\n"
    assert matrix.one_line(other).endswith(": go: go.mod requires go >= 1.27")
    up = (
        "up failed at control plane: kube-apiserver exited while waiting for /readyz:\n"
        "I1207 starting\n"
        'E1207 run.go:72] "command failed" err="cannot use public IP 127.0.0.1"\n'
        "I1207 shutting down\n"
    )
    assert matrix.one_line(up) == (
        "up failed at control plane: kube-apiserver exited while waiting for /readyz: "
        'E1207 run.go:72] "command failed" err="cannot use public IP 127.0.0.1"'
    )
    assert matrix.one_line("a | b\n") == "a / b"  # never splits a table cell
    assert len(matrix.one_line("x" * 1000)) == 300
    assert matrix.one_line("") == ""


def test_save_merges_into_the_file_again_and_again(tmp_path: Path) -> None:
    (t0, k0, _), (t1, k1, _) = MATRIX[0], MATRIX[1]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps([_row(t1, k1)]))
    new = [_row(t0, k0, date="d2")]
    matrix.save(new, saved)  # after the first row
    new.append(_row(t1, k1, "fail", "d3"))
    rows = matrix.save(new, saved)  # after the second: the first is not doubled
    assert _keys(json.loads(saved.read_text())) == _keys(rows)
    assert _keys(rows) == [(KUBERNETES, t0, k0, "d2"), (KUBERNETES, t1, k1, "d3")]


def test_run_builds_each_version_once_and_a_failed_build_is_one_row(
    tmp_path: Path, monkeypatch
) -> None:
    saved, doc = tmp_path / "saved.json", tmp_path / "doc.md"
    doc.write_text("# doc\n")
    monkeypatch.setattr(matrix, "SAVED", saved)
    monkeypatch.setattr(matrix, "DOC", doc)
    built: list[str] = []

    def build(parent: Path, k8s: str) -> dict:
        built.append(k8s)
        if k8s == "v1.31.14":
            return _unbuilt(k8s) | {"date": None}
        return {"build_s": 100.0}

    def pair(parent, trainer, kueue, pytest_args, suites, kubernetes) -> dict:
        return _row(trainer, kueue, kubernetes=kubernetes) | {"build_s": 5.0}

    monkeypatch.setattr(matrix, "build_kubernetes", build)
    monkeypatch.setattr(matrix, "run_pair", pair)
    monkeypatch.setattr(matrix, "_not_served", lambda *a: None)
    rc = matrix.run(tmp_path, "", [], ("realcluster",), "v1.31.14,v1.33.13")
    assert rc == 0 and built == ["v1.31.14", "v1.33.13"]
    rows = json.loads(saved.read_text())
    assert [(r["kubernetes"], r["trainer"], r["build_s"]) for r in rows] == [
        ("v1.31.14", matrix.ANY, 600.0),
        ("v1.33.13", "v2.1.0", 105.0),  # the version's build counted with its first row
        ("v1.33.13", "v2.2.1", 5.0),
    ]
    assert "| v1.31.14 | * | * | * | real | does not build here: " in doc.read_text()
