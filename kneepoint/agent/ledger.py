"""The run's ledger: an append-only JSON-lines file of typed events, each flushed and fsynced
before the agent acts on it, so nothing decided is lost when the agent or the machine dies.

A line cut short by a crash mid-write is the only damage a crash can do; reading skips it (and
rewrites the file without it before appending, so the next event starts on a line of its own).
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
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise LedgerError(f"{self.path}:{number}: {where}: {first['msg']}") from exc
        return events

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

    def _rewrite(self, data: bytes) -> None:
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
