"""Speculative decoding priced from the acceptance the server measured: vLLM's spec-decode
counters read per point (``SpecReading``), the tokens a draft yields (Leviathan et al. 2023's
expectation where acceptance is one rate), and each draft length priced at the knee's batch
against the step that verifies it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from kneepoint.config import load_study
from kneepoint.config.catalog import knob_catalogue
from kneepoint.physics.speculation import (
    Drafting,
    throughput_ratio,
    tokens_per_draft,
)
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.policies.pruning.sweep_findings import findings
from kneepoint.probes.telemetry.prom import parse_metrics
from kneepoint.probes.telemetry.signals import summarize_signals
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.diagnosis import Diagnosis, Observation, ServerResponse
from kneepoint.records.drafts import AcceptanceProbe
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knob_domains import ChoiceDomain
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Baseline, Event, Screened, Validated
from kneepoint.records.loadpoint import SpecReading
from kneepoint.records.proposal import Pruning
from kneepoint.records.study import SearchSpec, StudySpec
from kneepoint.records.sweep import SweepResult
from kneepoint.report.speculation import reading_words
from tests.support.readings import BANDWIDTH, H100, LLAMA_8B, point
from tests.support.tiny_llama import TINY_LLAMA

K3 = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def uniform_tokens_per_draft(acceptance: float, k: int) -> float:
    """Leviathan et al. 2023's expected tokens for acceptance rate ``acceptance`` and ``k``
    draft tokens: (1 - a^(k+1)) / (1 - a); k + 1 where every draft is accepted."""
    if acceptance >= 1.0:
        return float(k + 1)
    return float((1.0 - acceptance ** (k + 1)) / (1.0 - acceptance))


def test_a_draft_yields_one_plus_its_accepted_positions() -> None:
    a = 0.6
    assert tokens_per_draft([a, a**2, a**3], 3) == pytest.approx(uniform_tokens_per_draft(a, 3))
    # past the measured positions the last ratio carries on
    assert tokens_per_draft([0.6, 0.36], 4) == pytest.approx(1 + 0.6 + 0.36 + 0.216 + 0.1296)
    assert tokens_per_draft([0.6, 0.36, 0.2], 2) == pytest.approx(1.96)
    assert uniform_tokens_per_draft(1.0, 3) == 4.0 and tokens_per_draft([], 3) == 1.0


def test_a_small_batch_gains_what_a_full_one_pays_for() -> None:
    off, k3 = Drafting(0, 1.0, 1.0), Drafting(3, 1.0, tokens_per_draft([0.7, 0.5, 0.3], 3))
    assert (k3.gain, k3.verified) == (pytest.approx(2.5), 4.0)
    # decode-only steps streaming the weights whatever they carry (elasticity 0): all gained
    small = throughput_ratio(off, k3, batch=4, step_tokens=4, elasticity=0.0)
    assert small == pytest.approx(2.5)
    # a compute-bound batch (elasticity 1) verifies 4 tokens a sequence for 2.5 of output
    full = throughput_ratio(off, k3, batch=256, step_tokens=256, elasticity=1.0)
    assert full == pytest.approx(2.5 / 4) and full < 1.0
    # requests finished faster bring their prompts in faster: a step half prefill grows by it
    mixed = throughput_ratio(off, k3, batch=100, step_tokens=200, elasticity=1.0)
    assert mixed == pytest.approx(2.5 / ((100 * 2.5 + 100 * 4) / 200))
    # and back: from the drafting incumbent, off is the inverse
    back = throughput_ratio(k3, off, batch=100, step_tokens=100 * 2.5 + 100 * 4, elasticity=1.0)
    assert back == pytest.approx(1 / mixed)


def _metrics(drafts: float, tokens: float, accepted: float, by_pos: list[float], out: float) -> str:
    """/metrics as vLLM 0.32 writes its counters (TYPE lines name them with _total)."""
    counters = {
        "generation_tokens": out,
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": tokens,
        "spec_decode_num_accepted_tokens": accepted,
    }
    lines = []
    for name, value in counters.items():
        lines += [f"# TYPE vllm:{name}_total counter", f'vllm:{name}_total{{engine="0"}} {value}']
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    lines.append(f"# TYPE {per_pos} counter")
    lines += [f'{per_pos}{{engine="0",position="{i}"}} {n}' for i, n in enumerate(by_pos)]
    return "\n".join(lines) + "\n"


def test_the_counters_become_the_points_acceptance() -> None:
    before = parse_metrics(_metrics(100, 300, 120, [70, 35, 15], 1000), at_s=0.0)
    after = parse_metrics(_metrics(1100, 3300, 1320, [770, 385, 165], 4320), at_s=10.0)
    spec = summarize_signals([before, after], [], 1.0, 9.0).speculation
    assert spec is not None and spec.drafts == 1000 and spec.accepted_tokens == 1200
    assert spec.accepted_by_position == pytest.approx((0.7, 0.35, 0.15))
    assert spec.acceptance_length == pytest.approx(2.2) and spec.acceptance_rate == 0.4
    # 3,320 tokens out, 1,200 of them accepted drafts: 2,120 decoding steps, 1,000 drafted
    assert spec.draft_share == pytest.approx(1000 / 2120)
    plain = parse_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n")
    assert summarize_signals([plain, plain], [], 0.0, 1.0).speculation is None


def _priced(
    spec: SpecReading, running: float, tokens: float, elasticity: float, low: float = 1 / 3
) -> tuple[str, object, float]:
    """The rule's answer for an H100 incumbent drafting 3 n-gram tokens, ``running`` sequences
    in steps of ``tokens`` tokens, its step response read from ``low`` of them to 1.25x."""
    signals = {**BANDWIDTH, "running_mean": running, "tokens_per_step_mean": tokens,
               "speculation": spec}  # fmt: skip
    response = ServerResponse(low_rate_rps=5, high_rate_rps=10, low_tokens_per_step=tokens * low,
                              high_tokens_per_step=tokens * 1.25, low_step_ms=10,
                              high_step_ms=10 * (1.25 / low) ** elasticity,
                              elasticity=elasticity)  # fmt: skip
    observation = Observation(saturated=point(signals), gpu=H100, model=LLAMA_8B,
                              engine=EngineConfig(model=LLAMA_8B.name, speculative_config=K3),
                              response=response)  # fmt: skip
    diagnosis = Diagnosis(binding="bandwidth", confidence=0.9)
    pruning = prune(diagnosis, context_of(observation), knob_catalogue(), backend=VllmBackend())
    found = next((c for c in pruning.candidates if c.knob.name == "speculative_config"), None)
    if found is None:
        ruled = {r.knob: r.reason for r in pruning.ruled_out}
        return ruled["speculative_config"], None, 0.0
    return found.reason, found.target, found.predicted_ratio


def test_draft_lengths_are_priced_from_the_measured_acceptance() -> None:
    high = SpecReading(drafts=1000, draft_tokens=3000, accepted_tokens=2100,
                       generated_tokens=3100, accepted_by_position=(0.9, 0.7, 0.5))  # fmt: skip
    reason, target, ratio = _priced(high, running=4, tokens=20, elasticity=0.1)
    # well accepted, a small batch: a longer draft pays
    assert target == {**K3, "num_speculative_tokens": 5} and ratio > 1.05
    assert "drafts accepted by position 0.90, 0.70, 0.50" in reason and "5 draft tokens" in reason
    low = SpecReading(drafts=1000, draft_tokens=3000, accepted_tokens=150,
                      generated_tokens=1150, accepted_by_position=(0.12, 0.03, 0.0))  # fmt: skip
    reason, target, ratio = _priced(low, running=64, tokens=300, elasticity=0.9)
    # near-zero acceptance at a big batch: every verified token is paid for, turn it off (and
    # vLLM's async scheduling, off beside n-gram drafts, comes back)
    assert target is None and ratio > 1.5 and "speculation off" in reason
    assert "async scheduling back" in reason


def test_the_report_says_what_a_draft_yielded() -> None:
    spec = SpecReading(drafts=1000, draft_tokens=3000, accepted_tokens=1200,
                       generated_tokens=3320, accepted_by_position=(0.7, 0.35, 0.15))  # fmt: skip
    text = reading_words("final", point({**BANDWIDTH, "speculation": spec}))
    assert "accepted by position 0.70, 0.35, 0.15; 2.20 tokens a draft; 47% of decoding" in text


def test_an_ngram_incumbent_is_resolved_as_its_plain_engine_and_a_drafter_is_not() -> None:
    def context(spec: dict[str, object]) -> object:
        engine = EngineConfig(model=LLAMA_8B.name, speculative_config=spec)
        return context_of(Observation(saturated=point(BANDWIDTH), gpu=H100, model=LLAMA_8B,
                                      engine=engine)).engine  # fmt: skip

    assert context(K3) is not None  # n-gram lookup: no weights, no KV of its own
    assert context({"method": "eagle", "model": "some/drafter"}) is None


def test_a_real_cpu_builds_spec_decode_counters_are_read() -> None:
    """/metrics of vLLM 0.32's CPU build drafting 3 n-gram tokens for the tiny Llama at 19.3
    req/s, greedy (tests/fixtures/metrics, captured by benchmarks/speculation_cpu.py)."""
    text = Path(__file__).parent / "fixtures" / "metrics" / "vllm-0.32.0-cpu-ngram.prom"
    zero = parse_metrics("", at_s=0.0)
    after = parse_metrics(text.read_text(), at_s=10.0)
    assert zero.value("spec_drafts") is None and after.value("spec_drafts") == 7375
    positions = after.by_label("spec_accepted_by_position", "position")
    assert sorted(positions) == ["0", "1", "2"] and positions["0"] >= positions["2"] > 0


REAL = Path(__file__).parent / "fixtures" / "real" / "cpu-tiny-ngram"


def _real(tmp_path: Path, run: str) -> tuple[StudySpec, SweepResult]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    study = load_study(REAL / run / "study.yaml",
                       [f"model={config}", f"engine.model={tmp_path}"])  # fmt: skip
    return study, SweepResult.model_validate_json((REAL / run / "sweep.json").read_text())


def _only(choice: object) -> KnobCatalogue:
    """The catalogue with speculation's choices narrowed to off and ``choice``."""
    catalogue = knob_catalogue()
    knob = catalogue.get("speculative_config")
    assert knob is not None
    narrowed = knob.model_copy(update={"domain": ChoiceDomain(choices=(None, choice))})
    knobs = tuple(narrowed if k.name == knob.name else k for k in catalogue.knobs)
    return catalogue.model_copy(update={"knobs": knobs})


def _spec_reason(pruning: Pruning) -> tuple[str, float | None]:
    found = next((c for c in pruning.candidates if c.knob.name == "speculative_config"), None)
    if found is not None:
        return found.reason, found.predicted_ratio
    return next(r.reason for r in pruning.ruled_out if r.knob == "speculative_config"), None


def test_the_real_greedy_run_prices_off_near_what_it_measured(tmp_path: Path) -> None:
    """vLLM 0.32's CPU build drafting greedy n-grams (tests/fixtures/real/cpu-tiny-ngram):
    3.97 tokens a draft at the knee, and off runs steps far outside the knee's response
    (~247 tokens where it spanned 798-883): the roofline prices them, scaled to the step the
    server ran; off measured 0.62x (33.90 against 54.54 req/s), where the response's power
    law said 0.81x and with async scheduling back 0.51x."""
    study, result = _real(tmp_path, "greedy-on")
    context = context_of(observe_study(study, study.engine, result))
    spec = context.observation.saturated.signals.speculation
    assert spec is not None and spec.acceptance_length == pytest.approx(3.96, abs=0.02)
    pruning = prune(diagnose(context), context, _only(K3), backend=study.backend)
    reason, _ = _spec_reason(pruning)
    assert "steps of ~247 tokens priced by the roofline" in reason
    priced = float(reason.split("speculation off priced ")[1].split("x")[0])
    assert 0.62 / 1.25 < priced < min(1.0, 0.62 * 1.25)


@pytest.mark.parametrize(
    ("run", "measured"), [("greedy", 54.54 / 33.90), ("sampled", 25.83 / 34.10)]
)
def test_the_acceptance_probe_prices_turning_drafts_on_as_the_real_server_measured(
    tmp_path: Path, run: str, measured: float
) -> None:
    """The real CPU build's off sweep as the incumbent, and its drafting sweep's lowest
    rate as the acceptance probe (what ``kneepoint.tune.acceptance_step`` reads): greedy
    drafts (3.97 tokens a draft) priced above 1 and within 1.25x of the 1.61x measured;
    sampled ones (nothing accepted) below 1, within 1.25x of the 0.76x measured."""
    study, off = _real(tmp_path, f"{run}-off")
    _, on = _real(tmp_path, f"{run}-on")
    # its lowest rate with a reading (the recording's reader kept none where no draft was)
    read = [p for p in on.points if p.counted and p.point.signals.speculation is not None]
    low = min(read, key=lambda p: p.rate_rps)
    probe = AcceptanceProbe(speculative_config=K3, rate_rps=low.rate_rps,
                            reading=low.point.signals.speculation)  # fmt: skip
    study = study.model_copy(update={"search": SearchSpec(knobs=("speculative_config",))})
    _, pruning = findings(study, off.config, off, _only(K3), "0.32.0", acceptance=probe)
    reason, ratio = _spec_reason(pruning)
    assert f"the acceptance probe (3-token n-gram drafts at {low.rate_rps:.3g} req/s)" in reason
    if measured > 1.0:
        assert ratio is not None and measured / 1.25 < ratio < measured * 1.25
    else:
        priced = float(reason.split("priced ")[1].split("x")[0])
        assert measured / 1.25 < priced < 1.0


PROBED = Path(__file__).parent / "fixtures" / "real" / "cpu-tiny-ngram-probe"
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def _recorded_tune(tmp_path: Path, run: str) -> tuple[StudySpec, list[Event]]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    study = load_study(PROBED / run / "study.yaml",
                       [f"model={config}", f"engine.model={tmp_path}"])  # fmt: skip
    with gzip.open(PROBED / run / "ledger.jsonl.gz", "rt") as lines:
        return study, [EVENTS.validate_json(line) for line in lines]


def test_a_real_tune_through_the_probe_priced_its_first_move_near_what_it_validated(
    tmp_path: Path,
) -> None:
    """`benchmarks/speculation_cpu.py --probe` on vLLM 0.32's CPU build (AVX-512 host,
    2026-12-01): greedy, the probe read 5.81 tokens a 5-token draft and the rule priced it
    1.44x; the validation measured 1.69x. The baseline is diagnosed again from the ledger's
    own knee search and probe, and prices the same."""
    study, events = _recorded_tune(tmp_path, "greedy")
    baseline = next(e for e in events if isinstance(e, Baseline))
    assert baseline.acceptance is not None and baseline.acceptance.reading is not None
    _, pruning = findings(study, baseline.config, baseline.knee, knob_catalogue(), "0.32.0",
                          acceptance=baseline.acceptance)  # fmt: skip
    first = pruning.candidates[0]
    assert first.knob.name == "speculative_config" and first.target == {
        **K3,
        "num_speculative_tokens": 5,
    }
    validated = next(e for e in events if isinstance(e, Validated))
    assert validated.promote and validated.challenger and validated.incumbent
    measured = (validated.challenger.capacity_rps or 0) / (validated.incumbent.capacity_rps or 1)
    assert first.predicted_ratio == pytest.approx(1.436, abs=0.01)
    assert 1.6 < measured < 1.8 and measured / 1.25 < first.predicted_ratio < measured


def test_a_real_tune_through_the_probe_left_drafts_nothing_accepted_out(tmp_path: Path) -> None:
    """Sampled at 1.0, the probe read nothing accepted: the rule priced 3 draft tokens at
    0.85x and ruled them out; the tune's one trial, a long shot, screened them at 0.90x."""
    study, events = _recorded_tune(tmp_path, "sampled")
    baseline = next(e for e in events if isinstance(e, Baseline))
    _, pruning = findings(study, baseline.config, baseline.knee, knob_catalogue(), "0.32.0",
                          acceptance=baseline.acceptance)  # fmt: skip
    reason, ratio = _spec_reason(pruning)
    assert ratio is None and "0.00, 0.00, 0.00, 0.00, 0.00" in reason
    assert "3 draft tokens priced 0.85x" in reason
    screened = next(e for e in events if isinstance(e, Screened))
    measured = (screened.outcome.objective or 0.0) / (baseline.repeats.capacity_rps or 1.0)
    assert 0.85 / 1.25 < measured < 1.0
