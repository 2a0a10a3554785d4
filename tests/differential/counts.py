"""``python -m tests.differential.counts [PAIR]``: the differences each recorded case found, as
the markdown rows docs/local-cluster.md shows (all, and Kueue's share), from the recordings the
suite wrote (``artifacts/differential/<pair>/<scenario>--<runtime>.json``), and the patterns of
known_differences.yaml that none of them matched (candidates to drop once every pair agrees)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.differential import known as K
from tests.differential.scenarios import RUNTIMES, SCENARIOS

OUT = Path(__file__).resolve().parents[2] / "artifacts" / "differential"
KUEUE_MARKS = ("workload@", "visibility@", "/events/Workload:", "kueue.x-k8s.io", "/queue/")


def is_kueue(line: str) -> bool:
    """A difference in what Kueue does: the Workload, visibility, its Events, labels and patch,
    and the engine's QueueStatus."""
    key = line.split(": local=", 1)[0]
    return any(mark in key for mark in KUEUE_MARKS)


def counts(pair_dir: Path) -> list[tuple[str, int, int, int]]:
    """(case, all, Kueue's, not listed) per recorded case, in the suite's order."""
    rows = []
    for scenario in SCENARIOS:
        for runtime in RUNTIMES:
            f = pair_dir / f"{scenario}--{runtime}.json"
            if not f.exists():
                continue
            d = json.loads(f.read_text())
            lines = d["all"]
            rows.append(
                (f"{scenario}/{runtime}", len(lines), sum(map(is_kueue, lines)), len(d["new"]))
            )
    return rows


def unused(pair_dirs: list[Path]) -> list[str]:
    """The known patterns no recorded difference of ``pair_dirs`` matches."""
    known = K.load()
    used: set[str] = set()
    for pair in pair_dirs:
        for f in pair.glob("*--*.json"):
            for line in json.loads(f.read_text())["all"]:
                hit = K.match(line.split(": local=", 1)[0], known)
                if hit is not None:
                    used.add(hit.pattern)
    return [k.pattern for k in known if k.pattern not in used]


def main(argv: list[str]) -> int:
    pairs = [OUT / argv[0]] if argv else sorted(p for p in OUT.iterdir() if p.is_dir())
    for pair in pairs:
        print(f"{pair.name}\n")
        print("| scenario / runtime | all (Kueue) | not listed |\n| --- | --- | --- |")
        for case, total, kueue, new in counts(pair):
            print(f"| {case} | {total} ({kueue}) | {new} |")
        print()
    print("patterns no recording matched:", *(unused(pairs) or ["none"]), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
