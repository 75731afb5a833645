"""Structured logging, configured once per process by the CLI.

Library code only ever does ``structlog.get_logger(__name__).info("event", key=value)``.
Events go to stderr, readable on a terminal and as plain timestamped lines when stderr is not a
terminal (the same "HH:MM:SSZ text" lines as the run's progress: a raw JSON warning in the
middle of a plain log read as a glitch), and to a JSON-lines file, the run's machine-readable
record (``events.jsonl``).
Every event has secrets taken out first (``kneepoint.probes.runtime.redaction``), on the
console and in the file alike.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import optuna
import structlog

from kneepoint.config import ConfigError, Problem
from kneepoint.probes.runtime.redaction import redact_all

_MARK = "_kneepoint_handler"


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        _redacted,
    ]


def _redacted(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """The event with every secret in it replaced (last: tracebacks are text by then)."""
    return {key: redact_all(value) for key, value in event.items()}


def _plain(_: Any, __: str, event: dict[str, Any]) -> str:
    """One event as a plain line: its UTC time, level, name and fields."""
    stamp = str(event.pop("timestamp", ""))[11:19]
    level, name = event.pop("level", "info"), event.pop("event", "")
    event.pop("logger", None)
    fields = " ".join(f"{key}={value}" for key, value in event.items())
    return f"{stamp}Z {level}: {name} {fields}".rstrip()


def _handler(stream_or_path: Any, renderer: Any) -> logging.Handler:
    handler: logging.Handler
    if isinstance(stream_or_path, Path):
        stream_or_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(stream_or_path, encoding="utf-8")
    else:
        handler = logging.StreamHandler(stream_or_path)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_shared_processors(),
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    setattr(handler, _MARK, True)
    return handler


def configure_logging(
    level: str = "info", log_file: Path | None = None, *, flag: str | None = None
) -> None:
    """Route structlog and stdlib logging to stderr (and ``log_file``); safe to call again.
    ``flag``: the option that named ``log_file``; a file the OS will not open is then bad
    input naming it, as a check could not foresee (root passes every access test)."""
    console: Any = _plain
    if sys.stderr.isatty():
        console = structlog.dev.ConsoleRenderer(colors=True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    on_console = _handler(sys.stderr, console)
    on_console.setLevel(level.upper())
    root.addHandler(on_console)
    levels = [logging.getLevelName(level.upper())]
    if log_file is not None:
        # The file is the unattended run's record: it keeps progress events whatever the
        # console shows.
        try:
            in_file = _handler(log_file, structlog.processors.JSONRenderer())
        except OSError as exc:
            if flag is None:
                raise
            problem = Problem(f"{flag} {log_file}", None, (), exc.strerror or str(exc))
            raise ConfigError([problem]) from exc
        in_file.setLevel(min(logging.INFO, levels[0]))
        root.addHandler(in_file)
        levels.append(in_file.level)
    root.setLevel(min(levels))
    for noisy in ("httpx", "httpcore", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Optuna prints through a handler of its own; send its records through ours instead.
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    structlog.configure(
        processors=[*_shared_processors(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
