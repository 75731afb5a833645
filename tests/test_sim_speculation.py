"""n-gram speculative decoding in the simulator: drafts drawn from each traffic class's
acceptance, verified in the step's token budget, their accepted tokens streamed as one chunk,
vLLM's spec-decode counters as a real server exports them, and async scheduling off as vLLM
turns it off for n-gram drafts."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from kneepoint.config import gpu_catalogue, model_catalogue
from kneepoint.physics.defaults import UnmodeledSettingError, resolve_engine
from kneepoint.records.drafts import DraftAcceptance
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from kneepoint.sim.engine import Arrival, SimEngine, SimRun
from kneepoint.sim.signals import virtual_signals
from kneepoint.sim.virtual import chunk_times

H100 = gpu_catalogue()["h100-sxm"]
LLAMA_8B = model_catalogue()["llama-3.1-8b"]
K5 = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
ENGINE_ONLY = Efficiency(frontend_latency_s=0.0)


def _arrivals(rate: float, count: int, prompt: int, output: int) -> list[Arrival]:
    rng = random.Random(0)
    at, out = 0.0, []
    for _ in range(count):
        at += rng.expovariate(rate)
        own = tuple(rng.randrange(10_000, 1_000_000) for _ in range(prompt))
        out.append(Arrival(at, own, output, "edit"))
    return out


def _run(
    acceptance: DraftAcceptance | None, arrivals: list[Arrival], **knobs: object
) -> tuple[SimEngine, SimRun]:
    config = EngineConfig(model="m", speculative_config=K5, **knobs)  # type: ignore[arg-type]
    accepted = {"edit": acceptance} if acceptance is not None else {}
    engine = SimEngine(H100, LLAMA_8B, config, ENGINE_ONLY, acceptance=accepted)
    return engine, engine.run(arrivals)


def test_every_draft_accepted_yields_its_tokens_and_the_answers_keep_their_length() -> None:
    sure = DraftAcceptance(drafted_share=1.0, accepted_by_position=(1.0,))
    engine, run = _run(sure, _arrivals(2, 40, 200, 61))
    assert len(run.finished) == 40
    for req in run.finished:
        assert req.num_output == 61 == len(req.token_times_s)
        # the first token from the prefill, then 6 a step (a 5-token draft and the target's)
        assert len(set(req.token_times_s)) == 1 + 10
    spec = virtual_signals(engine, run.steps, 0.0, run.steps[-1].start_s + 1.0).speculation
    assert spec is not None and spec.accepted_by_position == (1.0,) * 5
    # each answer's first token came from its prefill, not a decoding step: vLLM's counters
    # count it among the generated tokens all the same, so 10 drafts of 11 sampling steps
    assert spec.acceptance_length == pytest.approx(6.0)
    assert spec.draft_share == pytest.approx(10 / 11)


def test_drafts_are_drawn_from_the_class_acceptance_by_position() -> None:
    # vllm-project/vllm PR #24344: Llama-3.1-8B rewriting code, 5-token n-gram drafts
    edits = DraftAcceptance(drafted_share=0.55, accepted_by_position=(0.81, 0.74, 0.70, 0.68, 0.66))
    engine, run = _run(edits, _arrivals(4, 150, 300, 200))
    spec = virtual_signals(engine, run.steps, 0.0, run.steps[-1].start_s + 1.0).speculation
    assert spec is not None and spec.drafts > 5000
    for measured, declared in zip(
        spec.accepted_by_position, edits.accepted_by_position, strict=True
    ):
        assert measured == pytest.approx(declared, abs=0.03)
    assert spec.draft_share == pytest.approx(0.55, abs=0.03)
    again = _run(edits, _arrivals(4, 150, 300, 200))[1]
    assert [s.accepted for s in again.steps] == [s.accepted for s in run.steps]  # seeded


def test_traffic_without_drafts_pays_for_the_lookups_and_the_lost_overlap() -> None:
    arrivals = _arrivals(4, 60, 300, 120)
    engine, drafting = _run(None, arrivals)
    plain = SimEngine(H100, LLAMA_8B, EngineConfig(model="m"), ENGINE_ONLY).run(arrivals)
    spec = virtual_signals(engine, drafting.steps, 0.0, drafting.steps[-1].start_s).speculation
    assert spec is not None and spec.drafts == 0 and spec.draft_share == 0.0
    # vLLM turns async scheduling off beside n-gram drafts: each step waits on its CPU work
    assert not engine.resolved.async_scheduling
    assert drafting.steps[-1].start_s > plain.steps[-1].start_s


def test_speculation_cuts_the_time_per_output_token_of_a_small_batch() -> None:
    likely = DraftAcceptance(drafted_share=0.9, accepted_by_position=(0.9, 0.8, 0.7))
    arrivals = _arrivals(1, 30, 500, 300)

    def tpot_ms(run: SimRun) -> float:
        done = [(r.token_times_s[-1] - r.token_times_s[0]) / 299 for r in run.finished]
        return sorted(done)[len(done) // 2] * 1e3

    plain = SimEngine(H100, LLAMA_8B, EngineConfig(model="m"), ENGINE_ONLY).run(arrivals)
    assert tpot_ms(_run(likely, arrivals)[1]) < tpot_ms(plain) / 2


def test_a_step_verifies_drafts_within_its_token_budget() -> None:
    sure = DraftAcceptance(drafted_share=1.0, accepted_by_position=(1.0,))
    _, run = _run(sure, _arrivals(50, 200, 64, 64), max_num_batched_tokens=256)
    assert max(s.num_tokens for s in run.steps) <= 256
    assert all(sum(s.draft_tokens) + s.num_samples <= s.num_tokens for s in run.steps)


def test_a_step_streams_its_accepted_tokens_as_one_chunk() -> None:
    times = [1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 4.0]
    assert chunk_times(times, 1, drafted=True) == [1.0, 2.0, 3.0, 4.0]
    # 3 tokens a chunk: after the first, a chunk waits for 3 unsent, the rest flushed at the end
    assert chunk_times(times, 3, drafted=True) == [1.0, 2.0, 4.0]
    distinct = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    for interval in (1, 2, 5):
        assert chunk_times(distinct, interval, drafted=True) == chunk_times(distinct, interval)


def test_only_ngram_drafts_are_modelled_and_they_turn_async_scheduling_off() -> None:
    resolved = resolve_engine(EngineConfig(model="m", speculative_config=K5), H100, LLAMA_8B)
    assert resolved.speculative_tokens == 5 and not resolved.async_scheduling
    eagle = EngineConfig(model="m", speculative_config={"method": "eagle", "model": "d"})
    with pytest.raises(UnmodeledSettingError, match="'eagle' is not modeled"):
        resolve_engine(eagle, H100, LLAMA_8B)


def test_acceptance_shares_cannot_rise_with_the_position() -> None:
    with pytest.raises(ValidationError, match="must not rise"):
        DraftAcceptance(drafted_share=0.5, accepted_by_position=(0.5, 0.7))
