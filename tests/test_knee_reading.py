"""The diagnosis reads the knee, not the rush: its points are the first rate that failed the
SLO and the highest that met it, and a full sequence cap binds only where the server's own
points say a bigger batch buys throughput.

Source figures (tests/fixtures/real, vLLM 0.26.0 on an H100, Llama-3.1-8B shapes, chat): the
base config's diagnosis used to read 44 req/s and say "scheduling (admission cap), 74%",
predicting 1.35x for a higher max_num_seqs; raising it to 1024 (with 8192 batched tokens)
measured +1.3%, fp8 weights +10.2%.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.calibration.recorded import RecordedSweep, find_recorded
from kneepoint.config import knob_catalogue
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import knee_points, measured_response, observe
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.backend_spec import SimBackend, VllmBackend
from kneepoint.records.diagnosis import Diagnosis, Observation, ServerResponse
from kneepoint.records.engine import EngineConfig
from kneepoint.records.sweep import SweepPoint
from tests.support.readings import CAPPED, H100, LLAMA_1B, point

REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.fixture(scope="module")
def recordings() -> dict[str, RecordedSweep]:
    return {r.name: r for r in find_recorded([REAL])}


def real_observation(recorded: RecordedSweep) -> Observation:
    study = recorded.study
    return observe(recorded.result, gpu=study.gpu, model=study.model,
                   engine=recorded.result.config, workload=study.workload)  # fmt: skip


def test_the_points_read_are_the_last_passing_and_first_failing_rates(
    recordings: dict[str, RecordedSweep],
) -> None:
    failing, passing = knee_points(recordings["base"].result)
    assert failing is not None and passing is not None
    assert (passing.rate_rps, failing.rate_rps) == (40.0, 44.0)  # not 32, not 64


@pytest.mark.parametrize(("name", "low", "high"), [("base", 40, 44), ("defaults", 40, 44),
                                                   ("fp8", 44, 48)])  # fmt: skip
def test_the_real_h100_steps_grow_as_fast_as_their_batch_at_the_knee(
    recordings: dict[str, RecordedSweep], name: str, low: float, high: float
) -> None:
    response = real_observation(recordings[name]).response
    assert response is not None
    assert (response.low_rate_rps, response.high_rate_rps) == (low, high)
    assert 0.95 <= response.elasticity <= 1.3  # 1.23, 1.01, 1.06
    assert response.batch_gain(2.0) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["base", "defaults", "fp8"])
def test_the_real_h100_recordings_are_compute_bound(
    recordings: dict[str, RecordedSweep], name: str
) -> None:
    diagnosis = diagnose(context_of(real_observation(recordings[name])))
    assert diagnosis.binding == "compute"
    assert diagnosis.scheduling_kind != "admission_cap" or diagnosis.runner_up != "scheduling"


def test_raising_max_num_seqs_on_the_real_base_is_predicted_at_no_gain(
    recordings: dict[str, RecordedSweep],
) -> None:
    observation = real_observation(recordings["base"])
    diagnosis = diagnose(context_of(observation))
    # Were scheduling to bind, the cap rule prices the move from the server's response.
    as_scheduling = diagnosis.model_copy(update={"binding": "scheduling", "runner_up": None})
    pruning = prune(as_scheduling, context_of(observation), knob_catalogue(), backend=VllmBackend())
    seqs = [c for c in pruning.candidates if c.knob.name == "max_num_seqs"]
    assert all(c.predicted_ratio <= 1.05 for c in seqs)  # real: +1.3% for 4x the cap
    if not seqs:
        reason = next(r.reason for r in pruning.ruled_out if r.knob == "max_num_seqs")
        assert "predicted at 1.00x" in reason
    ruled = prune(diagnosis, context_of(observation), knob_catalogue(), backend=VllmBackend())
    reason = next(r.reason for r in ruled.ruled_out if r.knob == "max_num_seqs")
    assert "compute binds" in reason and "predicted at 1.00x" in reason


def _sweep_point(rate: float, margin: float, **signals: float) -> SweepPoint:
    measured = point({**CAPPED, **signals}, violations=() if margin <= 1 else ("c x",))
    return SweepPoint(rate_rps=rate, repeat=0, arm="a", margin=margin,
                      point=measured.model_copy(update={"rate_rps": rate}))  # fmt: skip


def test_a_cap_binds_where_a_bigger_batch_costs_little_more() -> None:
    # A 1B model pinned at 32 sequences: 31 -> 62 tokens per step took 2.5 -> 2.7 ms.
    low = _sweep_point(40.0, 0.6, tokens_per_step_mean=31.0, steps_per_s=400.0)
    high = _sweep_point(60.0, 1.4)
    response = measured_response([low, high], high.point)
    assert response is not None and response.elasticity < 0.2
    engine = EngineConfig(model=LLAMA_1B.name, max_num_seqs=32)
    observation = Observation(saturated=high.point, below=low.point, response=response,
                              gpu=H100, model=LLAMA_1B, engine=engine)  # fmt: skip
    diagnosis = diagnose(context_of(observation))
    assert (diagnosis.binding, diagnosis.scheduling_kind) == ("scheduling", "admission_cap")
    pruning = prune(diagnosis, context_of(observation), knob_catalogue(), backend=SimBackend())
    seqs = next(c for c in pruning.candidates if c.knob.name == "max_num_seqs")
    assert seqs.direction == "up" and seqs.predicted_ratio > 1.5


def test_no_response_is_read_from_steps_that_did_not_grow_or_were_not_measured() -> None:
    high = _sweep_point(60.0, 1.4)
    same = _sweep_point(50.0, 0.8)  # the same tokens per step: no slope to read
    assert measured_response([same, high], high.point) is None
    bare = _sweep_point(40.0, 0.6, tokens_per_step_mean=31.0, steps_per_s=400.0)
    unmetered = high.point.model_copy(
        update={"signals": high.point.signals.model_copy(update={"steps_per_s": None})}
    )
    assert measured_response([bare], unmetered) is None
    # Where the nearest lower point is too close, the next one down is read.
    far = _sweep_point(30.0, 0.5, tokens_per_step_mean=31.0, steps_per_s=400.0)
    response = measured_response([far, same, high], high.point)
    assert response is not None and response.low_rate_rps == 30.0


def test_a_response_reads_as_a_sentence() -> None:
    response = ServerResponse(low_rate_rps=40, high_rate_rps=44, low_tokens_per_step=419,
                              high_tokens_per_step=556, low_step_ms=18.8, high_step_ms=26.6,
                              elasticity=1.23)  # fmt: skip
    assert response.reading() == ("419 -> 556 tokens per step took 18.8 -> 26.6 ms (40 -> 44 "
                                  "req/s): step time grows as tokens^1.23")  # fmt: skip
    assert response.batch_gain(2.0) == 1.0
    assert response.model_copy(update={"elasticity": 0.0}).batch_gain(2.0) == 2.0


def test_fp8_weights_on_the_real_base_are_priced_near_what_they_measured(
    recordings: dict[str, RecordedSweep],
) -> None:
    observation = real_observation(recordings["base"])
    pruning = prune(
        diagnose(context_of(observation)),
        context_of(observation),
        knob_catalogue(),
        backend=VllmBackend(),
    )
    fp8 = next(c for c in pruning.candidates if c.knob.name == "quantization")
    # Real: 40.31 -> 44.43 req/s, 1.102x. The server is throughput-bound there (elasticity
    # 1.23), so the knee moves with the roofline's step speed-up; that counts the engine
    # core's CPU work per running sequence, which fp8 does not shorten (it read 1.056x).
    # Held to the fidelity goal for an uncalibrated knob effect: within 5 points.
    assert fp8.predicted_ratio == pytest.approx(1.102, abs=0.05)


def test_a_full_token_budget_binds_only_where_bigger_steps_buy_throughput() -> None:
    full = _sweep_point(60.0, 1.4, tokens_per_step_mean=2000.0, steps_per_s=20.0)
    engine = EngineConfig(model=LLAMA_1B.name, max_num_batched_tokens=2048)

    def budget_move(elasticity: float) -> str:
        slower = 25 * 2**elasticity
        response = ServerResponse(low_rate_rps=40, high_rate_rps=60, low_tokens_per_step=1000,
                                  high_tokens_per_step=2000, low_step_ms=25,
                                  high_step_ms=slower, elasticity=elasticity)  # fmt: skip
        observation = Observation(saturated=full.point, response=response, gpu=H100,
                                  model=LLAMA_1B, engine=engine)  # fmt: skip
        diagnosis = Diagnosis(binding="scheduling", confidence=0.9, scheduling_kind="cpu_overhead")
        pruning = prune(diagnosis, context_of(observation), knob_catalogue(), backend=SimBackend())
        found = [c for c in pruning.candidates if c.knob.name == "max_num_batched_tokens"]
        if found:
            return f"{found[0].direction} {found[0].predicted_ratio:.2f}"
        return next(r.reason for r in pruning.ruled_out if r.knob == "max_num_batched_tokens")

    assert budget_move(1.1).startswith("doubling it is predicted at 1.00x")
    assert budget_move(0.3) == "up 1.34"  # 2^0.7 = 1.62 tokens/s, damped


def test_one_context_serves_the_diagnosis_and_the_pruning_alike(
    recordings: dict[str, RecordedSweep],
) -> None:
    """The configuration is resolved once (its defaults, its memory plan) and both read it:
    what they conclude depends on the observation alone."""
    observation = real_observation(recordings["base"])
    context = context_of(observation)
    assert context.engine is not None and context.memory is not None
    assert context.observation is observation
    diagnosis = diagnose(context)
    again = context_of(observation)
    assert diagnosis == diagnose(again)
    shared = prune(diagnosis, context, knob_catalogue(), backend=VllmBackend())
    assert shared == prune(diagnosis, again, knob_catalogue(), backend=VllmBackend())
