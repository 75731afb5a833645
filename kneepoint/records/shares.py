"""Shares of a measurement that several GPUs take side by side: the baseline's knee search and
its repeats, and a finalist's validation repeats. The run's Baseline or Validated is made of
them once all are in; until then the ledger holds each as it lands (``PartMeasured``), so a
driver killed part-way loses none of them.
"""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.drafts import AcceptanceProbe
from kneepoint.records.proposal import Outcome
from kneepoint.records.sweep import SweepResult


class BaselinePart(Record):
    """Part of the starting configuration's measurement, on one GPU: its knee search
    (``repeats`` 0), or repeats ``first_repeat`` onwards around the knee. The run's Baseline
    is made of them once all are in (``kneepoint.tune.steps.Steps.baseline_of``)."""

    first_repeat: int = Field(default=0, ge=0)
    repeats: int = Field(default=0, ge=0)
    sweep: SweepResult
    device_s: float = Field(ge=0.0)
    acceptance: AcceptanceProbe | None = None
    """With the knee search, where the study searches speculation: how drafts fared
    (its device time is in ``device_s``)."""


class ValidationPart(Record):
    """Repeats ``first_repeat`` to ``first_repeat + repeats - 1`` of a finalist's validation,
    measured on one GPU (each repeat the incumbent and the challenger in turn), or why they
    could not be. A validation is judged on all its parts (``kneepoint.policies.judge.verdict``)."""

    trial: int = Field(ge=1)
    first_repeat: int = Field(ge=0)
    repeats: int = Field(ge=1)
    incumbent: SweepResult | None = None
    challenger: SweepResult | None = None
    failure: Outcome | None = None
    device_s: float = Field(default=0.0, ge=0.0)

    @property
    def after(self) -> int:
        """The first repeat past this part."""
        return self.first_repeat + self.repeats
