"""The public trace layouts kneepoint replays, each read into ``TraceEntry`` records, the line
and column of a bad row named:

- Mooncake's JSONL (FAST '25; github.com/kvcache-ai/Mooncake, ``mooncake_trace.jsonl``):
  ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``: the prompt's
  512-token blocks by content hash, so requests that start with the same ids share those
  blocks (what a prefix cache serves).
- The Azure LLM inference trace CSV (github.com/Azure/AzurePublicDataset,
  ``AzureLLMInferenceTrace_conv.csv`` and ``_code.csv``): ``TIMESTAMP`` a date and time,
  ``ContextTokens``, ``GeneratedTokens``.
- BurstGPT's CSV (github.com/HPMLL/BurstGPT): ``Timestamp`` in s from the log's start,
  ``Request tokens``, ``Response tokens`` (and ``Model``, ``Total tokens``, ``Log Type``,
  read past). BurstGPT logs a failed request with 0 response tokens: such a row asked the
  server for nothing to replay and is left out.

Times become seconds from the trace's first request; the replay scales them to the offered
rate (``kneepoint.load.plan``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kneepoint.config.errors import ConfigError, Problem
from kneepoint.records import TraceEntry, TraceFormat

MOONCAKE_BLOCK_TOKENS = 512
"""Mooncake's ``hash_ids`` name 512-token blocks (the trace's README)."""
COLUMNS: dict[TraceFormat, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


class _Row:
    """One row being read: its line, and a ConfigError that names it."""

    def __init__(self, path: Path, line: int, fields: Mapping[str, Any]) -> None:
        self.path, self.line, self.fields = path, line, fields

    def fail(self, column: str | None, message: str) -> ConfigError:
        loc = (column,) if column is not None else None
        return ConfigError([Problem(str(self.path), self.line, loc, message)])

    def number(self, column: str) -> float:
        value = self.fields.get(column)
        if value is None or value == "":
            raise self.fail(column, "missing")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise self.fail(column, f"not a number: {value!r}") from None

    def tokens(self, column: str) -> int:
        value = self.number(column)
        if value != int(value):
            raise self.fail(column, f"not a whole number of tokens: {value:g}")
        return int(value)

    def entry(self, **fields: Any) -> TraceEntry:
        try:
            return TraceEntry.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            column = str(first["loc"][0]) if first["loc"] else None
            raise self.fail(column, first["msg"][0].lower() + first["msg"][1:]) from exc


def read_public(path: Path, layout: TraceFormat) -> list[TraceEntry]:
    """Every request of a public trace, times from its first (possibly none: the caller
    says so)."""
    if layout == "mooncake":
        return _shifted(_mooncake(row) for row in _json_rows(path))
    if layout == "azure":
        return _shifted(_azure(row) for row in _csv_rows(path, COLUMNS["azure"]))
    found = (_burstgpt(row) for row in _csv_rows(path, COLUMNS["burstgpt"]))
    return _shifted(e for e in found if e is not None)


def _shifted(entries: Iterator[tuple[float, TraceEntry]]) -> list[TraceEntry]:
    read = list(entries)
    start = min((t for t, _ in read), default=0.0)
    return [e.model_copy(update={"timestamp_s": t - start}) for t, e in read]


def _mooncake(row: _Row) -> tuple[float, TraceEntry]:
    ids = row.fields.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise row.fail("hash_ids", "not a list of block ids (whole numbers)")
    entry = row.entry(
        timestamp_s=0.0,
        input_tokens=row.tokens("input_length"),
        output_tokens=row.tokens("output_length"),
        blocks=tuple(ids),
        block_tokens=MOONCAKE_BLOCK_TOKENS,
    )
    return row.number("timestamp") / 1000.0, entry


def _azure(row: _Row) -> tuple[float, TraceEntry]:
    stamp = row.fields.get("TIMESTAMP") or ""
    try:
        at = datetime.fromisoformat(stamp.strip())
    except ValueError:
        raise row.fail("TIMESTAMP", f"not a date and time: {stamp!r}") from None
    tokens = row.tokens("ContextTokens"), row.tokens("GeneratedTokens")
    entry = row.entry(timestamp_s=0.0, input_tokens=tokens[0], output_tokens=tokens[1])
    return at.timestamp(), entry


def _burstgpt(row: _Row) -> tuple[float, TraceEntry] | None:
    response = row.tokens("Response tokens")
    if response == 0:
        return None  # a failed request in the log: nothing was generated
    entry = row.entry(
        timestamp_s=0.0, input_tokens=row.tokens("Request tokens"), output_tokens=response
    )
    return row.number("Timestamp"), entry


def _opened(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError([Problem(str(path), None, None, f"cannot read: {why}")]) from exc


def _json_rows(path: Path) -> Iterator[_Row]:
    for number, line in enumerate(_opened(path), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            message = f"not JSON: {exc.msg} (column {exc.colno})"
            raise ConfigError([Problem(str(path), number, None, message)]) from exc
        if not isinstance(data, dict):
            raise ConfigError([Problem(str(path), number, None, "not a JSON object")])
        yield _Row(path, number, data)


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[_Row]:
    reader = csv.DictReader(_opened(path))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [name for name in required if name not in header]
    if missing:
        message = f"no column {missing[0]!r} (this layout needs {', '.join(required)})"
        raise ConfigError([Problem(str(path), 1, None, message)])
    reader.fieldnames = header
    for fields in reader:
        yield _Row(path, reader.line_num, _stripped(fields))


def _stripped(fields: Mapping[str | None, Any]) -> dict[str, Any]:
    return {k: v.strip() if isinstance(v, str) else v for k, v in fields.items() if k}
