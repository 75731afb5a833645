"""Structured logging: JSON lines to a file for unattended runs; library code never prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from kneepoint.cli.main import main
from kneepoint.probes.runtime import configure_logging

from .conftest import QUICKSTART


def test_events_are_json_lines_in_the_log_file(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "run.jsonl"
    configure_logging(level="info", log_file=log_file)
    structlog.get_logger("kneepoint.test").info("trial.finished", trial=7, capacity_rps=12.4)
    event = json.loads(log_file.read_text().splitlines()[-1])
    assert event["event"] == "trial.finished"
    assert event["trial"] == 7 and event["capacity_rps"] == 12.4
    assert event["level"] == "info" and "timestamp" in event


def test_reconfiguring_does_not_duplicate_events(tmp_path: Path) -> None:
    log_file = tmp_path / "run.jsonl"
    for _ in range(3):
        configure_logging(level="info", log_file=log_file)
    structlog.get_logger("kneepoint.test").info("once")
    assert sum('"once"' in line for line in log_file.read_text().splitlines()) == 1


def test_config_check_logs_an_event_and_prints_only_the_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_file = tmp_path / "run.jsonl"
    args = ["--log-level", "info", "--log-file", str(log_file), "config", "check"]
    assert main([*args, str(QUICKSTART)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {QUICKSTART}: valid")
    events = [json.loads(line)["event"] for line in log_file.read_text().splitlines()]
    assert "config.checked" in events
