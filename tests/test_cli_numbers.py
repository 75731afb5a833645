"""Numbers on the command line are checked as they are parsed: a rate, a duration or a port
that is not finite and in range is one ``kneepoint:`` line and exit 2 (they raised ValueError
or OverflowError from the load planner or the socket, and ``sweep --start-rps -1`` ran until
interrupted)."""

from __future__ import annotations

import socket

import pytest

from kneepoint.cli.main import main
from kneepoint.probes.server.server_failure import address_in_use

from .conftest import QUICKSTART

CASES = [
    *((["diagnose", str(QUICKSTART), "--knee-rps", v], "--knee-rps") for v in
      ("-5", "0", "nan", "inf", "1e9", "abc")),
    (["sweep", str(QUICKSTART), "--start-rps", "-1"], "--start-rps"),
    (["sweep", str(QUICKSTART), "--seconds", "nan"], "--seconds"),
    (["sim", "serve", "--gpu", "h100", "--model", "llama-3.2-1b", "--port", "99999"], "--port"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "named"), CASES, ids=[" ".join(a[-2:]) for a, _ in CASES])
def test_an_out_of_range_number_is_one_line_and_exit_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kneepoint: argument {named}: "), lines


def test_sim_serve_on_a_port_in_use_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It started, then ended with uvicorn's log line and exit 3 (issue "Step 13"); the line
    keeps the words the launcher's port-race retry looks for."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["sim", "serve", "--gpu", "h100", "--model", "llama-3.2-1b", "--port",
                     str(port)])  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and lines == [f"kneepoint: --port 127.0.0.1:{port}: Address already in use"]
    assert address_in_use(lines[0])
