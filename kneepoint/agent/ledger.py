"""The run's ledger: an append-only JSON-lines file of typed events, each flushed and fsynced
before the agent acts on it, so nothing decided is lost when the agent or the machine dies.

A line cut short by a crash mid-write is the only damage a crash can do; reading skips it (and
rewrites the file without it before appending, so the next event starts on a line of its own).
Any other bad line (an editor's slip, a disk error) stops the reading with its line number and
the way forward: ``repair`` keeps the valid events before it and moves the rest aside, whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import structlog
from pydantic import TypeAdapter, ValidationError

from kneepoint.records.ledger import Event

log = structlog.get_logger(__name__)
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class LedgerError(ValueError):
    """A ledger line that is whole but not a known event: the file is not ours, or damaged."""

    def __init__(self, path: Path, line: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: {detail}")
        self.path, self.line, self.detail = path, line, detail


REPAIR_HINT = "kneepoint tune --resume {run} --repair-ledger"


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Event]:
        """Every whole event, in order; a torn last line is dropped from the file."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        whole, torn = lines[:-1], lines[-1]
        if torn.strip():
            log.warning("ledger.torn_line_dropped", path=str(self.path), chars=len(torn))
            self._rewrite(b"".join(line + b"\n" for line in whole))
        events: list[Event] = []
        for number, line in enumerate(whole, start=1):
            if not line.strip():
                continue
            try:
                events.append(_EVENT.validate_json(line))
            except ValidationError as exc:
                hint = REPAIR_HINT.format(run=self.path.parent)
                raise LedgerError(
                    self.path, number, f"not a ledger event ({_first_problem(exc)}); to resume "
                    f"from the {len(events)} valid events before it: {hint}",
                ) from exc  # fmt: skip
        return events

    def repair(self) -> tuple[int, Path | None]:
        """Keep the valid events before the first bad line; move that line and everything
        after it, unchanged, to a file beside the ledger. Returns (events kept, where the
        rest went; None when there was nothing to move)."""
        lines = self.path.read_bytes().splitlines(keepends=True)
        kept = 0
        for line in lines:
            if line.strip():
                try:
                    _EVENT.validate_json(line)
                except ValidationError:
                    break
            kept += 1
        rest = lines[kept:]
        if not rest:
            return sum(bool(line.strip()) for line in lines), None
        aside = self.path.with_name(f"{self.path.name}.rejected-line{kept + 1}")
        aside.write_bytes(b"".join(rest))
        good = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines[:kept])
        self._rewrite(good)
        log.warning("ledger.repaired", path=str(self.path), kept_lines=kept, moved_to=str(aside))
        return sum(bool(line.strip()) for line in lines[:kept]), aside

    def append(self, event: Event) -> None:
        """Write one event and make it durable before returning."""
        line = event.model_dump_json() + "\n"
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


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
