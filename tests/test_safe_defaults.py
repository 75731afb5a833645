"""Safe defaults: servers listen on loopback unless the study or the flag says otherwise, and
then a warning says so once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kneepoint.config import load_study
from kneepoint.probes.backends import LaunchBackend, launch, sim_argv, vllm_argv
from kneepoint.probes.backends.sim_http import sim_server
from kneepoint.probes.backends.vllm import vllm_server
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.engine import EngineConfig
from kneepoint.sim.access import is_loopback
from kneepoint.sim.serve_args import add_serve_arguments
from tests.support.openings import opening as opened

from .conftest import QUICKSTART

CONFIG = EngineConfig(model="meta-llama/Llama-3.1-8B-Instruct", max_num_seqs=64)


def _host_in(argv: list[str]) -> str:
    return argv[argv.index("--host") + 1]


def test_launched_servers_listen_on_loopback_by_default(tmp_path: Path) -> None:
    study = load_study(QUICKSTART, ["backend={kind: vllm}"])
    opening = opened(study, tmp_path)
    vllm = vllm_server(opening)
    assert isinstance(vllm, LaunchBackend) and vllm.host == "127.0.0.1"
    assert _host_in(vllm.argv_for(CONFIG, vllm.host, 8000, "m")) == "127.0.0.1"
    sim = sim_server(opening)
    assert isinstance(sim, LaunchBackend) and sim.host == "127.0.0.1"
    assert _host_in(sim.argv_for(CONFIG, sim.host, 8000, "m")) == "127.0.0.1"
    assert VllmBackend().host == "127.0.0.1"


def test_sim_serve_listens_on_loopback_unless_told() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    assert parser.parse_args(["--gpu", "h100", "--model", "m"]).host == "127.0.0.1"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("gpu-box", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_non_loopback_host_is_warned_about_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_WARNED_HOSTS", set())
    argv = vllm_argv(VllmBackend())
    with capture_logs() as events:
        LaunchBackend(argv, host="127.0.0.1")
        assert not [e for e in events if e["event"] == "server.exposed"]
        for _ in range(3):  # one launcher per trial: still one warning
            LaunchBackend(sim_argv("h100", "llama-3.1-8b"), host="0.0.0.0")
    exposed = [e for e in events if e["event"] == "server.exposed"]
    assert len(exposed) == 1 and exposed[0]["host"] == "0.0.0.0"
    assert exposed[0]["log_level"] == "warning"
