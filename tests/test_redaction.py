"""Secrets never reach what a run keeps: log events (console and file), failure causes taken
from a server's log, the ledger, and the report built from it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import structlog

from kneepoint.probes.runtime import configure_logging, redaction
from kneepoint.probes.runtime.redaction import REDACTED, redact, remember_secret
from kneepoint.probes.server.process import ServerProcess
from kneepoint.probes.server.server_failure import classify
from kneepoint.records.ledger import Finished, Screened
from kneepoint.report import write_report
from kneepoint.run.folder import RunFolder
from kneepoint.run.ledger import Ledger

from .conftest import TuneRun

KEY = "kp-test-key-8d1f3a"
HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"
SERVER_LOG = (
    "INFO non-default args: {'model': 'm', 'api_key': ['abc123']}\n"
    "INFO launched: vllm serve m --api-key abc123 --port 8000\n"
    'INFO  127.0.0.1 - "POST /v1/completions" Authorization: Bearer tok-0f9e8d7c\n'
    f"ERROR Engine core initialization failed: --api-key=abc123 token {HF}\n"
)
LEAKS = ("abc123", "tok-0f9e8d7c", HF, KEY)


@pytest.fixture(autouse=True)
def _forget_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redaction, "_remembered", set())


def _clean(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text, leak
    assert REDACTED in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm serve m --api-key abc123 --port 1", f"vllm serve m --api-key {REDACTED} --port 1"),
        ("--api-key=abc123", f"--api-key={REDACTED}"),
        ("Authorization: Bearer abc.123", f"Authorization: Bearer {REDACTED}"),
        ("{'api_key': ['abc123']}", f"{{'api_key': ['{REDACTED}']}}"),
        ("{'api_key': None}", "{'api_key': None}"),
        (f"token {HF}.", f"token {REDACTED}."),
        ("sk-proj-abcdefghijklmnop1234", REDACTED),
        ('{"detail": "Bearer abc\\"x"}', f'{{"detail": "Bearer {REDACTED}\\"x"}}'),
        ("nothing secret: max_num_seqs 128", "nothing secret: max_num_seqs 128"),
    ],
)
def test_secret_shapes_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_known_values_are_redacted_wherever_they_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "s3cr3t-value")
    monkeypatch.setenv("SHORT_KEY", "1")  # too short to search for: would blank every "1"
    remember_secret(KEY)  # a key read from a variable whose name does not look secret
    assert redact(f"a s3cr3t-value b {KEY}c 1") == f"a {REDACTED} b {REDACTED}c 1"


def test_a_failure_cause_from_the_server_log_keeps_no_secret() -> None:
    failure = classify(SERVER_LOG, 1)
    assert failure.kind == "crashed"
    _clean(failure.message + "\n".join(failure.log_tail))
    assert "Engine core initialization failed" in failure.message


def test_log_events_keep_no_secret_on_the_console_or_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    log_file = tmp_path / "events.jsonl"
    configure_logging(level="info", log_file=log_file)
    try:
        structlog.get_logger("kneepoint.test").info(
            "server.failed", cause=SERVER_LOG, headers={"Authorization": f"Bearer {KEY}"},
            argv=["vllm", "serve", "--api-key", "abc123"],
        )  # fmt: skip
        try:
            raise RuntimeError(f"refused with key {KEY}")
        except RuntimeError:
            structlog.get_logger("kneepoint.test").exception("crashed")
    finally:
        console = capsys.readouterr().err
        configure_logging()
    _clean(console)
    _clean(log_file.read_text())
    assert "server.failed" in console and "crashed" in log_file.read_text()


def test_the_ledger_and_the_report_keep_no_secret(fp8_run: TuneRun, tmp_path: Path) -> None:
    """A run whose trial screening and whose stop carry a server's log as their cause:
    written through the ledger, the ledger and both reports hold no secret from that log."""
    folder = tmp_path / fp8_run.folder.name
    shutil.copytree(fp8_run.folder, folder)
    events = Ledger(folder / "ledger.jsonl").read()
    (folder / "ledger.jsonl").write_text("")
    ledger, cause = Ledger(folder / "ledger.jsonl"), classify(SERVER_LOG, 1)
    for event in events:
        written = event
        if isinstance(event, Screened):
            outcome = event.outcome.model_copy(update={"detail": str(cause)})
            written = event.model_copy(update={"outcome": outcome, "reason": str(cause)})
        if isinstance(event, Finished):  # the report's summary says why the run stopped
            written = event.model_copy(update={"detail": str(cause)})
        ledger.append(written)
    kept = (folder / "ledger.jsonl").read_text()
    assert "Engine core initialization failed" in kept
    for line in kept.splitlines():
        json.loads(line)  # still JSON, line by line
    markdown, html = write_report(RunFolder.existing(folder))
    for text in (kept, markdown.read_text(), html.read_text()):
        for leak in LEAKS:
            assert leak not in text, leak
    assert "Engine core initialization failed" in markdown.read_text()


def test_a_launched_servers_own_log_keeps_no_secret(tmp_path: Path) -> None:
    """server.log held whatever the server printed, its argument dump with the key among it
    (issue "Step 13"); it is redacted when the server stops."""
    printer = tmp_path / "server.py"
    printer.write_text(f"import sys\nsys.stdout.write({SERVER_LOG!r})\nsys.stdout.flush()\n")
    log = tmp_path / "server.log"
    with ServerProcess([sys.executable, str(printer)], log) as server:
        server.proc.wait(timeout=30)
    _clean(log.read_text())
    assert "Engine core initialization failed" in log.read_text()
