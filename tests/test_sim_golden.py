"""A seeded simulator run gives the numbers it gave when tests/fixtures/sim_golden.json was
written: making the simulator or the measurement path faster must not move a result.

Integers, strings and booleans must match exactly; floats to 1e-12 relative, so that only a
different libm's last bit could pass where the arithmetic itself changed.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tests.support.sim_golden import FIXTURE, figures


def _differences(expected: Any, actual: Any, path: str) -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return [f"{path}: keys {sorted(set(expected) ^ set(actual))} differ"]
        return [d for k in expected for d in _differences(expected[k], actual[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(actual, list | tuple):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items, now {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for d in _differences(e, a, f"{path}[{i}]")]  # fmt: skip
    return [] if _same(expected, actual) else [f"{path}: {expected!r}, now {actual!r}"]


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float | int):
        both_nan = math.isnan(expected) and math.isnan(actual)
        return both_nan or math.isclose(expected, actual, rel_tol=1e-12, abs_tol=1e-12)
    return bool(expected == actual)


def test_seeded_runs_give_the_recorded_numbers() -> None:
    expected = json.loads(FIXTURE.read_text())
    actual = json.loads(json.dumps(figures()))  # the same JSON round trip as the fixture's
    differences = _differences(expected, actual, "")
    assert not differences, "\n".join(differences[:20])
