"""What a one-off diagnosis measures of a server: the study's knee search, or (with a known
knee) one rate below it and one past it; then the objective's own rates where it reads others.
Measured through the harness (``bench``), so a launched server that crashes or hangs is
measured again on a fresh one, and an interrupt leaves what was measured in the folder's
sweep.json."""

from __future__ import annotations

from pathlib import Path

from kneepoint.load import merge, rules
from kneepoint.measure import sweep
from kneepoint.measure.bench import Bench, with_retried
from kneepoint.measure.progress import Progress
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.probes.backends import Prober, Target
from kneepoint.records import StudySpec, SweepResult
from kneepoint.run import write_atomically


def diagnosis_sweep(
    study: StudySpec, folder: Path, progress: Progress, knee_rps: float | None = None
) -> tuple[SweepResult, str | None]:
    """``study.engine``'s sweep for a diagnosis, written to ``folder``'s sweep.json, and the
    server's version where it says one; every point is told to ``progress`` as it lands."""
    config = study.engine
    bench = Bench(study, progress)

    def measured(probe: Prober, target: Target) -> tuple[SweepResult, str | None]:
        version = target.endpoint.version if target.endpoint is not None else None
        return _rates(study, probe, progress, knee_rps), version

    where = (folder, "diagnose", study.tuning.screen_seconds)
    try:
        (result, version), _, retried = bench.on_server("diagnosis", config, where, measured)
    except KeyboardInterrupt:
        if bench.watched is not None and bench.watched.points:
            interrupted = bench.watched.interrupted(config)
            write_atomically(folder / "sweep.json", interrupted.model_dump_json(indent=1))
        raise
    result = with_retried(result, retried)
    write_atomically(folder / "sweep.json", result.model_dump_json(indent=1) + "\n")
    return result, version


def _rates(
    study: StudySpec, probe: Prober, progress: Progress, knee_rps: float | None
) -> SweepResult:
    config, slo, retakes = study.engine, study.slo, study.measurement.retakes
    if knee_rps is None:
        progress.phase("diagnose", "knee search")
        result = study_knee_search(probe, study, config)
    else:
        # at most two points, each retaken where it could not tell
        planned = 2 * (1 + retakes)
        progress.phase("diagnose", f"one point past {knee_rps:g} req/s and one below", planned)
        rates = [0.6 * knee_rps, 1.2 * knee_rps]
        result = sweep.measure_rates(probe, config, slo, rates, kind="knee", retakes=retakes)
    if not rules(study.objective).is_capacity and result.points:
        # The objective's own rates too: a diagnosis never reports another objective.
        knee = result.capacity_rps or max(p.rate_rps for p in result.points)
        rates = rules(study.objective).repeat_rates(knee)
        progress.phase("diagnose", f"{rules(study.objective).name()}: {len(rates)} points")
        at = sweep.measure_rates(probe, config, slo, rates, kind="knee", retakes=retakes)
        result = merge([result, at], kind="knee")
    return result
