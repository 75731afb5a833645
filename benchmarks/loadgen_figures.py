"""The load-generator capacity benchmark's figures: one request's timing on a tool's own
clock, a rate's step scored from its timings, the search over rates, and the final report.
Definitions are in benchmarks/loadgen_capacity.py's docstring."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from kneepoint.load.scoring import percentile

TRIM = 0.1
MIN_SENT = 0.95
ENDPOINT_BUSY = 0.8
GOAL_RPS, GOAL_OVERHEAD_MS = 1000.0, 2.0


@dataclass(frozen=True, slots=True)
class Timing:
    """One request on its tool's own clock (seconds): scheduled, sent, stream ended."""

    due_s: float
    sent_s: float
    end_s: float | None
    dispatched_s: float | None = None
    """GuideLLM only: when its first header byte was written."""


@dataclass(frozen=True, slots=True)
class Step:
    """One rate, measured."""

    rate: float
    sent: int
    planned: int
    failed: int
    lag_p99_ms: float
    lag_limit_ms: float
    overhead_ms: float
    """Median send -> end of stream, less the endpoint's handling time."""
    overhead_due_ms: float
    """The same from the scheduled time."""
    handling_ms: float
    dispatch_p99_ms: float | None = None
    achieved_rps: float = 0.0
    """Requests completed over the whole step, per second from the first scheduled send to
    the last stream's end: what the tool delivered of the offered rate."""
    cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """CPU used during the step, in cores: by other processes on the client's core and on the
    endpoint's, and by the endpoint itself."""

    @property
    def sustained(self) -> bool:
        enough = self.sent >= MIN_SENT * self.planned
        return enough and self.failed == 0 and self.lag_p99_ms < self.lag_limit_ms


@dataclass
class Search:
    steps: list[Step] = field(default_factory=list)
    best: Step | None = None
    failed: Step | None = None
    """The lowest rate above ``best`` that was not sustained (None: --max-rate was)."""


def window(timings: Sequence[Timing]) -> list[Timing]:
    """The requests scheduled in the middle of the run (as kneepoint's stable window)."""
    if not timings:
        return []
    first, last = min(t.due_s for t in timings), max(t.due_s for t in timings)
    low, high = first + (last - first) * TRIM, last - (last - first) * TRIM
    return [t for t in timings if low <= t.due_s <= high]


def score(rate: float, seconds: float, timings: Sequence[Timing], handling_ms: float,
          args: argparse.Namespace) -> Step:  # fmt: skip
    kept = window(timings)
    ends = [(t, t.end_s) for t in kept if t.end_s is not None]
    lags = [(t.sent_s - t.due_s) * 1000 for t in kept]
    dispatch = [(t.dispatched_s - t.due_s) * 1000 for t in kept if t.dispatched_s is not None]
    from_sent = [(end - t.sent_s) * 1000 - handling_ms for t, end in ends]
    from_due = [(end - t.due_s) * 1000 - handling_ms for t, end in ends]
    done = [t.end_s for t in timings if t.end_s is not None]
    span = max(done) - min(t.due_s for t in timings) if done else 0.0
    return Step(
        rate=rate,
        sent=len(timings),
        planned=round(rate * seconds),
        failed=len(kept) - len(ends),
        lag_p99_ms=percentile(lags, 99) if lags else float("inf"),
        lag_limit_ms=args.lag_limit_ms,
        overhead_ms=statistics.median(from_sent) if from_sent else float("inf"),
        overhead_due_ms=statistics.median(from_due) if from_due else float("inf"),
        handling_ms=handling_ms,
        dispatch_p99_ms=percentile(dispatch, 99) if dispatch else None,
        achieved_rps=len(done) / span if span > 0 else 0.0,
    )


def log_step(tool: str, s: Step) -> None:
    verdict = "sustained" if s.sustained else "not sustained"
    own = f" (own dispatch p99 {s.dispatch_p99_ms:.2f})" if s.dispatch_p99_ms is not None else ""
    cpu = f"others' CPU {s.cpu[0]:.0%}/{s.cpu[1]:.0%}, endpoint {s.cpu[2]:.0%}"
    print(f"  {tool:<9} {s.rate:8.1f} req/s: lag p99 {s.lag_p99_ms:7.2f} ms{own}, sent "
          f"{s.sent}/{s.planned}, failed {s.failed}, overhead {s.overhead_ms:.2f} ms, {cpu} "
          f"-> {verdict}", flush=True)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Figures:
    """One tool's figures: its median search (the lower of the middle two, so a rate that
    was measured), medians of the rest over the repeats, and every repeat's rate."""

    rate: str
    """The highest sustained rate, ">=" where the limit may lie higher."""
    value: float
    """The same as a number; the lowest rate tried where none was sustained."""
    runs: list[str]
    lag_ms: float
    dispatch_ms: float | None
    start_lag_ms: float
    """p99 send lag at the start rate, where both tools are far from any limit."""
    overhead_ms: float
    overhead_due_ms: float
    handling_ms: float

    @classmethod
    def of(cls, searches: Sequence[Search]) -> Figures:
        ordered = sorted(searches, key=lambda s: s.best.rate if s.best else 0.0)
        middle = ordered[(len(ordered) - 1) // 2]
        starts = [s.steps[0] for s in searches]
        best = middle.best
        return cls(
            rate=_rate(middle),
            value=best.rate if best else min(step.rate for step in middle.steps),
            runs=[_rate(s) for s in searches],
            lag_ms=best.lag_p99_ms if best else float("nan"),
            dispatch_ms=best.dispatch_p99_ms if best else None,
            start_lag_ms=statistics.median(s.lag_p99_ms for s in starts),
            overhead_ms=statistics.median(s.overhead_ms for s in starts),
            overhead_due_ms=statistics.median(s.overhead_due_ms for s in starts),
            handling_ms=statistics.median(s.handling_ms for s in starts),
        )

    def row(self, name: str, release: str) -> str:
        spread = f"  runs: {', '.join(self.runs)}" if len(self.runs) > 1 else ""
        own = f"  [own dispatch delay p99 {self.dispatch_ms:.2f} ms]" if self.dispatch_ms else ""
        there = f"{'-':>10}" if math.isnan(self.lag_ms) else f"{self.lag_ms:>7.2f} ms"
        lags = f"{there} {self.start_lag_ms:>11.2f} ms"
        overheads = f"{self.overhead_ms:>8.2f} ms {self.overhead_due_ms:>9.2f} ms"
        return f"{name:<10} {release:<8} {self.rate:>22} {lags} {overheads}{own}{spread}"


def _rate(search: Search) -> str:
    """A search's result: "< lowest tried" where nothing was sustained; ">=" where --max-rate
    was sustained, or where the endpoint was near a whole core at the rate that failed."""
    if search.best is None:
        return f"< {min(step.rate for step in search.steps):g} req/s"
    failed = search.failed
    higher = failed is None or failed.cpu[2] >= ENDPOINT_BUSY
    return f"{'>= ' if higher else ''}{search.best.rate:,.0f} req/s"


def report(results: dict[str, list[Search]], args: argparse.Namespace,
           releases: dict[str, str]) -> None:  # fmt: skip
    start = f"(at {args.start_rate:g}/s)"
    print(f"\n{'tool':<10} {'version':<8} {'highest sustained rate':>22} {'p99 lag':>10} "
          f"{start:>14} {'overhead':>11} {'(from due)':>12}")  # fmt: skip
    figures = {name: Figures.of(searches) for name, searches in results.items()}
    for name, f in figures.items():
        print(f.row(name, releases[name]))
    ours = figures["kneepoint"]
    print(f"(sustained: p99 send lag < {args.lag_limit_ms:g} ms, nothing failed; overhead: "
          f"median send -> end of stream less the endpoint's own {ours.handling_ms * 1000:.0f} "
          f"us, at {args.start_rate:g} req/s; {args.arrivals} arrivals, {args.prompt_tokens} "
          f"prompt / {args.output_tokens} output tokens, {args.seconds:g} s and at least "
          f"{args.min_requests} requests a rate)")  # fmt: skip
    print("(stamps: kneepoint send = RequestRecord.sent_s, before a connection is taken; end = "
          "[DONE] read)")  # fmt: skip
    ahead = "not measured"
    if (theirs := figures.get("GuideLLM")) is not None:
        print("(stamps: GuideLLM send = timings.resolve_start, before it builds the request; "
              "end = timings.request_end, after it closes the response; own dispatch delay "
              "= request_start (first header byte written) - targeted_start)")  # fmt: skip
        rate_ratio = ours.value / theirs.value
        cost_ratio = theirs.overhead_ms / ours.overhead_ms
        more = "more than " if theirs.rate.startswith("<") or ours.rate.startswith(">") else ""
        print(f"ratio kneepoint / GuideLLM: {more}{rate_ratio:.1f}x the sustained rate, 1/"
              f"{cost_ratio:.1f} the overhead (GuideLLM: {args.guidellm_workers} worker "
              "processes, on the same core)")  # fmt: skip
        ahead = "met" if rate_ratio > 1 and cost_ratio > 1 else "NOT met"
    rate_ok = "met" if ours.value >= GOAL_RPS else "NOT met"
    if ours.rate.startswith(">") and ours.value < GOAL_RPS:
        rate_ok = "not shown (--max-rate is below it)"
    cost_ok = "met" if ours.overhead_ms < GOAL_OVERHEAD_MS else "NOT met"
    print(f"goal: >= {GOAL_RPS:,.0f} req/s: {rate_ok}; overhead < {GOAL_OVERHEAD_MS:g} ms: "
          f"{cost_ok}; ahead of GuideLLM: {ahead}")  # fmt: skip
    command = ["benchmarks/loadgen_capacity.py", *sys.argv[1:]]
    print("reproduce: .venv/bin/python " + " ".join(command))


def report_loose(loose: dict[str, list[Search]], offered: dict[str, list[Step]],
                 args: argparse.Namespace) -> None:  # fmt: skip
    """The looser criterion both tools can meet, and one high rate offered to both."""
    print(f"\n{'tool':<10} {f'highest rate, p99 lag < {args.loose_lag_limit_ms:g} ms':>32} "
          f"{f'at {args.offered_rps:,.0f} req/s offered: achieved':>40} {'sent':>13} "
          f"{'failed':>7} {'lag p99':>11}")  # fmt: skip
    for name, searches in loose.items():
        rate = Figures.of(searches).rate
        step = sorted(offered[name], key=lambda s: s.achieved_rps)[(len(offered[name]) - 1) // 2]
        share = step.achieved_rps / step.rate
        print(
            f"{name:<10} {rate:>32} {step.achieved_rps:>25,.0f} req/s ({share:>5.0%}) "
            f"{step.sent:>6}/{step.planned:<6} {step.failed:>7} {step.lag_p99_ms:>8.1f} ms"
        )
    print(f"(achieved: requests completed over the step, from the first scheduled send to the "
          f"last stream's end, {args.seconds:g} s of arrivals; the lower of the middle two "
          "over repeats)")  # fmt: skip
