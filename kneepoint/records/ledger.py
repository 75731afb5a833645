"""The events of a tuning run, as the ledger records them (one JSON object per line).

Every decision is written (and fsynced) before the agent acts on it, and every measurement
after it is taken, so the ledger alone rebuilds the run: a killed agent replays it and goes on
from the first step without its record. Events carry the device time they spent, so budgets
and costs survive a restart too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from kneepoint.records.base import Record
from kneepoint.records.diagnosis import Diagnosis
from kneepoint.records.drafts import AcceptanceProbe
from kneepoint.records.engine import EngineConfig
from kneepoint.records.host import HostInfo
from kneepoint.records.judgement import Judgement
from kneepoint.records.proposal import Outcome, Proposal, Pruning
from kneepoint.records.shares import BaselinePart, ValidationPart
from kneepoint.records.sweep import SweepResult

StopReason = Literal[
    "max_trials",
    "max_device_hours",
    "deadline",
    "nothing_to_try",
    "nothing_worth_trying",
    "diminishing_returns",
    "exhausted",
    "baseline_failed",
]


class RunStarted(Record):
    event: Literal["run_started"] = "run_started"
    study_name: str
    seed: int
    kneepoint_version: str
    started_at: datetime
    study_sha256: str | None = None
    """The resolved study's digest (``kneepoint.run.folder.study_digest``): a resumed
    run whose study.yaml was edited since would judge challengers against a baseline
    measured under another study. None in ledgers written before it was recorded."""
    host: HostInfo | None = None
    """The machine the run started on (None in ledgers written before it was recorded)."""


class Baseline(Record):
    """The starting configuration measured: knee search, repeats, diagnosis and pruning."""

    event: Literal["baseline"] = "baseline"
    config: EngineConfig
    knee: SweepResult
    repeats: SweepResult
    """The incumbent re-measured around its knee, repeated: its capacity and noise."""
    diagnosis: Diagnosis
    pruning: Pruning
    device_s: float = Field(ge=0.0)
    acceptance: AcceptanceProbe | None = None
    """How n-gram drafts fared on the study's traffic, where it searches speculation and
    starts without (``kneepoint.tune.acceptance_step``): every later diagnosis prices
    speculation from it."""


class Proposed(Record):
    """A trial about to run: what, why and what is expected (written before it runs)."""

    event: Literal["proposed"] = "proposed"
    trial: int = Field(ge=1)
    proposal: Proposal
    quality_check: bool = False
    """A knob it changes alters model outputs: it must pass a quality check to be promoted."""


class Screened(Record):
    """A trial's cheap look (or its preflight refusal), and whether it goes on."""

    event: Literal["screened"] = "screened"
    trial: int = Field(ge=1)
    outcome: Outcome
    sweep: SweepResult | None = None
    diagnosis: Diagnosis | None = None
    finalist: bool = False
    reason: str
    device_s: float = Field(default=0.0, ge=0.0)


QualityVerdict = Literal["passed", "failed", "skipped"]


class QualityChecked(Record):
    """Greedy outputs of fixed prompts compared with the incumbent's, or why they were not:
    ``skipped`` lets the trial go on, judged on its measured effect alone, and every report
    of it says it was not quality-checked."""

    event: Literal["quality_checked"] = "quality_checked"
    trial: int = Field(ge=1)
    verdict: QualityVerdict
    agreement: float | None = None
    """Share of output tokens equal, position by position (None: not checked)."""
    threshold: float
    reason: str
    device_s: float = Field(default=0.0, ge=0.0)

    @property
    def rejects(self) -> bool:
        return self.verdict == "failed"

    @model_validator(mode="before")
    @classmethod
    def _from_passed(cls, data: Any) -> Any:
        # Ledgers written before the verdict had `passed: bool`, and a skipped check wrote
        # passed=true with a reason starting "skipped": such runs still resume.
        if isinstance(data, dict) and "passed" in data and "verdict" not in data:
            data = dict(data)
            passed = data.pop("passed")
            skipped = passed and str(data.get("reason", "")).startswith("skipped")
            data["verdict"] = "skipped" if skipped else ("passed" if passed else "failed")
        return data


class Validated(Record):
    """A finalist and the incumbent measured in turn over the full range, repeated; or the
    failure that stopped it (then the trial is over and the incumbent stays)."""

    event: Literal["validated"] = "validated"
    trial: int = Field(ge=1)
    incumbent: SweepResult | None = None
    challenger: SweepResult | None = None
    judgement: Judgement | None = None
    failure: Outcome | None = None
    """Set when a server failed during validation: what the trial's outcome becomes."""
    device_s: float = Field(default=0.0, ge=0.0)

    @property
    def promote(self) -> bool:
        return self.judgement is not None and self.judgement.promote

    @property
    def early(self) -> bool:
        """Promoted from its first pair by the early look (``kneepoint.policies.judge.early``);
        a known-noise verdict that does not promote closed a finalist below its round's
        winner (``kneepoint.policies.judge.contention``)."""
        return (
            self.promote and self.judgement is not None and self.judgement.method == "known_noise"
        )


class Promoted(Record):
    """A challenger became the incumbent; the wall moved, so it is diagnosed again."""

    event: Literal["promoted"] = "promoted"
    trial: int = Field(ge=1)
    config: EngineConfig
    objective: float
    repeats: SweepResult
    diagnosis: Diagnosis
    pruning: Pruning


class BurstWindow(Record):
    """One window of a burst check: the requests scheduled in it, and their worst TTFT margin
    (each class's TTFT percentile over its limit; above 1 misses the SLO)."""

    start_s: float
    """Seconds after the burst ended (negative: before or during it)."""
    requests: int = Field(ge=0)
    ttft_margin: float


class BurstChecked(Record):
    """The winner after the search: the operating rate, a burst, the recovery (written after
    the run's Finished; ``skipped`` says why none was measured)."""

    event: Literal["burst_checked"] = "burst_checked"
    config: EngineConfig
    operating_rps: float = Field(ge=0.0)
    burst_rps: float = Field(ge=0.0)
    burst_s: float = Field(ge=0.0)
    recover_within_s: float = Field(gt=0.0)
    windows: tuple[BurstWindow, ...] = ()
    recovery_s: float | None = None
    """From the burst's end to the start of the first window from which every later one met
    the TTFT limits; None where the last ones still missed (or nothing was measured)."""
    skipped: str = ""
    device_s: float = Field(default=0.0, ge=0.0)

    @property
    def recovered(self) -> bool:
        return self.recovery_s is not None and self.recovery_s <= self.recover_within_s

    def summary(self) -> str:
        """The check in one line, for the console and the report."""
        if self.skipped:
            return f"burst check not run: {self.skipped}"
        head = (
            f"burst {self.operating_rps:.2f} -> {self.burst_rps:.2f} req/s for {self.burst_s:g} s"
        )
        if self.recovery_s is None:
            return f"{head}: TTFT still outside the SLO at the end (flagged)"
        verdict = "recovered" if self.recovered else "recovered too slowly (flagged)"
        return (
            f"{head}: TTFT back within the SLO {self.recovery_s:.0f} s after it, "
            f"{verdict} (limit {self.recover_within_s:g} s)"
        )


class Finished(Record):
    event: Literal["finished"] = "finished"
    reason: StopReason
    detail: str = ""

    @property
    def burst_follows(self) -> bool:
        """The winner's burst check follows the stop: every run that measured a baseline
        has a winner (its start at least) whose recovery from a burst is worth timing."""
        return self.reason != "baseline_failed"


class PartMeasured(Record):
    """A share of the baseline or of a finalist's validation, measured on one GPU set while
    others took the rest (a run on several GPUs, ``kneepoint.tune.dispatch``). The Baseline or
    Validated made of the shares follows once all are in and carries their device time."""

    event: Literal["part_measured"] = "part_measured"
    baseline: BaselinePart | None = None
    validation: ValidationPart | None = None

    @model_validator(mode="after")
    def _one_share(self) -> PartMeasured:
        if (self.baseline is None) == (self.validation is None):
            raise ValueError("a part is of the baseline or of a validation, one of them")
        return self


class Placed(Record):
    """Where one attempt at a step of a run on several GPUs ran: the node and the GPUs Ray
    gave its server. Written as the attempt ends, before the events it measured; an attempt
    lost with its node (the step is run again) or one whose trial closed while it ran keeps
    the device time no other event carries, so the budget counts it."""

    event: Literal["placed"] = "placed"
    step: str
    """The step's key (``kneepoint.records.actions``)."""
    node: str
    gpu_ids: tuple[str, ...] = ()
    attempt: int = Field(default=1, ge=1)
    lost: str | None = None
    """Why nothing it measured is kept (its node died, its trial closed); None: it is."""
    device_s: float = Field(default=0.0, ge=0.0)
    """Device time (GPU-seconds) of a lost attempt; 0 for a kept one, whose events carry it."""


Event = Annotated[
    RunStarted
    | Baseline
    | Proposed
    | Screened
    | QualityChecked
    | Validated
    | Promoted
    | Finished
    | BurstChecked
    | PartMeasured
    | Placed,
    Field(discriminator="event"),
]
