"""The same scenarios on the local cluster and on the real stack, at the same versions: every
difference in what the engine and the user observe is either listed with its reason in
known_differences.yaml (and docs/local-cluster.md) or fails the test.

Every scenario runs on each runtime of ``RUNTIMES`` with ``TRAINJOB_MAGICS_DIFF_CASES=all``
(what ``python -m devtools.realstack matrix`` sets). Otherwise (the README's test command, CI)
each scenario runs on one runtime, the runtimes taken in turn, so every scenario and every
runtime is recorded in a third of the time (about 28 s a case on 2 cores).

Each test writes its recordings and differences to
``artifacts/differential/<pair>/<scenario>--<runtime>.json`` (``TRAINJOB_MAGICS_DIFF_OUT``
moves it) for the counts in docs/local-cluster.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.differential import known as K
from tests.differential.normalise import diff
from tests.differential.scenarios import RUNTIMES, SCENARIOS, record
from tests.differential.targets import Target

REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("TRAINJOB_MAGICS_DIFF_OUT", REPO / "artifacts" / "differential"))
pytestmark = pytest.mark.timeout(900)

ALL_CASES = [(scenario, runtime) for scenario in SCENARIOS for runtime in RUNTIMES]
IN_TURN = [(scenario, RUNTIMES[i % len(RUNTIMES)]) for i, scenario in enumerate(SCENARIOS)]
CASES = ALL_CASES if os.environ.get("TRAINJOB_MAGICS_DIFF_CASES") == "all" else IN_TURN


@pytest.mark.parametrize(("scenario", "runtime"), CASES, ids=[f"{s}-{r}" for s, r in CASES])
def test_scenario_agrees_with_the_real_stack(
    scenario: str, runtime: str, local: Target, real: Target
) -> None:
    on_local = record(local, scenario, runtime)
    on_real = record(real, scenario, runtime)
    found = diff(f"{scenario}/{runtime}", on_local, on_real)
    known = K.load()
    new = [d for d in found if K.match(d.key, known) is None]
    pair = f"trainer-{real.trainer}-kueue-{real.kueue}"
    out = OUT / pair
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{scenario}--{runtime}.json").write_text(
        json.dumps(
            {
                "scenario": scenario,
                "runtime": runtime,
                "differences": len(found),
                "new": [d.line() for d in new],
                "all": [d.line() for d in found],
                "local": on_local,
                "real": on_real,
            },
            indent=1,
            default=str,
        )
    )
    print(f"{scenario}/{runtime}: {len(found)} differences, {len(new)} not listed")
    assert not new, f"{len(new)} difference(s) not in known_differences.yaml:\n" + "\n".join(
        d.line() for d in new
    )
