"""Running requests in steady decode, advanced as one cohort instead of one by one.

A decoding request whose last KV block still has room does the same thing every step: one
token in, one token out, its context one longer. On the virtual clock nothing needs to look
at it until its block fills (it needs a new block) or it is about to sample its last token.
The cohort holds such requests frozen at the step they joined (``SimRequest.decode_since``)
and knows, for the batch shape, only how many there are and the sum of their contexts. Each
member is due back at the step that needs it; ``release`` catches its state up (outputs,
token times, computed tokens, full blocks registered in the prefix cache) to exactly what
step-by-step simulation would have produced. The scheduler releases everyone before any step
whose budget or KV pool could bind, so preemption and starvation see exact state.

With a sliding window the cohort also keeps the sum of contexts clipped to the window, in O(1)
per step: members still under the window grow by one a step, the others stay at the window,
and each member's crossing step is filed when it joins.
"""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.sim.kv_cache import KvCache
from kneepoint.sim.request import SimRequest


class DecodeCohort:
    """Members, their due steps, and the end time of every step so far."""

    def __init__(self, kv: KvCache, on_leave: Callable[[SimRequest], None]) -> None:
        """``on_leave``: told of every member released (it is stepped one by one again)."""
        self.kv = kv
        self._on_leave = on_leave
        self.members: dict[SimRequest, None] = {}
        self._due: dict[int, list[SimRequest]] = {}
        self._offset = 0
        """Sum over members of (num_computed - decode_since): contexts at step k are
        ``_offset + len(members) * k``."""
        self.step_ends_s: list[float] = []
        self._cap = kv.window - 1
        """Clipped contexts count at most this (a decode then attends the whole window)."""
        self._growing = 0
        """Members whose context is still under ``_cap``."""
        self._growing_offset = 0
        """Sum over growing members of (num_computed - decode_since), as ``_offset``."""
        self._capped = 0
        self._caps: dict[int, int] = {}
        """Step -> growing members whose context reaches ``_cap`` at it."""
        self._caps_through = 0
        """Steps whose crossings have been applied."""

    def __len__(self) -> int:
        return len(self.members)

    @property
    def step(self) -> int:
        """Index of the next step (steps ended so far)."""
        return len(self.step_ends_s)

    def context_tokens(self) -> int:
        """Tokens already in the KV cache across members, before the next step."""
        return self._offset + len(self.members) * len(self.step_ends_s)

    def window_context_tokens(self) -> int:
        """Sum over members of their context clipped to ``window - 1`` (0 without a window):
        a decode attends that plus itself."""
        if not self.kv.window:
            return 0
        step = len(self.step_ends_s)
        while self._caps_through <= step:
            count = self._caps.pop(self._caps_through, 0)
            if count:
                self._growing -= count
                self._capped += count
                self._growing_offset -= count * (self._cap - self._caps_through)
            self._caps_through += 1
        return self._growing_offset + self._growing * step + self._capped * self._cap

    def _join_window(self, computed: int, step: int) -> None:
        if computed >= self._cap:
            self._capped += 1
            return
        self._growing += 1
        self._growing_offset += computed - step
        cross = step + self._cap - computed
        self._caps[cross] = self._caps.get(cross, 0) + 1

    def _leave_window(self, computed: int, since: int) -> None:
        cross = since + self._cap - computed
        if computed >= self._cap or cross < self._caps_through:
            self._capped -= 1
            return
        self._growing -= 1
        self._growing_offset -= computed - since
        self._caps[cross] -= 1

    def end_step(self, now_s: float) -> None:
        self.step_ends_s.append(now_s)

    def try_join(self, req: SimRequest) -> bool:
        """Take a request that has just sampled a token, if its next steps are plain decodes."""
        computed, produced = req.num_computed, req.num_output
        if computed != req.prompt_len + produced - 1:
            return False  # still prefilling
        step = len(self.step_ends_s)
        ahead = self._steps_ahead(req, computed, produced)
        if ahead <= 0:
            return False
        req.decode_since = step
        req.decode_end = step + req.max_tokens - produced - 1
        self.members[req] = None
        self._offset += computed - step
        if self.kv.window:
            self._join_window(computed, step)
        self._set_due(req, step + ahead)
        return True

    def _steps_ahead(self, req: SimRequest, computed: int, produced: int) -> int:
        """Plain decode steps left: until the last block is full or the last token is due."""
        room = len(req.blocks) * self.kv.block_size - computed
        return min(room, req.max_tokens - produced - 1)

    def _set_due(self, req: SimRequest, step: int) -> None:
        req.decode_due = step
        self._due.setdefault(step, []).append(req)

    def due_for_blocks(self) -> list[SimRequest]:
        """Members due at the next step. Those about to sample their last token are released;
        returned are those whose last block is full: they stay if ``refill`` gives them one."""
        step = len(self.step_ends_s)
        full = []
        for req in self._due.pop(step, ()):
            if req.decode_due != step:
                continue  # released (and perhaps rejoined) since it was filed here
            if step >= req.decode_end:
                self.release(req)
            else:
                full.append(req)
        return full

    def refill(self, full: list[SimRequest]) -> None:
        """Give each member one new block (the caller has checked the pool) and file it again.
        Its filled block is registered in the prefix cache when it is released: until its
        blocks are freed nobody else can match them (they hold its own output tokens)."""
        kv, step, due = self.kv, len(self.step_ends_s), self._due
        if kv.window:
            kv.extend_all(full, [r.num_computed + step - r.decode_since for r in full])
        else:
            for req, block in zip(full, kv.take_positions(len(full)), strict=True):
                req.blocks.append(block)
        # The new block is all room, so most are next due a block later, in this order; the
        # rest sooner, at their last token.
        later, next_due = [], step + kv.block_size
        for req in full:
            end = req.decode_end
            if end >= next_due:
                req.decode_due = next_due
                later.append(req)
            else:
                req.decode_due = end
                due.setdefault(end, []).append(req)
        due.setdefault(next_due, []).extend(later)

    def release_all(self) -> None:
        for req in list(self.members):
            self.release(req)
        self._due.clear()

    def release(self, req: SimRequest) -> None:
        """Catch the request up to the next step and take it out of the cohort."""
        since, step = req.decode_since, len(self.step_ends_s)
        del self.members[req]
        self._offset -= req.num_computed - since
        if self.kv.window:
            self._leave_window(req.num_computed, since)
        req.decode_since = req.decode_due = req.decode_end = -1
        self._on_leave(req)
        count = step - since
        if count <= 0:
            return
        req.num_output += count
        req.token_times_s.extend(self.step_ends_s[since:step])
        req.num_computed += count
        if req.num_computed // self.kv.block_size > req.num_cached_blocks:
            self.kv.cache_full_blocks(req)
