"""Scheduler and KV-cache invariants, by property tests over random engines and traffic."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.sim.kv_cache import KvCache
from kneepoint.sim.request import SimRequest
from kneepoint.sim.scheduler import Scheduler


def _engine(max_num_seqs: int, budget: int, threshold: int, block_size: int) -> ResolvedEngine:
    return ResolvedEngine(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        gpu_memory_utilization=0.9,
        kv_cache_memory_bytes=None,
        max_model_len=1 << 20,
        kv_dtype_bytes=2.0,
        linear_weight_bytes=2.0,
        fp8_compute=False,
        enable_prefix_caching=True,
        block_size=block_size,
        async_scheduling=False,
        enforce_eager=False,
        tensor_parallel_size=1,
        long_prefill_token_threshold=threshold,
        stream_interval=1,
    )


@dataclass
class Case:
    engine: ResolvedEngine
    kv: KvCache
    requests: list[tuple[int, SimRequest]]  # (arrival step, request)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    num_blocks = draw(st.integers(4, 48))
    max_num_seqs = draw(st.integers(1, 8))
    budget = draw(st.integers(max_num_seqs, 64))
    threshold = draw(st.sampled_from([0, 0, 3, 8]))
    prefixes = [tuple(range(100 * g, 100 * g + draw(st.integers(0, 24)))) for g in range(3)]
    capacity = num_blocks * block_size
    requests = []
    for rid in range(draw(st.integers(1, 12))):
        prefix = prefixes[draw(st.integers(0, 2))]
        own = tuple(10_000 + rid * 100 + i for i in range(draw(st.integers(1, 16))))
        prompt = (prefix + own)[: capacity - 1]
        max_tokens = draw(st.integers(1, max(1, min(10, capacity - len(prompt)))))
        arrival = draw(st.integers(0, 12))
        requests.append((arrival, SimRequest(rid, prompt, max_tokens, float(arrival))))
    engine = _engine(max_num_seqs, budget, threshold, block_size)
    return Case(engine, KvCache(num_blocks, block_size, prefix_caching=True), requests)


def _check_kv_accounting(scheduler: Scheduler) -> None:
    kv = scheduler.kv
    held = Counter(b for req in scheduler.running for b in req.blocks)
    assert kv.num_used == len(held) <= kv.num_blocks
    for block, count in held.items():
        assert kv.ref_count(block) == count
    for req in scheduler.waiting:
        assert req.blocks == []


@settings(max_examples=300, deadline=None)
@given(cases())
def test_scheduler_invariants_hold_every_step(case: Case) -> None:
    scheduler = Scheduler(case.engine, case.kv)
    pending = sorted(case.requests, key=lambda item: item[0])
    outputs: dict[int, int] = {}
    finished: list[SimRequest] = []
    for step in range(5_000):
        while pending and pending[0][0] <= step:
            scheduler.add(pending.pop(0)[1])
        plan = scheduler.schedule()
        assert plan.num_tokens <= case.engine.max_num_batched_tokens
        assert len(scheduler.running) <= case.engine.max_num_seqs
        if plan.preempted:
            assert plan.admitted == [], "nothing is admitted in a step that preempted"
        for req, new in plan.scheduled:
            assert new >= 1
            assert len(req.blocks) * case.kv.block_size >= req.num_computed + new
        for req in plan.admitted:
            assert req.prefix_hit_tokens % case.kv.block_size == 0, "hits are whole blocks"
            assert req.prefix_hit_tokens < req.num_tokens
        _check_kv_accounting(scheduler)
        finished += scheduler.finish_step(plan, float(step))[1]
        for req in scheduler.running + list(scheduler.waiting):
            assert len(req.output) >= outputs.get(req.rid, 0), "preemption keeps the output"
            outputs[req.rid] = len(req.output)
        if not pending and not scheduler.running and not scheduler.waiting:
            break
    assert len(finished) == len(case.requests), "every request finishes"
    for req in finished:
        first_id = SimRequest(req.rid, req.prompt, 0, 0.0).output_id_base
        assert list(req.output) == [first_id + i for i in range(req.max_tokens)]
    assert case.kv.num_used == 0


def _trace(case: Case, *, eager: bool) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every step's shape and outcome, and every request's final state."""
    scheduler = Scheduler(case.engine, case.kv, eager=eager)
    pending = sorted(case.requests, key=lambda item: item[0])
    steps: list[tuple[object, ...]] = []
    for step in range(5_000):
        while pending and pending[0][0] <= step:
            scheduler.add(pending.pop(0)[1])
        plan = scheduler.schedule()
        shape = plan.shape()
        finished = scheduler.finish_step(plan, float(step))[1]
        steps.append(
            (
                shape,
                plan.admission_stop,
                [r.rid for r in plan.preempted],
                [r.rid for r in finished],
                [r.rid for r in plan.admitted],
                case.kv.num_used,
            )
        )
        if not pending and not scheduler.running and not scheduler.waiting:
            break
    scheduler.sync()
    requests = [
        (r.rid, r.output, r.token_times_s, r.preemptions, r.prefix_hit_tokens, r.blocks)
        for _, r in case.requests
    ]
    return steps, [*requests, (case.kv.query_tokens, case.kv.hit_tokens)]


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_decode_cohort_changes_nothing_but_speed(case: Case) -> None:
    assert _trace(copy.deepcopy(case), eager=False) == _trace(case, eager=True)


def test_preempted_request_resumes_with_its_output() -> None:
    kv = KvCache(num_blocks=6, block_size=2, prefix_caching=False)
    scheduler = Scheduler(_engine(max_num_seqs=2, budget=16, threshold=0, block_size=2), kv)
    first, second = SimRequest(0, (1, 2, 3), 6, 0.0), SimRequest(1, (4, 5, 6), 6, 0.0)
    scheduler.add(first)
    scheduler.add(second)
    preempted_with: list[int] = []
    for step in range(100):
        plan = scheduler.schedule()
        preempted_with += [len(r.output) for r in plan.preempted]
        scheduler.finish_step(plan, float(step))
        if first.finished and second.finished:
            break
    assert preempted_with and max(preempted_with) > 0, "a request was preempted mid-decode"
    assert second.preemptions >= 1
    assert len(second.output) == 6 and len(second.token_times_s) == 6


def test_prefix_cache_hits_whole_blocks_of_the_shared_prefix() -> None:
    kv = KvCache(num_blocks=64, block_size=4, prefix_caching=True)
    scheduler = Scheduler(_engine(max_num_seqs=4, budget=64, threshold=0, block_size=4), kv)
    shared = tuple(range(10))  # 2 full blocks + 2 tokens
    first = SimRequest(0, (*shared, 50, 51), 1, 0.0)
    scheduler.add(first)
    scheduler.finish_step(scheduler.schedule(), 0.0)
    assert first.finished
    second = SimRequest(1, (*shared, 60, 61, 62), 1, 1.0)
    scheduler.add(second)
    plan = scheduler.schedule()
    assert second.prefix_hit_tokens == 8
    assert plan.scheduled == [(second, 5)]
    assert (kv.query_tokens, kv.hit_tokens) == (12 + 13, 8)


def test_cached_blocks_are_reused_least_recently_freed_first() -> None:
    kv = KvCache(num_blocks=4, block_size=1, prefix_caching=True)
    req = SimRequest(0, (1, 2, 3), 1, 0.0)
    assert kv.allocate(req, 3)
    req.num_computed = 3
    kv.cache_full_blocks(req)
    kv.free(req)
    again = SimRequest(1, (1, 2, 3), 1, 0.0)
    assert len(kv.cached_prefix(again)) == 2  # one token is always left to compute
    other = SimRequest(2, (9,), 1, 0.0)
    assert kv.allocate(other, 2)  # takes the never-used block, then the request's tail block
    assert len(kv.cached_prefix(again)) == 2
    assert kv.allocate(SimRequest(3, (8,), 1, 0.0), 1)  # evicts the next tail-most block
    assert len(kv.cached_prefix(again)) == 1
