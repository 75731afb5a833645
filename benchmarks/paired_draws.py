"""Paired workload draws: one configuration's objective at several workload seeds, the same
seeds for every configuration, so two configurations are compared draw by draw.

regret.py reads its optimum and regret from these: one knee search is one draw of the
workload, and the best of a grid each measured once is partly the best draw.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kneepoint.policies.judge.stats import t_quantile


@dataclass(frozen=True)
class Draws:
    """Per configuration (a fingerprint), its objective at each workload seed offset."""

    by_config: dict[str, list[float]]

    def mean(self, key: str) -> float:
        return statistics.mean(self.by_config[key])

    def ratio_interval(self, key: str, against: str) -> tuple[float, float]:
        """A 95% t interval of the mean per-draw ratio ``key`` / ``against``."""
        ratios = [
            a / b if b else 0.0
            for a, b in zip(self.by_config[key], self.by_config[against], strict=True)
        ]
        mean = statistics.mean(ratios)
        if len(ratios) < 2:
            return mean, mean
        half = t_quantile(0.975, len(ratios) - 1) * statistics.stdev(ratios)
        return mean - half / math.sqrt(len(ratios)), mean + half / math.sqrt(len(ratios))

    def values(self, key: str) -> str:
        return " ".join(f"{v:.1f}" for v in self.by_config[key])
