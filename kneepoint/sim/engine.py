"""The simulated engine on a virtual clock: arrivals in, steps run, tokens out.

It starts (or refuses to start) the way vLLM would for the configuration, then advances time
step by step: each step's length comes from the roofline of what the scheduler put in it.
Deterministic: the same arrivals and configuration give the same run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kneepoint.physics import (
    BatchShape,
    Efficiency,
    MemoryPlan,
    ResolvedEngine,
    Roofline,
    StartupRefusal,
    StepCost,
    plan_memory,
    resolve_engine,
)
from kneepoint.records import DraftAcceptance, EngineConfig, GpuSpec, KneepointError, ModelSpec
from kneepoint.sim.attribution import Attribution, attribute
from kneepoint.sim.client import Arrival, Client, RequestRejectedError, Scheduled
from kneepoint.sim.engine_loop import EngineLoop
from kneepoint.sim.frontend import FrontEnd
from kneepoint.sim.host_tier import HostTier
from kneepoint.sim.kv_cache import KvCache
from kneepoint.sim.request import SimRequest
from kneepoint.sim.scheduler import Scheduler
from kneepoint.sim.step_plan import AdmissionStop

__all__ = [
    "Arrival",
    "EngineRefusedError",
    "RequestRejectedError",
    "SimEngine",
    "SimRun",
    "StepOutcome",
    "StepRecord",
]


class EngineRefusedError(KneepointError, RuntimeError):
    """The configuration does not start; ``refusal`` carries vLLM's wording."""

    def __init__(self, refusal: StartupRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class StepRecord(NamedTuple):
    """One engine step: when, how long, what it ran, the state after (its ground truth is
    ``truth``)."""

    start_s: float
    cost: StepCost
    shape: BatchShape
    num_requests: int
    num_tokens: int
    num_samples: int
    running: int
    waiting: int
    kv_usage: float
    preempted: int
    prompt_tokens: int
    """Whole prompts, cached tokens included, of the requests that got their first token:
    what vLLM's ``prompt_tokens`` counter adds for the step (not the tokens it computed)."""
    admission_stop: AdmissionStop
    prefix_queries: int = 0
    prefix_hits: int = 0
    """What vLLM's prefix-cache counters add for the step: the tokens of the requests it
    admitted, and those it found cached."""
    draft_tokens: tuple[int, ...] = ()
    """Per draft the step verified (n-gram speculative decoding), its draft tokens."""
    accepted: tuple[int, ...] = ()
    """Per draft, in the same order, its tokens the target accepted."""
    external_queries: int = 0
    external_hits: int = 0
    """What vLLM's external (connector) prefix-cache counters add for the step: tokens looked
    up in host memory past the device's hit, and those found there (KV offloading)."""
    engine: int = 0
    """Which data-parallel replica ran it (``kneepoint.sim.replicas``)."""
    frontend_held: bool = False
    """Its output waited longer than the step itself behind output the API server was still
    streaming (``FrontEnd.stream``)."""

    @property
    def generated_tokens(self) -> int:
        """Output tokens the step made: one per sampling request, and each draft's accepted."""
        return self.num_samples + sum(self.accepted)

    @property
    def truth(self) -> Attribution:
        """Ground truth: the step's wall time charged to the constraints (worked out when
        asked: a live server never asks, a load point only for its window)."""
        return attribute(self.cost, self.admission_stop, self.kv_usage, self.frontend_held)


class StepOutcome(NamedTuple):
    """A step's record, the requests it gave a token to, finished and admitted."""

    record: StepRecord
    sampled: list[SimRequest]
    finished: list[SimRequest]
    admitted: list[SimRequest]


@dataclass
class SimRun:
    """What a run produced: finished requests and every step."""

    finished: list[SimRequest] = field(default_factory=list)
    submitted: list[tuple[Arrival, SimRequest]] = field(default_factory=list)
    rejected: list[tuple[Arrival, str]] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)

    def truth(self, start_s: float = 0.0, end_s: float = float("inf")) -> Attribution:
        """Ground-truth attribution summed over the steps that start in [start_s, end_s)."""
        total = Attribution()
        for step in self.steps:
            if start_s <= step.start_s < end_s:
                total = total + step.truth
        return total


class SimEngine:
    """One simulated server with one configuration."""

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        config: EngineConfig,
        efficiency: Efficiency | None = None,
        *,
        eager: bool = False,
        acceptance: Mapping[str, DraftAcceptance] | None = None,
    ) -> None:
        """``eager``: step every request one by one, so that each step's ``sampled`` requests
        are current (a live server streams them); otherwise steady decodes are stepped in
        bulk, with the same results, and caught up when read (``run`` returns them current).
        ``acceptance``: per traffic class, how n-gram drafts fare on its answers, where the
        configuration speculates (``acceptance_of`` a workload).
        """
        self.gpu, self.model = gpu, model
        self.resolved: ResolvedEngine = resolve_engine(config, gpu, model)
        self.memory: MemoryPlan = plan_memory(gpu, model, self.resolved)
        if self.memory.refusal is not None:
            raise EngineRefusedError(self.memory.refusal)
        self.efficiency = efficiency or Efficiency()
        self.roofline = Roofline(gpu, model, self.resolved, self.efficiency)
        self.kv = KvCache(
            self.memory.num_blocks,
            self.resolved.block_size,
            self.resolved.enable_prefix_caching,
            self.memory.layout,
            host=self._host_tier(),
        )
        self.scheduler = Scheduler(self.resolved, self.kv, eager=eager, acceptance=acceptance)
        # data-parallel replicas share the API servers: each engine streams through its share
        servers = self.resolved.api_server_count / self.resolved.data_parallel_size
        self.frontend = FrontEnd.of(self.efficiency, servers)
        self.now_s = 0.0
        self._last_step_s = (-1.0, -1.0)
        """The last step's start and end: with async scheduling the step after it was
        scheduled as it started (``seen_by_s``)."""
        self.index = 0
        """Its rank among data-parallel replicas (``kneepoint.sim.replicas``)."""
        self._next_rid = 0

    def _host_tier(self) -> HostTier | None:
        """Host memory for KV offloading, where the configuration asks for it: as many
        blocks as its bytes hold, loaded back at the host link's rate (the refusal on a
        device vLLM does not offload from is the memory plan's)."""
        size, link = self.resolved.kv_offloading_bytes, self.gpu.host_link_gb_s
        if not size or link is None:
            return None
        per_token = self.memory.kv_bytes_per_token * self.resolved.tensor_parallel_size
        blocks = int(size // (per_token * self.resolved.block_size))
        return HostTier(blocks, per_token / (link * 1e9 * self.efficiency.host_link))

    def submit(self, arrival: Arrival) -> SimRequest:
        """Queue a request now; refused if it can never fit in max_model_len."""
        if arrival.max_tokens < 1 or not arrival.prompt:
            raise RequestRejectedError("a request needs a prompt and max_tokens >= 1")
        length = len(arrival.prompt) + arrival.max_tokens
        if length > self.resolved.max_model_len:
            raise RequestRejectedError(
                f"This model's maximum context length is {self.resolved.max_model_len} tokens. "
                f"However, you requested {length} tokens "
                f"({len(arrival.prompt)} in the messages, {arrival.max_tokens} in the completion)."
            )
        req = SimRequest(
            self._next_rid,
            arrival.prompt,
            arrival.max_tokens,
            self.now_s,
            arrival.traffic_class,
            key=arrival.key,
            queued_s=self.now_s,
        )
        self._next_rid += 1
        self.scheduler.add(req)
        return req

    def frontend_for(self, req: SimRequest) -> FrontEnd:
        """The API server that streamed ``req``."""
        return self.frontend

    def frontend_busy_pct(self, start_s: float, end_s: float) -> float | None:
        """The API server's CPU over a window (``FrontEnd.busy_pct``)."""
        return self.frontend.busy_pct(start_s, end_s)

    @property
    def replicas(self) -> int:
        """One engine: no data-parallel replicas beside it."""
        return 1

    @property
    def busy(self) -> bool:
        sched = self.scheduler
        return bool(sched.running or sched.waiting or sched.loads.loading)

    def abort_all(self) -> None:
        """Drop every request still in flight, as vLLM aborts those whose client gave up:
        a load point's cut-off leaves none behind for the next on this server."""
        sched = self.scheduler
        for req in [*sched.running, *sched.waiting, *sched.loads.loading]:
            sched.abort(req)

    def seen_by_s(self) -> float:
        """Requests the engine core took in by this time can join the step starting now.

        With async scheduling vLLM's engine core keeps two steps in flight (its batch queue,
        ``EngineCore.step_with_batch_queue``): it schedules step N+1 as soon as step N is
        launched and blocks on N's output only then, so a step that follows another with
        requests still running was scheduled when that one started, and a request that came
        in while it ran waits a further step. Its first token then comes 2.5 steps after it
        arrives on average, not 1.5: the BLIS campaign's vLLM 0.15.1 servers show first
        tokens 2.0-3.0 steps after arrival plus ~6 ms, on every model and GPU
        (tests/fixtures/published/blis-campaign). Without async scheduling (or after an idle
        spell) a step is scheduled as it starts."""
        start, end = self._last_step_s
        if self.resolved.async_scheduling and end == self.now_s and self.scheduler.running:
            return start
        return self.now_s

    def step(self) -> StepOutcome | None:
        """Run one step; None when there is nothing the engine can run."""
        queries, hits = self.kv.query_tokens, self.kv.hit_tokens
        host = self.kv.host
        outside = (host.query_tokens, host.hit_tokens) if host is not None else (0, 0)
        plan = self.scheduler.schedule(self.now_s, self.seen_by_s())
        if not plan.num_requests:
            return None
        shape = plan.shape()
        cost = self.roofline.step(shape)
        start = self.now_s
        self.now_s += cost.wall_s
        self._last_step_s = (start, self.now_s)
        for req in plan.admitted:
            if req.first_scheduled_s is None:  # a re-admitted preempted request keeps its first
                req.first_scheduled_s = start
        sampled, finished = self.scheduler.finish_step(plan, self.now_s)
        usage = self.kv.usage
        record = StepRecord(
            start_s=start,
            cost=cost,
            shape=shape,
            num_requests=shape.num_requests,
            num_tokens=shape.new_tokens,
            num_samples=shape.samples,
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_usage=usage,
            preempted=len(plan.preempted),
            prompt_tokens=plan.first_prompt_tokens,
            admission_stop=plan.admission_stop,
            prefix_queries=self.kv.query_tokens - queries,
            prefix_hits=self.kv.hit_tokens - hits,
            draft_tokens=tuple(plan.drafts.values()),
            accepted=tuple(plan.accepted),
            external_queries=host.query_tokens - outside[0] if host is not None else 0,
            external_hits=host.hit_tokens - outside[1] if host is not None else 0,
            engine=self.index,
        )
        return StepOutcome(record, sampled, finished, plan.admitted)

    def run(self, arrivals: Iterable[Arrival] | Client, until_s: float = float("inf")) -> SimRun:
        """Feed arrivals through the API server at their times and step until all are done
        (or ``until_s``, or a client that has nothing left to wait for); ``frontend`` then
        says when the client saw each token. A ``Client`` learns when each request ends, so
        it can send what waits on it (a session's next turn, a capped client's next)."""
        client = arrivals if isinstance(arrivals, Client) else Scheduled(arrivals)
        run = SimRun()
        loop = EngineLoop(self, client, run, until_s)
        while loop.turn():
            pass
        return run
