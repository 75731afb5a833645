"""A request inside the simulated engine: its tokens, progress and KV blocks.

Mutable by design (the scheduler advances it every step) and internal to ``kneepoint.sim``;
what leaves the simulator are records built from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Generated token ids live above any prompt id, and differ per request, so one request's
# output never looks like another's prompt to the prefix cache.
_OUTPUT_ID_BASE = 1 << 40


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request's state. ``num_computed`` counts tokens whose KV is in the cache."""

    rid: int
    prompt: tuple[int, ...]
    max_tokens: int
    arrival_s: float
    traffic_class: str = ""
    queued_s: float = float("-inf")
    """When the engine core took it in (its scheduler sees it from then on); a step
    scheduled earlier cannot admit it (``SimEngine.step``)."""
    key: int = -1
    """The client's name for it (``Arrival.key``)."""
    num_output: int = 0
    """Tokens generated so far (their ids are ``output``)."""
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    """Leading blocks already registered in the prefix cache."""
    skipped_blocks: int = 0
    """Leading block positions out of the sliding window, whose sliding-group blocks are freed
    (in a model whose every layer slides, ``blocks`` holds -1 there, as vLLM a null block)."""
    prefix_hit_tokens: int = 0
    preemptions: int = 0
    first_scheduled_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    finish_s: float | None = None
    decode_since: int = -1
    """Step at which it joined the decode cohort (-1: advanced step by step); while in the
    cohort, ``output``, ``token_times_s`` and ``num_computed`` are as of that step."""
    decode_due: int = -1
    """Cohort step at which it is next looked at (a full block, or its last token)."""
    decode_end: int = -1
    """Cohort step that samples its last token: it is released before it."""
    run_seq: int = -1
    """Order of its latest admission: the running list is in this order."""
    load_ready_s: float | None = None
    """When its prefix, loading from host memory, is in (None: no load begun)."""
    loaded_through: int = 0
    """Leading block positions the device holds once that load is in."""

    prompt_len: int = field(init=False)
    output_id_base: int = field(init=False)
    """Generated token i has id ``output_id_base + i``."""

    def __post_init__(self) -> None:
        self.prompt_len = len(self.prompt)
        self.output_id_base = _OUTPUT_ID_BASE + self.rid * 1_000_003

    @property
    def output(self) -> range:
        """The generated token ids, in order: a count, not a list, so that stepping many
        tokens at once (the decode cohort) costs nothing per token."""
        return range(self.output_id_base, self.output_id_base + self.num_output)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what the KV cache must eventually hold."""
        return self.prompt_len + self.num_output

    @property
    def finished(self) -> bool:
        return self.num_output >= self.max_tokens

    def preempt(self) -> None:
        """Recompute preemption: KV is dropped, generated tokens are kept."""
        self.num_computed = 0
        self.blocks = []
        self.num_cached_blocks = 0
        self.skipped_blocks = 0
        self.load_ready_s = None
        self.loaded_through = 0
        self.preemptions += 1
