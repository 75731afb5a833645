"""The server answering is checked against the study before any load: ``diagnose --url
--model llama-3.1-70b`` against an 8B server once reported on a 70B, and a study saying
max_model_len 8192 on a server running 131072 was never told (issue: Step 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.probes.backends import LaunchBackend, RunningServer
from kneepoint.probes.server.identity import ModelCard, model_cards
from kneepoint.probes.server.server_failure import ServerFailedError, classify
from kneepoint.records.engine import EngineConfig
from tests.support.hostile_server import HostileServer

EIGHT_B = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("model", "same"),
    [(EIGHT_B, True), ("/models/Llama-3.1-8B-Instruct/", True), ("llama-3.1-8b", True),
     ("m", True), ("meta-llama/Llama-3.1-70B-Instruct", False), ("llama-3.1-70b", False),
     ("Qwen/Qwen2.5-14B-Instruct", False)],
)  # fmt: skip
def test_a_card_serves_its_model_under_any_of_its_names(model: str, same: bool) -> None:
    assert ModelCard("m", EIGHT_B, 131072).serves(model) is same


def test_an_alias_does_not_vouch_for_what_the_root_names() -> None:
    aliased = ModelCard("llama", EIGHT_B)
    assert not aliased.serves("meta-llama/Llama-3.1-70B-Instruct")
    assert aliased.serves("llama") and aliased.serves("/models/Llama-3.1-8B-Instruct")
    assert ModelCard("llama-3.1-8b").serves(EIGHT_B)  # no root: the alias is all it says


def test_a_card_of_the_wrong_types_keeps_what_it_can() -> None:
    body = {
        "data": [
            {"id": "a", "root": 5, "max_model_len": True},
            {"id": "b", "root": "x", "max_model_len": 64},
        ]
    }
    assert model_cards(body) == [ModelCard("a"), ModelCard("b", "x", 64)]


def test_an_attached_server_of_another_model_is_refused(tmp_path: Path) -> None:
    seventy = EngineConfig(model="meta-llama/Llama-3.1-70B-Instruct")
    with (
        HostileServer("nan_metrics") as url,
        pytest.raises(ServerFailedError) as info,
        RunningServer(url).serve(seventy, tmp_path),
    ):
        pass
    assert info.value.failure.kind == "wrong_server"
    assert f"it serves 'm' (loaded from {EIGHT_B}), the study's model is" in str(info.value)


def test_an_attached_server_at_another_max_model_len_is_refused(tmp_path: Path) -> None:
    short = EngineConfig(model=EIGHT_B, max_model_len=8192)
    with (
        HostileServer("nan_metrics") as url,
        pytest.raises(ServerFailedError) as info,
        RunningServer(url).serve(short, tmp_path),
    ):
        pass
    assert "runs max_model_len 131,072, the study says 8,192" in str(info.value)
    other_path = EngineConfig(model="/m/llama-3.1-8b")
    with (
        HostileServer("nan_metrics") as url,
        RunningServer(url).serve(other_path, tmp_path) as seen,
    ):
        assert seen.served_model == "m"


def test_diagnose_url_of_another_model_is_one_line_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with HostileServer("nan_metrics") as url:
        argv = ["diagnose", "--url", url, "--gpu", "h100-sxm", "--model", "llama-3.1-70b",
                "--runs-dir", str(tmp_path)]  # fmt: skip
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"kneepoint: wrong server at {url}: it serves")
    assert "name the model it serves (--model)" in err[0]
    assert not list(tmp_path.glob("*/sweep.json"))


def test_a_server_that_exits_before_it_answers_did_not_start(tmp_path: Path) -> None:
    exits = LaunchBackend(lambda *_: ["python3", "-c", "print('no weights here'); exit(3)"],
                          startup_timeout_s=30)  # fmt: skip
    with pytest.raises(ServerFailedError) as info, exits.serve(EngineConfig(model="m"), tmp_path):
        pass
    assert info.value.failure.kind == "not_started"
    assert info.value.failure.sentence() == (
        "the server exited before it started (exit 3): no weights here"
    )
    assert classify("boom", 1).kind == "crashed"  # one that had answered /health did crash
