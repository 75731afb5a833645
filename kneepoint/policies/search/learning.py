"""Learning from misses within a run: a move of a kind that was measured re-priced by what it
gave, and the stop when nothing left is predicted to beat the noise.

A kind is one knob moved alone. Its factor is measured ratio over predicted ratio of the latest
such move, against whichever incumbent it was judged, the prediction taken before any earlier
factor re-priced it: a first doubling of max_num_seqs predicted at 1.35x that measured 1.01x
makes the next max_num_seqs move worth 1.01/1.35 of its own prediction. The factor outlives
promotions undecayed, so a move measured flat is not proposed again at its first price once
another knob is promoted; a later move of the knob replaces it.
Moves of several knobs at once (Optuna's) teach nothing about any one of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kneepoint.records import KnobCandidate, Proposal


@dataclass(frozen=True, slots=True)
class Best:
    """The most promising move left, re-priced by what the run measured."""

    candidate: KnobCandidate
    ratio: float
    factor: float


def single_knob_errors(measured: Iterable[tuple[Proposal, float]]) -> list[tuple[str, float]]:
    """Each measured single-knob move as (knob, measured over predicted ratio), in order
    (``measured``: each proposal with its measured ratio to the incumbent it was judged
    against), the prediction as it was before earlier moves re-priced it."""
    errors = []
    for proposal, ratio in measured:
        if len(proposal.changes) == 1 and ratio > 0:
            (knob,) = proposal.changes
            prediction = proposal.prediction
            errors.append((knob, ratio * prediction.repriced_by / prediction.capacity_ratio))
    return errors


def learned_factors(measured: Iterable[tuple[Proposal, float]]) -> dict[str, float]:
    """Per knob, the measured over predicted ratio of its latest single-knob move."""
    return dict(single_knob_errors(measured))


def best_left(candidates: Sequence[KnobCandidate], factors: dict[str, float]) -> Best | None:
    """The candidate with the highest re-priced ratio (None when there are none)."""
    priced = [
        Best(c, c.predicted_ratio * factors.get(c.knob.name, 1.0), factors.get(c.knob.name, 1.0))
        for c in candidates
    ]
    return max(priced, key=lambda b: b.ratio, default=None)


def nothing_worth_trying(best: Best | None, floor_rel: float) -> str | None:
    """Why no move is worth a trial (None when one is): the best left is predicted inside
    ``floor_rel``, the larger of the incumbent's measured noise and the least effect worth
    promoting."""
    if best is None:
        return "no candidate is left"
    if best.ratio > 1.0 + floor_rel:
        return None
    learned = (
        f" once re-priced by its last measured move ({best.factor:.2f} of what was predicted)"
        if best.factor != 1.0
        else ""
    )
    return (
        f"nothing left worth trying: the best move left, {move_words(best.candidate)}, "
        "is predicted at "
        f"{best.ratio:.2f}x{learned}, inside the {floor_rel:.1%} that noise and the least "
        "effect worth promoting allow"
    )


def move_words(candidate: KnobCandidate) -> str:
    """A candidate's move as a sentence says it: "max_num_seqs up", "kv_cache_dtype to fp8"
    (a "to" move names its value, or the sentence reads "kv_cache_dtype to, is predicted")."""
    name, direction = candidate.knob.name, candidate.direction
    if direction != "to":
        return f"{name} {direction}"
    target = candidate.target
    shown = json.dumps(target, separators=(", ", ": ")) if isinstance(target, dict) else target
    return f"{name} to {shown}"
