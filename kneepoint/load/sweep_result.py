"""A sweep's points read as one result, pure: the SLO capacity each repeat's counted points
give, their mean and interval, and why a capacity is only a floor where no counted failure
bounds it; and one configuration's legs (repeats measured apart) merged into one result."""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.load.capacity import interpolate_capacity, mean_interval
from kneepoint.records import EngineConfig, SweepKind, SweepPoint, SweepResult


def read_sweep(
    points: Sequence[SweepPoint],
    kind: SweepKind,
    config: EngineConfig,
    *,
    arm: str = "incumbent",
    capped: bool = False,
    elapsed_s: float = 0.0,
) -> SweepResult:
    """The ``arm``'s points as one result (``capped``: a time cap ended the sweep)."""
    mine = [p for p in points if p.arm == arm]
    counted = [p for p in mine if p.counted]
    by_repeat, floors = [], []
    for repeat in sorted({p.repeat for p in counted}):
        margins = [(p.rate_rps, p.margin) for p in counted if p.repeat == repeat]
        capacity = interpolate_capacity(margins)
        by_repeat.append(capacity if capacity is not None else 0.0)
        floors.append(floor_reason([p for p in mine if p.repeat == repeat], capped))
    passing = [p.rate_rps for p in counted if p.margin <= 1.0]
    mean = low = high = None
    if by_repeat and any(by_repeat):
        mean, low, high = mean_interval(by_repeat)
    return SweepResult(
        kind=kind,
        config=config,
        points=tuple(mine),
        capacity_rps=mean,
        capacity_low_rps=max(0.0, low) if low is not None else None,
        capacity_high_rps=high,
        capacity_by_repeat=tuple(by_repeat),
        knee_rps=max(passing) if passing else None,
        invalid_points=len(mine) - len(counted),
        capped=capped,
        floor_reason=next((f for f in floors if f is not None), None),
        elapsed_s=elapsed_s,
    )


def floor_reason(points: Sequence[SweepPoint], capped: bool) -> str | None:
    """Why the capacity these points give (one repeat's) is only a floor: no counted failure
    above the highest counted pass. None where one bounds it, or nothing passed."""
    passes = [p.rate_rps for p in points if p.passed]
    if not passes:
        return None
    top = max(passes)
    if any(p.failed and p.rate_rps > top for p in points):
        return None
    unknown = sorted(
        (p for p in points if not p.counted and p.rate_rps > top), key=lambda p: p.rate_rps
    )
    if unknown:
        why = unknown[0].why_not_counted() or "it could not tell"
        return (
            f"the host cannot measure this server above {top:.2f} req/s: at "
            f"{unknown[0].rate_rps:.2f} req/s, {why}"
        )
    if capped:
        return f"the time cap ended the sweep at {top:.2f} req/s before any rate failed"
    return f"no rate tried failed the SLO (the highest, {top:.2f} req/s, met it)"


def merge(results: Sequence[SweepResult], kind: SweepKind = "validate") -> SweepResult:
    """One configuration's legs (repeats measured apart) as one result, its capacity read per
    repeat and summarised with its interval."""
    points = [p for r in results for p in r.points]
    return read_sweep(
        points,
        kind,
        results[0].config,
        arm=points[0].arm if points else "incumbent",
        capped=any(r.capped for r in results),
        elapsed_s=sum(r.elapsed_s for r in results),
    ).model_copy(update={"retried": tuple(cause for r in results for cause in r.retried)})
