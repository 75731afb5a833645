"""Read an arrival trace into records, with line-numbered errors: kneepoint's own JSONL (one
``TraceEntry`` per line) or a public layout (``kneepoint.config.trace_formats``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from kneepoint.config.errors import ConfigError, Problem
from kneepoint.config.trace_formats import read_public
from kneepoint.records import TraceArrivals, TraceEntry, TraceFormat, Workload


def read_trace(
    path: Path, class_names: Sequence[str] = (), layout: TraceFormat = "kneepoint"
) -> list[TraceEntry]:
    """Every entry of the trace; a ConfigError naming the line and field of the first problem."""
    if layout != "kneepoint":
        public = read_public(path, layout)
        if not public:
            raise ConfigError([Problem(str(path), None, None, "the trace has no entries")])
        return public
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError([Problem(str(path), None, None, f"cannot read: {exc.strerror}")]) from exc
    entries: list[TraceEntry] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entries.append(_entry(path, number, line, class_names))
    if not entries:
        raise ConfigError([Problem(str(path), None, None, "the trace has no entries")])
    return entries


def _entry(path: Path, number: int, line: str, class_names: Sequence[str]) -> TraceEntry:
    def fail(loc: tuple[str | int, ...] | None, message: str) -> ConfigError:
        return ConfigError([Problem(str(path), number, loc, message)])

    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise fail(None, f"not JSON: {exc.msg} (column {exc.colno})") from exc
    try:
        entry = TraceEntry.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"]) or None
        raise fail(loc, first["msg"][0].lower() + first["msg"][1:]) from exc
    if class_names and entry.traffic_class is not None and entry.traffic_class not in class_names:
        known = ", ".join(class_names)
        raise fail(("traffic_class",), f"no class {entry.traffic_class!r} (classes: {known})")
    return entry


def workload_trace(workload: Workload) -> tuple[TraceEntry, ...]:
    """The trace a workload replays (empty unless its arrivals are a trace)."""
    arrival = workload.arrival
    if not isinstance(arrival, TraceArrivals):
        return ()
    return tuple(read_trace(arrival.path, workload.class_names(), arrival.format))
