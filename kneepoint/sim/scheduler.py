"""The vLLM-V1-style scheduler: one token budget per step, running requests first.

Each step: running requests, in order, get their next tokens (a decode's one, or the next
chunk of a prefill) while the budget lasts; when the KV pool cannot hold them, the request at
the tail of the running list is preempted (its KV dropped, to be recomputed) until it can.
Then, only in a step that preempted nothing, waiting requests are admitted first-come
first-served while ``running < max_num_seqs``, the budget lasts and blocks allow, starting
after whatever prefix of theirs is cached. Chunked prefill is always on.

Unless built ``eager``, steady decodes ride in a ``DecodeCohort`` and are stepped in bulk;
a step in which the budget or the pool could bind walks the running list as above, releasing
only the members it preempts or starves, so both modes produce the same steps.

With n-gram speculation (``ResolvedEngine.speculative_tokens``) a decode that finds a draft
(``kneepoint.sim.drafting``) is scheduled with its draft tokens, in the token budget and the KV
pool as vLLM schedules them, and yields its token plus those accepted; every decode is then
stepped one by one (no cohort: each draws its own draft).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from kneepoint.physics import ResolvedEngine
from kneepoint.records import DraftAcceptance
from kneepoint.sim.decode_cohort import DecodeCohort
from kneepoint.sim.drafting import Drafter
from kneepoint.sim.host_tier import PrefixLoads
from kneepoint.sim.kv_cache import KvCache
from kneepoint.sim.request import SimRequest
from kneepoint.sim.step_plan import AdmissionStop, StepPlan


def _run_seq(req: SimRequest) -> int:
    return req.run_seq


class Scheduler:
    """Waiting queue, running list and the KV cache of one simulated engine."""

    def __init__(
        self,
        engine: ResolvedEngine,
        kv: KvCache,
        *,
        eager: bool = False,
        acceptance: Mapping[str, DraftAcceptance] | None = None,
    ) -> None:
        """``acceptance``: per traffic class, how its n-gram drafts fare (none: no draft is
        found), where the engine speculates."""
        self.max_num_seqs = engine.max_num_seqs
        self.token_budget = engine.max_num_batched_tokens
        self.long_prefill_threshold = engine.long_prefill_token_threshold
        self.kv = kv
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.loads = PrefixLoads(kv)
        """Requests waiting for their prefix to load from host memory."""
        self._solo: dict[SimRequest, None] = {}
        """Running requests outside the decode cohort (with one): those stepped one by one."""
        self._admissions = 0
        k = engine.speculative_tokens
        self.drafter = Drafter(k, acceptance or {}) if k else None
        self.cohort = None if eager or k else DecodeCohort(kv, self._solo.setdefault)
        self._clip = kv.window - 1 if kv.window else 1 << 62
        """Decode contexts count at most this in the window sums (no bound without one)."""

    def add(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def _chunk(self, remaining: int, budget: int) -> int:
        if 0 < self.long_prefill_threshold < remaining:
            remaining = self.long_prefill_threshold
        return min(remaining, budget)

    def schedule(self, now_s: float = 0.0, seen_by_s: float | None = None) -> StepPlan:
        """The next step's plan at ``now_s`` (when loads from host memory have come in),
        admitting only requests the engine core had taken in by ``seen_by_s`` (``now_s``
        when None: a step scheduled as it starts)."""
        plan = StepPlan(window=self.kv.window, drafting=self.drafter is not None)
        if self.loads.loading:
            self.loads.rejoin(now_s, self.waiting)
        if self.cohort is None:
            budget = self._schedule_running(plan, self.token_budget)
        else:
            budget = self._schedule_with_cohort(plan, self.cohort)
        seen = now_s if seen_by_s is None else seen_by_s
        plan.admission_stop = self._admit_waiting(plan, budget, now_s, seen)
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        """Running requests in order while the budget lasts, preempting from the tail when the
        pool is short. Cohort members in the list just take their one token each."""
        running, block_size, scheduled = self.running, self.kv.block_size, plan.scheduled
        index = decodes = decode_context = decode_window = 0
        clip = self._clip
        while index < len(running) and budget > 0:
            req = running[index]
            computed = req.num_computed
            remaining = req.prompt_len + req.num_output - computed
            drafted = self.drafter.draft(req, budget) if self.drafter and remaining == 1 else 0
            if not drafted and (
                req.decode_since >= 0
                or (remaining == 1 and computed < len(req.blocks) * block_size)
            ):
                # A decode whose last block has room: no allocation, and its shape terms are
                # summed here rather than through plan.add (this is the simulator's hot loop).
                if req.decode_since < 0:
                    scheduled.append((req, 1))
                    decodes += 1
                    decode_context += computed
                    decode_window += computed if computed < clip else clip
                budget -= 1
                index += 1
                continue
            new = 1 + drafted if drafted else self._chunk(remaining, budget)
            while not self.kv.allocate(req, new):
                victim = running.pop()
                self._preempt(victim, plan)
                if victim is req:
                    break
            else:
                if drafted:
                    plan.add_draft(req, drafted)
                else:
                    plan.add(req, new)
                budget -= new
                index += 1
                continue
            break
        self._close_running_phase(plan, running[index:], decodes, (decode_context, decode_window))
        return budget

    def _close_running_phase(
        self,
        plan: StepPlan,
        unscheduled: list[SimRequest],
        decodes: int,
        context: tuple[int, int],
    ) -> None:
        """Sum the decodes (``context``: their contexts, plain and clipped to the window) into
        the plan; cohort members the budget did not reach this step leave the cohort (they
        fall out of step with it)."""
        plan.add_decodes(decodes, *context)
        cohort = self.cohort
        if cohort is None:
            return
        for req in unscheduled:
            if req.decode_since >= 0:
                cohort.release(req)
        plan.add_cohort(len(cohort), cohort.context_tokens(), cohort.window_context_tokens())

    def _schedule_with_cohort(self, plan: StepPlan, cohort: DecodeCohort) -> int:
        """The running phase with the cohort decoding in bulk, when every running request is
        sure to get its tokens and blocks; otherwise step through the running list."""
        kv = self.kv
        full = cohort.due_for_blocks()
        threshold = self.long_prefill_threshold  # ``_chunk`` with no budget, written out
        demands = []
        for req in sorted(self._solo, key=_run_seq):  # in running order, not all of it
            remaining = req.prompt_len + req.num_output - req.num_computed
            demands.append((req, threshold if 0 < threshold < remaining else remaining))
        tokens, blocks = len(cohort), len(full) * kv.blocks_per_position
        for req, new in demands:
            tokens += new
            blocks += max(0, kv.blocks_needed(req, new))
        if tokens > self.token_budget or blocks > kv.num_free:
            for req in full:
                cohort.release(req)
            return self._schedule_running(plan, self.token_budget)
        if full:
            cohort.refill(full)
        for req, new in demands:
            kv.allocate(req, new)  # cannot fail: the pool was checked for all of them
            plan.add(req, new)
        plan.add_cohort(len(cohort), cohort.context_tokens(), cohort.window_context_tokens())
        return self.token_budget - tokens

    def sync(self) -> None:
        """Bring every request's state up to date (before anyone reads it mid-run)."""
        if self.cohort is not None:
            self.cohort.release_all()

    def _preempt(self, victim: SimRequest, plan: StepPlan) -> None:
        if victim.decode_since >= 0 and self.cohort is not None:
            self.cohort.release(victim)  # catch its output up before the KV goes
        self._solo.pop(victim, None)
        self.kv.register_generated(victim)
        self.kv.free(victim)
        victim.preempt()
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)

    def _admit_waiting(
        self, plan: StepPlan, budget: int, now_s: float, seen_by_s: float
    ) -> AdmissionStop:
        if plan.preempted:
            return "preempted"
        while self.waiting:
            if self.waiting[0].queued_s > seen_by_s:
                return "no_waiting"  # not yet in the queue this step was scheduled from
            if len(self.running) >= self.max_num_seqs:
                return self._unless_kv_full("max_num_seqs")
            if budget <= 0:
                return self._unless_kv_full("budget")
            req = self.waiting[0]
            prefix = self.kv.cached_prefix(req)
            if self.loads.begin(req, len(prefix), now_s, self.waiting):
                continue
            hit = len(prefix) * self.kv.block_size
            loaded = max(0, req.loaded_through - len(prefix)) * self.kv.block_size
            new = self._chunk(req.num_tokens - hit - loaded, budget)
            if not self.kv.allocate(req, loaded + new, prefix):
                return "kv_capacity"
            self.waiting.popleft()
            self.kv.record_admission(req, hit)
            if self.kv.host is not None and req.load_ready_s is None:
                self.kv.host.query_tokens += req.num_tokens - hit  # looked up, none found
            req.num_computed = hit + loaded
            req.prefix_hit_tokens = hit
            req.run_seq = self._admissions
            self._admissions += 1
            self.running.append(req)
            if self.cohort is not None:
                self._solo[req] = None
            plan.admitted.append(req)
            plan.add(req, new)
            budget -= new
        return "no_waiting"

    def abort(self, req: SimRequest) -> None:
        """Drop a request wherever it is (its client went away) and free its blocks."""
        if req.decode_since >= 0 and self.cohort is not None:
            self.cohort.release(req)
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.loads.loading:
            self.loads.loading.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self._solo.pop(req, None)
            self.kv.free(req)

    def _unless_kv_full(self, stop: AdmissionStop) -> AdmissionStop:
        """A cap stopped admission; but if the KV pool could not have taken the next request's
        first chunk either, the pool is what binds (the cap would only bind once it had room)."""
        req = self.waiting[0]
        prefix = self.kv.cached_prefix(req)
        hit = len(prefix) * self.kv.block_size
        first_chunk = self._chunk(req.num_tokens - hit, self.token_budget)
        return stop if self.kv.fits(req, first_chunk, prefix) else "kv_capacity"

    def finish_step(
        self, plan: StepPlan, now_s: float
    ) -> tuple[list[SimRequest], list[SimRequest]]:
        """Apply a step's results: advance requests, sample tokens, retire finished ones.
        Returns the requests stepped one by one that got a token (cohort members are not
        listed: their state catches up when released), and those that finished."""
        sampled: list[SimRequest] = []
        finished: list[SimRequest] = []
        kv, block_size = self.kv, self.kv.block_size
        drafts, drafter = plan.drafts, self.drafter
        for req, scheduled in plan.scheduled:
            made, new = 1, scheduled
            if drafts and req in drafts:
                assert drafter is not None  # only a drafter drafts
                accepted = drafter.accepted(req, drafts[req])
                plan.accepted.append(accepted)
                made += accepted
                new = made  # the rejected tokens' KV is written over next step
            computed = req.num_computed + new
            req.num_computed = computed
            if computed // block_size > req.num_cached_blocks:
                kv.cache_full_blocks(req)
            if computed < req.prompt_len + req.num_output + made - 1:
                continue  # a prefill chunk: no token yet
            req.num_output += made
            if made == 1:  # (no list built for the one token of all but a draft's step)
                req.token_times_s.append(now_s)
            else:
                req.token_times_s.extend([now_s] * made)
            if req.num_output == 1:
                plan.first_prompt_tokens += req.prompt_len
            sampled.append(req)
            if req.num_output >= req.max_tokens:
                req.finish_s = now_s
                finished.append(req)
        self._retire(finished)
        if self.cohort is not None:
            self.cohort.end_step(now_s)
            for req in sampled:
                if self.cohort.try_join(req):
                    del self._solo[req]
        return sampled, finished

    def _retire(self, finished: list[SimRequest]) -> None:
        """Take requests that finished off the running list and free their blocks."""
        for req in finished:
            self.running.remove(req)
            self._solo.pop(req, None)
            self.kv.free(req)
