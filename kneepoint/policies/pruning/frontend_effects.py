"""API-server scale-out (``--api-server-count``): priced from the busiest API-server
process's CPU at the knee and the cores the host left idle there.

vLLM's API server is one Python event loop that takes every request in and streams every
token out; when it is saturated the engine waits on it (the diagnosis names a ``frontend``
scheduling wall). More processes share that work (vLLM PR #17546), so the front-end's
throughput grows with their number, up to what the engine can take: the share of the time
the device idled is what the front-end held back. Each process wants a core: where the host
had none idle at the knee they take the engine's. On vLLM's CPU build (2 cores, the engine's
worker and core process, the API server and the load generator sharing them) a second API
server measured 0.87x and 0.95x of one in two rounds, its one API server at 38-40% of a core
with 0.02 cores idle (benchmarks/frontend_cpu.py, tests/fixtures/real/cpu-tiny-frontend).
"""

from __future__ import annotations

from kneepoint.policies.pruning.knob_effects import MAX_RATIO, Effect, Situation

IDLE_SHARE_NEEDED = 0.5
"""Share of the cores the front-end's added load would use that must have sat idle at the
knee for the added processes to run beside the engine rather than on its cores."""


def api_servers(sit: Situation) -> Effect | str:
    """The api_server_count knob's rule: more processes where the one front-end saturates."""
    signals = sit.observation.saturated.signals
    pct = signals.frontend_cpu_pct
    if sit.diagnosis.scheduling_kind != "frontend":
        said = (
            f"the busiest API-server process used {pct:.0f}% of a core"
            if pct is not None
            else "no reading of the API server's CPU"
        )
        return f"{said}: the front-end is not what binds"
    now = sit.engine.api_server_count
    more = min((c for c in _counts(sit.choices) if c > now), default=None)
    if more is None:
        return f"{now} API server(s) already, the most the search offers"
    # The front-end's CPU grows with the load it passes: the gain asked of it, in cores.
    wanted = (more / now - 1.0) * (pct or 100.0) / 100.0
    idle = signals.host_idle_cores
    if idle is not None and idle < IDLE_SHARE_NEEDED * wanted:
        return (
            f"{more} API servers would want about {wanted:.1f} more core(s), and the host "
            f"left {idle:.1f} idle at the knee: they would take the engine's"
        )
    busy = sit.estimate.busy_fraction if sit.estimate is not None else None
    headroom = MAX_RATIO if busy is None else min(MAX_RATIO, 1.0 / max(busy, 1 / MAX_RATIO))
    ratio = min(more / now, headroom)
    reason = (
        f"the one event loop of each API server is saturated ({pct or 100:.0f}% of a core): "
        f"{more} processes share its work"
    )
    if busy is not None:
        reason += f", up to the {1 - busy:.0%} of the time the {sit.observation.gpu.kind} waited"
    return Effect("to", ratio, reason, target=more)


def _counts(choices: tuple[object, ...]) -> list[int]:
    """The choices as process counts (null: vLLM's default, one)."""
    return [1 if c is None else c for c in choices if c is None or isinstance(c, int)]
