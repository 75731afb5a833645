"""Chained block hashes of a request's tokens, as vLLM's prefix cache identifies full blocks.

Block ``i``'s hash covers its own tokens and, through its parent's hash, every token before
it, so two requests share a block only if they share the whole prefix up to its end.
"""

from __future__ import annotations

from kneepoint.sim.request import SimRequest


def block_hashes(req: SimRequest, count: int, size: int) -> list[int]:
    """The request's first ``count`` block hashes, each computed once (kept on the request)."""
    hashes = req.block_hashes
    done = len(hashes)
    if done >= count:
        return hashes
    prompt, prompt_len = req.prompt, req.prompt_len
    parent = hashes[-1] if hashes else 0
    # Blocks wholly inside the prompt: the simulator hashes every prompt block it admits, so
    # this loop is kept to one slice and one hash a block.
    whole = min(count, prompt_len // size)
    for start in range(done * size, whole * size, size):
        parent = hash((parent, prompt[start : start + size]))
        hashes.append(parent)
    output = req.output
    for i in range(max(done, whole), count):
        start, end = i * size, (i + 1) * size
        # slice the two parts rather than joining the whole sequence per block
        block = prompt[start:prompt_len] + tuple(
            output[max(start - prompt_len, 0) : end - prompt_len]
        )
        parent = hash((parent, block))
        hashes.append(parent)
    return hashes
