"""What one scheduler step runs: its requests and new tokens, and the batch shape they add up to.

The shape's sums are accumulated as requests are added, not recomputed: a plan is built on the
simulator's hot path, every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kneepoint.physics import BatchShape, window_pairs
from kneepoint.sim.request import SimRequest

AdmissionStop = Literal["no_waiting", "preempted", "max_num_seqs", "budget", "kv_capacity"]


@dataclass(slots=True)
class StepPlan:
    """What one step runs: (request, new tokens) pairs, and what the scheduler did.

    The batch-shape sums are accumulated as requests are added (``add``), not recomputed: the
    plan is built on the simulator's hot path.
    """

    scheduled: list[tuple[SimRequest, int]] = field(default_factory=list)
    admitted: list[SimRequest] = field(default_factory=list)
    preempted: list[SimRequest] = field(default_factory=list)
    admission_stop: AdmissionStop = "no_waiting"
    """Why admission from the waiting queue stopped this step."""
    num_tokens: int = 0
    attention_pairs: float = 0.0
    kv_tokens: int = 0
    samples: int = 0
    cohort_size: int = 0
    """Decodes run by the cohort this step, not listed in ``scheduled``."""
    window: int = 0
    """The model's sliding window in tokens (0: none); the window sums below follow it."""
    window_pairs: float = 0.0
    window_kv_tokens: int = 0
    drafts: dict[SimRequest, int] = field(default_factory=dict)
    """Decodes scheduled with n-gram draft tokens, and how many each carries."""
    accepted: list[int] = field(default_factory=list)
    """Draft tokens each draft had accepted, once the step has run."""
    first_prompt_tokens: int = 0
    """Whole prompts of the requests whose first token the step made, once it has run
    (``StepRecord.prompt_tokens``: summed as ``finish_step`` samples, not in a second pass)."""
    drafting: bool = False
    """The engine speculates: every request that samples looks up its next draft after the
    step (vLLM's n-gram proposer runs over the batch)."""

    def add(self, req: SimRequest, new: int) -> None:
        computed = req.num_computed
        self.scheduled.append((req, new))
        self.num_tokens += new
        self.attention_pairs += new * (computed + (new + 1) / 2)
        self.kv_tokens += computed + new
        self.samples += computed + new == req.prompt_len + req.num_output
        if self.window:
            self.window_pairs += window_pairs(new, computed, self.window)
            self.window_kv_tokens += min(computed + new, self.window + new - 1)

    def add_draft(self, req: SimRequest, k: int) -> None:
        """A decode verifying ``k`` draft tokens beside its own: ``1 + k`` tokens in the step
        and one sample (its accepted tokens reach the client in one chunk); ``add`` counts
        no sample for it, its tokens running past the one it samples."""
        self.add(req, 1 + k)
        self.drafts[req] = k
        self.samples += 1

    def add_cohort(self, count: int, context_tokens: int, window_context: int = 0) -> None:
        """The decode cohort's ``count`` one-token decodes (not listed in ``scheduled``)."""
        self.cohort_size = count
        self.add_decodes(count, context_tokens, window_context)

    def add_decodes(self, count: int, context_tokens: int, window_context: int = 0) -> None:
        """Shape terms of ``count`` one-token decodes already in ``scheduled``;
        ``window_context`` sums their contexts clipped to ``window - 1``."""
        self.num_tokens += count
        self.attention_pairs += context_tokens + count
        self.kv_tokens += context_tokens + count
        self.samples += count
        self.window_pairs += window_context + count
        self.window_kv_tokens += window_context + count

    @property
    def num_requests(self) -> int:
        return len(self.scheduled) + self.cohort_size

    def shape(self) -> BatchShape:
        return BatchShape(
            num_requests=self.num_requests,
            new_tokens=self.num_tokens,
            attention_pairs=self.attention_pairs,
            kv_tokens=self.kv_tokens,
            samples=self.samples,
            window_attention_pairs=self.window_pairs if self.window else None,
            window_kv_tokens=self.window_kv_tokens if self.window else None,
            draft_lookups=self.samples if self.drafting else 0,
        )
