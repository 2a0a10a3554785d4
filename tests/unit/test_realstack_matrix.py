"""The version matrix keeps the rows of pairs a run did not cover (devtools/realstack/matrix)."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.realstack import matrix
from devtools.realstack.versions import MATRIX


def _row(trainer: str, kueue: str, result: str = "pass", date: str = "d1") -> dict:
    return {
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


def test_a_partial_run_keeps_the_other_rows_in_matrix_order(tmp_path: Path) -> None:
    (first_t, first_k, _), (second_t, second_k, _) = MATRIX[0], MATRIX[1]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps([_row(second_t, second_k), _row(first_t, first_k, "fail")]))
    rows = matrix.merge([_row(first_t, first_k, "pass", "d2")], saved)
    assert [(r["trainer"], r["kueue"], r["date"]) for r in rows] == [
        (first_t, first_k, "d2"),
        (second_t, second_k, "d1"),
    ]
    table = matrix._table(rows)
    assert table.count("| pass |") == 2 and "| d2 |" in table and "| d1 |" in table


def test_a_first_run_has_nothing_to_keep(tmp_path: Path) -> None:
    t, k, _ = MATRIX[0]
    assert matrix.merge([_row(t, k)], tmp_path / "none.json") == [_row(t, k)]


def test_the_committed_rows_make_a_table() -> None:
    rows = json.loads(matrix.SAVED.read_text())
    assert {(r["trainer"], r["kueue"]) for r in rows} <= {(t, k) for t, k, _ in MATRIX}
    assert matrix._table(rows).count("\n| v") == len(rows)
