"""Numbers on the command line are checked as they are parsed: a rate, a duration or a port
that is not finite and in range is one ``kneepoint:`` line and exit 2 (they raised ValueError
or OverflowError from the load planner or the socket, and ``sweep --start-rps -1`` ran until
interrupted)."""

from __future__ import annotations

import pytest

from kneepoint.agent.cli import main

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
