"""The rates a validation measures: the full range around a configuration's knee, from well
below it (where both arms meet the SLO and any loss is plain) to past it (where the knee moved)."""

from __future__ import annotations

from collections.abc import Sequence

VALIDATE_FRACTIONS = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35)


def validation_rates(
    *knees_rps: float, fractions: Sequence[float] = VALIDATE_FRACTIONS
) -> list[float]:
    """The full range around each knee given (the incumbent's and the challenger's), merged:
    rates within 3% of one another are measured once."""
    rates: list[float] = []
    for rate in sorted(k * f for k in knees_rps if k > 0 for f in fractions):
        if not rates or rate > rates[-1] * 1.03:
            rates.append(rate)
    return rates
