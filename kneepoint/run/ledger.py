"""The run's ledger: an append-only JSON-lines file of typed events, each flushed and fsynced
before the agent acts on it, so nothing decided is lost when the agent or the machine dies.

A line cut short by a crash mid-write is the only damage a crash can do; reading skips it, and
the agent drops it from the file before appending (``recover``), so the next event starts on a
line of its own. Any other bad line (an editor's slip, a disk error, an event that cannot
follow the ones before it) stops the reading with its line number and the way forward:
``repair`` keeps the events before it and moves the rest aside, whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import TypeAdapter, ValidationError

from kneepoint.config import ConfigError, Problem, first_problem
from kneepoint.probes.runtime import redact
from kneepoint.records import Event
from kneepoint.run.state import RunState, StateError

log = structlog.get_logger(__name__)
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class LedgerError(ConfigError, ValueError):
    """A ledger line that is whole but not a known event: the file is not ours, or damaged
    (the user named the run: bad input, said by line)."""

    def __init__(self, path: Path, line: int, detail: str) -> None:
        super().__init__([Problem(str(path), line, (), detail)])
        self.path, self.line, self.detail = path, line, detail


REPAIR_HINT = "kneepoint tune --resume {run} --repair-ledger"


@dataclass(frozen=True, slots=True)
class _Scan:
    """The ledger's lines read in order until the first one that is not the next event."""

    events: list[Event]
    good_lines: int
    """Lines before the first bad one (blank lines included)."""
    problem: str | None
    """What is wrong with line ``good_lines + 1`` (None: every line is good)."""


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Event]:
        """Every whole event, in order, each checked to follow the ones before it; a torn
        last line (a write cut short) is left out. Reading changes nothing, so a report can
        read the ledger of a run that is still writing it."""
        scan = self._scan(self._whole_lines())
        if scan.problem is not None:
            hint = REPAIR_HINT.format(run=self.path.parent)
            raise LedgerError(
                self.path,
                scan.good_lines + 1,
                f"{scan.problem}; to resume from the {len(scan.events)} events before it: {hint}",
            )
        return scan.events

    def recover(self) -> list[Event]:
        """As ``read``, for the agent about to append: a torn last line is dropped from the
        file too, so the next event starts on a line of its own."""
        if self.path.exists():
            data = self.path.read_bytes()
            torn = data.split(b"\n")[-1]
            if torn.strip():
                log.warning("ledger.torn_line_dropped", path=str(self.path), chars=len(torn))
                self._rewrite(data[: len(data) - len(torn)])
        return self.read()

    def repair(self) -> tuple[int, Path | None]:
        """Keep the events before the first bad line (one that is not an event, or not one
        that can follow the others); move that line and everything after it, unchanged, to a
        file beside the ledger. Returns (events kept, where the rest went; None when there
        was nothing to move)."""
        lines = self.path.read_bytes().splitlines(keepends=True)
        scan = self._scan(lines)
        rest = lines[scan.good_lines :]
        if not rest:
            return len(scan.events), None
        aside = self.path.with_name(f"{self.path.name}.rejected-line{scan.good_lines + 1}")
        with aside.open("xb") as handle:  # never over an earlier repair's file
            handle.write(b"".join(rest))
            handle.flush()
            os.fsync(handle.fileno())
        kept = lines[: scan.good_lines]
        self._rewrite(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in kept))
        log.warning(
            "ledger.repaired",
            path=str(self.path),
            kept_events=len(scan.events),
            moved_to=str(aside),
            problem=scan.problem,
        )
        return len(scan.events), aside

    def _whole_lines(self) -> list[bytes]:
        if not self.path.exists():
            return []
        lines = self.path.read_bytes().split(b"\n")
        return [line + b"\n" for line in lines[:-1]]  # the last piece has no newline: torn

    def _scan(self, lines: Sequence[bytes]) -> _Scan:
        events: list[Event] = []
        state = RunState()
        for number, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                event = _EVENT.validate_json(line)
                state.apply(event)
            except ValidationError as exc:
                return _Scan(events, number, f"not a ledger event ({first_problem(exc)})")
            except StateError as exc:
                return _Scan(events, number, f"out of order: {exc}")
            events.append(event)
        return _Scan(events, len(lines), None)

    def append(self, event: Event) -> None:
        """Write one event and make it durable before returning (secrets taken out: the
        ledger keeps text from servers and the environment)."""
        line = redact(event.model_dump_json()) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        log.debug("ledger.appended", kind=event.event)

    def extend(self, events: Sequence[Event]) -> None:
        for event in events:
            self.append(event)

    def is_empty(self) -> bool:
        return not self.path.exists() or not self.path.read_bytes().strip()

    def _rewrite(self, data: bytes) -> None:
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
