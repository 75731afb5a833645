"""A saturated API server as a wall in front of the engine.

vLLM's OpenAI server runs one event loop per process: it takes each request in and streams
every step's tokens out, one piece of work after another (``kneepoint.sim.frontend``). Once
that loop has no time left, requests wait in it before the engine sees them, and first tokens
wait in it before the client does. vLLM's own TTFT histogram counts from the arrival stamp
its renderer sets when the loop gets to the request (vllm/v1/engine/input_processor.py) to the
first token's output batch, so the client's TTFT over the server's is the time the loop held
the request. Where the busiest API-server process reads saturated (kneepoint reads its CPU
where it launched the server), that share of the client's TTFT is charged to scheduling as a
queue wall, as a full KV pool is charged to the cache: ``--api-server-count`` relieves it.

Without the CPU reading the gap alone does not decide: the server's histogram covers the
whole point and the client's percentiles its stable window, so a queue that grows through a
saturated point opens the same gap (the real H200 KV-bound run at 48 req/s: client TTFT p50
739 ms, the server's 72 ms, tests/fixtures/real/h200-llama8b-kv-tune).
"""

from __future__ import annotations

import math

from kneepoint.policies.diagnosis.evidence import Tally
from kneepoint.records import LoadPoint

FRONTEND_SATURATED_PCT = 90.0
"""vLLM's API server is one Python event loop: past this share of one core it has no time left
to take requests in and stream tokens out, and the engine waits on it."""


def frontend_share(point: LoadPoint, tally: Tally) -> float:
    """Share of the time a saturated API server held requests in front of the engine."""
    s = point.signals
    pct, server = s.frontend_cpu_pct, s.server_latency.get("ttft")
    if pct is None or pct < FRONTEND_SATURATED_PCT or server is None:
        return 0.0
    clients = [d["ttft"].p50_ms for d in point.dists.values() if "ttft" in d]
    clients = [c for c in clients if 0 < c < math.inf]
    if not clients:
        return 0.0
    client = sum(clients) / len(clients)
    share = min(1.0, max(0.0, (client - server.p50_ms) / client))
    tally.add(
        "scheduling",
        share,
        signal="ttft_in_frontend_share",
        value=round(share, 3),
        threshold=f"an API server >= {FRONTEND_SATURATED_PCT:g}% of a core",
        reading=f"TTFT p50 {client:.0f} ms at the client, {server.p50_ms:.0f} ms by the "
        f"server's own count: {share:.0%} of it waits in the saturated API server (taking "
        "requests in, streaming first tokens out)",
        kind="frontend",
    )
    return share
