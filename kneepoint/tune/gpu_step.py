"""One step of a run on several GPU sets, measured where a pool placed it (a Ray worker, or
in-process on the virtual clock): the run's events so far in, the events it adds out. It runs
``kneepoint tune``'s steps and executor, so a step exists once; the driver keeps the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kneepoint.measure import Bench, LogProgress, Progress, TrialFailedError
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Event,
    Finished,
    KnobCatalogue,
    MeasureRepeats,
    PartMeasured,
    Screen,
    SearchKnee,
    StudySpec,
    Validate,
)
from kneepoint.run import RunFolder, RunState
from kneepoint.tune.dispatch import GpuStep
from kneepoint.tune.execute import Executor
from kneepoint.tune.steps import Steps


@dataclass(frozen=True)
class StepJob:
    """Everything a placed step needs, picklable: it is shipped to the node that runs it."""

    study: StudySpec
    folder: Path
    """The run folder; its trial folders take the step's sweeps and server logs."""
    catalogue: KnobCatalogue
    vllm_version: str | None
    step: GpuStep
    events: tuple[Event, ...]
    """The run's ledger when the step was dispatched: the state it is measured against."""

    def __call__(self, gpu_ids: Sequence[str]) -> list[Event]:
        """Measure the step on ``gpu_ids`` (the ids the pool gave its server)."""
        study = self.study
        if gpu_ids:
            study = study.model_copy(update={"backend": study.backend.on_gpus(tuple(gpu_ids))})
        return self.measure(study, LogProgress())

    def measure(self, study: StudySpec, progress: Progress) -> list[Event]:
        """The events the step adds to the run whose ledger is ``events``."""
        state = RunState.replay(self.events, study.objective)
        bench = Bench(study, progress)
        steps = Steps(study, RunFolder(self.folder), bench, self.catalogue, self.vllm_version)
        executor = Executor(study, steps, progress)
        match step := self.step:
            case SearchKnee() | MeasureRepeats():
                return _baseline_share(steps, state, step)
            case Validate(repeats=(first, _)):
                n = study.tuning.validate_repeats
                phase = first - first % n  # the phases before this one, never a sibling share
                parts = state.validation_parts.get(step.trial, [])
                earlier = [p for p in parts if p.after <= phase]
                return [PartMeasured(validation=executor.validation_part(step, state, earlier))]
            case Screen() | CheckQuality() | CheckBurst():
                return [executor.event(step, state)]
        raise AssertionError(f"{step.key} is not measured on a GPU")


def _baseline_share(
    steps: Steps, state: RunState, step: SearchKnee | MeasureRepeats
) -> list[Event]:
    """The knee search or some repeats of the starting configuration; a server that failed
    them is the run's failure, as in ``kneepoint tune``."""
    try:
        if isinstance(step, SearchKnee):
            return [PartMeasured(baseline=steps.baseline_knee())]
        knee = next(p for p in state.baseline_parts if p.repeats == 0)
        first, n = step.repeats
        return [PartMeasured(baseline=steps.baseline_repeats(knee, range(first, first + n)))]
    except TrialFailedError as exc:
        return [Finished(reason="baseline_failed", detail=str(exc))]
