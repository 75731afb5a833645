"""Bounds on what a study may ask a load point to hold: a point plans every request it sends
(prompt token ids included) before it sends the first, so a study past them must be refused
by `config check`, not die of MemoryError in `tune`."""

from __future__ import annotations

MAX_RATE_RPS = 100_000.0
"""Far past any one server: the fastest recorded here served ~70 req/s (tiny Llama on 2 CPU
cores) and Llama-8B on an H200 ~45 (tests/fixtures/real)."""
MAX_POINT_SECONDS = 3_600.0
"""An hour of arrivals in one load point; the recordings' points send 7-30 s."""
MAX_POINT_REQUESTS = 2_000_000
"""Requests one point may plan: about 2 GB of planned prompts at chat's ~350 tokens each."""
MAX_SEARCH_RPS = 1e4
"""Where a search stops climbing, whatever passes: past any one server measured here."""
MAX_WAIT_SECONDS = 86_400.0
"""A day: the most a study may wait on one thing (a server's start, a request, a screen)."""
