"""Bottleneck diagnosis: which of compute, scheduling, bandwidth and cache binds at the knee.

``diagnose`` reads a saturated load point (and, where there is one, a point below the knee) and
names the constraint that holds most of the wall time, with a confidence, the runner-up and
every reading that moved it (see ``kneepoint.policies.diagnosis.evidence`` for the rules). It
works with what a deployment exposes: GPM on Hopper and newer, only NVML's coarse utilisation,
or no GPU telemetry at all, where vLLM's own metrics and a roofline estimate of the observed
steps stand in. Before naming a constraint it checks that the point says anything about the
server: a host other work held over the point (``host_busy``), a client that fell behind
(``client_bound``) or a server that met its SLO with nothing
queued (``underloaded``) get no constraint; nor do signals too thin or too split to decide
(``inconclusive``).
"""

from __future__ import annotations

import math

from kneepoint.policies.diagnosis import evidence
from kneepoint.policies.diagnosis.context import ConfigContext
from kneepoint.policies.diagnosis.evidence import Tally
from kneepoint.policies.diagnosis.frontend import frontend_share
from kneepoint.policies.diagnosis.gpu_time import gpu_time
from kneepoint.policies.diagnosis.step_estimate import estimate_step
from kneepoint.records import (
    CONSTRAINTS,
    Binding,
    Constraint,
    Diagnosis,
    Evidence,
    LoadPoint,
    Observation,
    SignalSource,
    host_words,
)

# Below this share of the evidence the verdict is a guess: say so instead.
MIN_CONFIDENCE = 0.4
# Evidence that covers less than this share of the wall time is too thin to decide on.
MIN_COVERAGE = 0.5
# How far a verdict is trusted by the best source behind it: measured GPU counters over the
# engine's own metrics over a modelled estimate.
_RELIABILITY: dict[SignalSource, float] = {"gpm": 1.0, "nvml": 0.9, "vllm": 0.9, "roofline": 0.8}


def diagnose(context: ConfigContext) -> Diagnosis:
    """The binding constraint at the context's saturated point, with its evidence."""
    observation = context.observation
    point = observation.saturated
    gate = _gate(point)
    if gate is not None:
        return gate
    engine = context.engine
    estimate = (
        estimate_step(
            point.signals,
            observation.gpu,
            observation.model,
            engine,
            observation.workload,
            observed_step_s=_step_when_idle(point),
            efficiency=observation.efficiency,
        )
        if engine is not None
        else None
    )
    tally = Tally(device=observation.gpu.kind)
    held = max(
        evidence.cache_share(point, tally),
        evidence.admission_cap_share(point, engine.max_num_seqs, observation.response, tally)
        if engine is not None
        else 0.0,
        frontend_share(point, tally),
    )
    rest = 1.0 - held
    rest -= evidence.interference_share(point, rest, tally)
    gpu_time(point, estimate, rest, tally)
    if engine is not None:
        evidence.token_budget(point, engine.max_num_batched_tokens, tally)
    _context(observation, tally)
    return _verdict(point, tally)


def _step_when_idle(point: LoadPoint) -> float | None:
    """With nothing queued the engine idles between requests, so steps per second understate
    the step rate while it works; the median gap between tokens is the step time then."""
    if evidence.queued(point):
        return None
    gaps = [d["itl"].p50_ms for d in point.dists.values() if "itl" in d]
    gaps = [g for g in gaps if 0 < g < math.inf]
    return sum(gaps) / len(gaps) / 1000.0 if gaps else None


def _gate(point: LoadPoint) -> Diagnosis | None:
    """A verdict that names no constraint, when the point cannot say what binds."""
    s = point.signals
    if point.host_busy:  # else a busy host's points read "underloaded"
        reading = f"{host_words(s)} over the point: it measures the host, not the server"
        line = Evidence(
            signal="host_cpu_pressure",
            value=s.host_cpu_pressure,
            threshold="the host held by other work",
            reading=reading,
        )
        return _unnamed("host_busy", line, ("host",), point)
    if point.client_bound:
        line = Evidence(
            signal="send_lag_p99_ms",
            value=round(point.send_lag_p99_ms, 2),
            threshold="client fell behind its schedule",
            reading=f"the load generator ran {point.send_lag_p99_ms:.1f} ms late at p99: the "
            "point measures the client, not the server",
        )
        return _unnamed("client_bound", line, ("client",), point)
    if point.meets_slo and not evidence.queued(point) and not (s.preemptions_per_s or 0.0) > 0:
        line = Evidence(
            signal="waiting_mean",
            value=s.waiting_mean,
            threshold=f"< {evidence.WAITING:g}",
            reading=f"every SLO met at {point.rate_rps:.2f} req/s with nothing queued: the "
            "server had room to spare; measure past the knee to see what binds",
        )
        return _unnamed("underloaded", line, ("vllm", "client"), point)
    return None


def _unnamed(
    binding: Binding, line: Evidence, sources: tuple[SignalSource, ...], point: LoadPoint
) -> Diagnosis:
    """A gate's verdict: no constraint, the one reading that says why."""
    return Diagnosis(
        binding=binding, confidence=1.0, evidence=(line,), sources=sources, rate_rps=point.rate_rps
    )


def _context(observation: Observation, tally: Tally) -> None:
    """Readings that explain rather than decide: what changed from below the knee."""
    below, point = observation.below, observation.saturated
    if below is None:
        return
    for name, label in (
        ("kv_usage_mean", "KV usage"),
        ("waiting_mean", "waiting requests"),
        ("running_mean", "running sequences"),
    ):
        before, after = getattr(below.signals, name), getattr(point.signals, name)
        if before is None or after is None:
            continue
        tally.add(
            None,
            0.0,
            signal=f"{name}_change",
            value=round(after - before, 3),
            threshold="last rate met -> first failed",
            reading=f"{label} {before:.2f} at {below.rate_rps:.2f} req/s -> {after:.2f} at "
            f"{point.rate_rps:.2f} req/s",
        )


def _verdict(point: LoadPoint, tally: Tally) -> Diagnosis:
    scores = {c: round(tally.scores[c], 4) for c in CONSTRAINTS}
    ranked: list[Constraint] = sorted(CONSTRAINTS, key=lambda c: -scores[c])
    top, second = ranked[0], ranked[1]
    total = sum(scores.values())
    sources: tuple[SignalSource, ...] = tuple(sorted(tally.sources))
    reliability = max((_RELIABILITY[s] for s in sources if s in _RELIABILITY), default=0.0)
    share = scores[top] / total if total > 0 else 0.0
    confidence = round(share * reliability, 3)
    base = {
        "scores": scores,
        "evidence": tuple(tally.evidence),
        "sources": sources,
        "rate_rps": point.rate_rps,
        "runner_up": second if scores[second] > 0 else None,
    }
    if total < MIN_COVERAGE or confidence < MIN_CONFIDENCE:
        return Diagnosis(binding="inconclusive", confidence=confidence, **base)
    # The kind is kept whenever scheduling holds time, so a scheduling runner-up still says
    # which scheduling knobs would act on it.
    kind = max(tally.kinds.items(), key=lambda item: item[1])[0] if tally.kinds else None
    return Diagnosis(binding=top, confidence=confidence, scheduling_kind=kind, **base)
