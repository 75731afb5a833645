"""The acceptance probe: how n-gram drafts fare on the study's traffic, measured before any
trial speculates, so that turning speculation on is priced from the server's own counters
rather than a prior.

Acceptance is a property of the traffic (and of the client's temperature), not of the batch:
the starting configuration with the knob's longest draft, at one low rate on a fresh server,
reads vLLM's spec-decode counters (the share of decoding steps that drafted, and the share of
drafts accepted at each position), and every diagnosis of the run prices each draft length
from them at its own knee (``kneepoint.policies.pruning.spec_effects``). A server that will not
speculate says so in its own words, and the knob is ruled out with them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import JsonValue

from kneepoint.measure import Bench, TrialFailedError
from kneepoint.records import AcceptanceProbe, EngineConfig, KnobCatalogue, StudySpec, SweepResult
from kneepoint.report import probe_words

KNOB = "speculative_config"


def probed_setting(
    study: StudySpec, catalogue: KnobCatalogue, vllm_version: str | None = None
) -> dict[str, JsonValue] | None:
    """The speculative setting to probe (the knob's longest n-gram draft), or None where
    the run needs no probe: the study does not search speculation, starts with it on (its
    own points carry the counters), cannot set it, or runs a vLLM that lacks the flag."""
    backend, knob = study.backend, catalogue.get(KNOB)
    if knob is None or (study.search.knobs and KNOB not in study.search.knobs):
        return None
    if study.engine.speculative_config is not None or not backend.owns_knobs:
        return None
    if KNOB in backend.unmodeled_knobs:
        return None
    version = vllm_version or backend.stated_vllm_version
    if version is not None and knob.vllm_versions and not knob.known_by(version):
        return None
    drafts = [c for c in knob.domain.choices_or_empty if isinstance(c, dict)]
    return max(drafts, key=_draft_tokens) if drafts else None


def _draft_tokens(setting: dict[str, JsonValue]) -> int:
    k = setting.get("num_speculative_tokens")
    return k if isinstance(k, int) else 0


def probe_rate(knee: SweepResult) -> float:
    """The knee search's lowest rate that met the SLO (its lowest, where none did): low
    enough to cost little, and a rate the starting configuration is known to hold."""
    passed = [p.rate_rps for p in knee.points if p.passed]
    return min(passed) if passed else min(p.rate_rps for p in knee.points)


def probe_acceptance(
    bench: Bench,
    trial_dir: Path,
    config: EngineConfig,
    setting: dict[str, JsonValue],
    rate_rps: float,
) -> AcceptanceProbe:
    """``config`` with ``setting`` at ``rate_rps`` once, its spec-decode counters read; a
    server that fails is the probe's answer (said in the server's words), not the run's."""
    k = _draft_tokens(setting)
    bench.progress.phase(
        "acceptance", f"the starting configuration with {k}-token n-gram drafts, one point"
    )
    probe = AcceptanceProbe(speculative_config=setting, rate_rps=rate_rps)
    try:
        result, spent = bench.measure(
            config.replace(speculative_config=setting),
            trial_dir,
            [rate_rps],
            "acceptance",
            stay=True,
        )
    except TrialFailedError as exc:
        probe = probe.model_copy(update={"failure": exc.cause, "device_s": exc.device_s})
        bench.progress.outcome(probe_words(probe))
        return probe
    readings = [p.point.signals.speculation for p in result.points if p.counted]
    reading = next((r for r in readings if r is not None), None)
    probe = probe.model_copy(update={"reading": reading, "device_s": spent})
    bench.progress.outcome(probe_words(probe))
    return probe
