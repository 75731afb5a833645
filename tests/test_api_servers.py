"""API-server scale-out: a saturated front-end is named from the API server's CPU, and
``api_server_count`` is priced from it and from the cores the host left idle, on the
simulator's front-end-bound scenario (configs/scenarios/frontend-bound.yaml) and against the
CPU build's measured A/B (benchmarks/frontend_cpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.calibration.recorded import load_recorded
from kneepoint.cli.main import main
from kneepoint.config import knob_catalogue, load_study
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import ConfigContext, context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.backend_spec import SimBackend, VllmBackend
from kneepoint.records.diagnosis import Observation
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.proposal import Pruning
from kneepoint.records.sweep import SweepResult
from tests.conftest import REPO

SCENARIO = REPO / "configs" / "scenarios" / "frontend-bound.yaml"
REAL = REPO / "tests" / "fixtures" / "real" / "cpu-tiny-frontend"


def _real(arm: str) -> tuple[Observation, float]:
    study = load_study(REAL / arm / "study.yaml")
    result = SweepResult.model_validate_json((REAL / arm / "sweep.json").read_text())
    return observe_study(study, study.engine, result), float(result.capacity_rps or 0.0)


def _sweep(out: Path, *sets: str) -> float:
    argv = ["sweep", str(SCENARIO), "--out", str(out)]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 0
    return float(SweepResult.model_validate_json(out.read_text()).capacity_rps or 0.0)


def _priced(observation: Observation) -> tuple[ConfigContext, Pruning]:
    context = context_of(observation)
    knob = knob_catalogue().get("api_server_count")
    assert knob is not None
    catalogue = KnobCatalogue(knobs=(knob,))
    return context, prune(diagnose(context), context, catalogue, backend=SimBackend())


def _with_signals(observation: Observation, **readings: float) -> Observation:
    point = observation.saturated
    signals = point.signals.model_copy(update=readings)
    return observation.model_copy(
        update={"saturated": point.model_copy(update={"signals": signals})}
    )


@pytest.mark.slow  # two sweeps of the scenario (~20 s)
def test_a_saturated_api_server_is_named_and_scaled_out_as_the_simulator_measures(
    tmp_path: Path,
) -> None:
    one = _sweep(tmp_path / "one.json")
    study = load_study(SCENARIO)
    result = SweepResult.model_validate_json((tmp_path / "one.json").read_text())
    context, pruning = _priced(observe_study(study, study.engine, result))
    diagnosis = diagnose(context)
    assert (diagnosis.binding, diagnosis.scheduling_kind) == ("scheduling", "frontend")
    line = next(e for e in diagnosis.evidence if e.signal == "frontend_cpu_pct")
    assert line.value is not None and line.value >= 90
    (candidate,) = pruning.candidates
    assert candidate.target == 2
    # Measured: the same scenario behind two API servers (2026-11-30: 28.5 -> 35.8 req/s,
    # 1.26x, priced 1.33x); four gain nothing more, the engine's own steps then bind.
    measured = _sweep(tmp_path / "two.json", "engine.api_server_count=2") / one
    assert measured > 1.1
    assert 1 / 1.25 <= candidate.predicted_ratio / measured <= 1.25, (candidate, measured)


def test_a_saturated_api_server_is_priced_where_the_host_has_cores_idle() -> None:
    # The CPU build's readings with its API server saturated, on a host with cores to spare.
    observation = _with_signals(_real("servers1-r0")[0], frontend_cpu_pct=97.0,
                                host_idle_cores=1.5)  # fmt: skip
    context, pruning = _priced(observation)
    assert diagnose(context).scheduling_kind == "frontend"
    (candidate,) = pruning.candidates
    assert candidate.target == 2 and 1.0 < candidate.predicted_ratio <= 2.0
    assert "2 processes share its work" in candidate.reason


def test_no_idle_core_for_another_api_server_rules_it_out() -> None:
    # vLLM's CPU build on 2 cores: the engine's worker and core process, the API server and
    # the load generator left 0.01-0.03 cores idle at the knee (2026-11-30).
    observation = _with_signals(_real("servers1-r0")[0], frontend_cpu_pct=97.0)
    _, pruning = _priced(observation)
    assert not pruning.candidates
    (out,) = pruning.ruled_out
    assert "idle at the knee: they would take the engine's" in out.reason


def test_the_api_server_module_runs_one_process_whatever_the_flag_says() -> None:
    module = ("python", "-m", "vllm.entrypoints.openai.api_server")
    assert "api_server_count" in VllmBackend(command=module).unmodeled_knobs
    assert "api_server_count" not in VllmBackend().unmodeled_knobs
    assert "api_server_count" in SimBackend(clock="http").unmodeled_knobs
    assert "api_server_count" not in SimBackend().unmodeled_knobs


def test_on_the_cpu_build_a_second_api_server_is_ruled_out_and_measured_worse() -> None:
    """vLLM 0.32's CPU build on 2 cores (tests/fixtures/real/cpu-tiny-frontend): its one
    API server had time to spare at the knee, the host no idle core, and two API servers
    measured 0.87x and 0.95x of one, a round each."""
    observation, _ = _real("servers1-r0")
    signals = observation.saturated.signals
    assert signals.frontend_cpu_pct is not None and 30 <= signals.frontend_cpu_pct <= 45
    assert signals.host_idle_cores is not None and signals.host_idle_cores < 0.1
    context = context_of(observation)
    knob = knob_catalogue().get("api_server_count")
    assert knob is not None
    catalogue = KnobCatalogue(knobs=(knob,))
    pruning = prune(diagnose(context), context, catalogue, backend=VllmBackend())
    assert not pruning.candidates
    assert "the front-end is not what binds" in pruning.ruled_out[0].reason
    for round_ in ("r0", "r1"):
        assert _real(f"servers2-{round_}")[1] < _real(f"servers1-{round_}")[1]


def test_a_saturated_api_server_holds_the_ttft_the_servers_own_count_leaves_out() -> None:
    # The CPU build's readings as a saturated API server would give them: 1,300 ms of
    # client TTFT p50 against the server's own 130 ms is 90% of it spent in the API server.
    observation = _with_signals(_real("servers1-r0")[0], frontend_cpu_pct=97.0)
    point = observation.saturated
    client = next(iter(point.dists.values()))["ttft"]
    server = client.model_copy(update={"p50_ms": client.p50_ms / 10})
    signals = point.signals.model_copy(update={"server_latency": {"ttft": server}})
    held = observation.model_copy(
        update={"saturated": point.model_copy(update={"signals": signals})}
    )
    found = diagnose(context_of(held))
    line = next(e for e in found.evidence if e.signal == "ttft_in_frontend_share")
    assert line.value == pytest.approx(0.9, abs=0.01)
    assert (found.binding, found.scheduling_kind) == ("scheduling", "frontend")
    assert found.confidence > 0.85


def test_without_the_api_servers_cpu_the_ttft_gap_alone_names_nothing() -> None:
    """The real H200 KV-bound run at 48 req/s: client TTFT p50 739 ms, the server's 72 ms
    (its histogram spans the whole point, the client's percentiles the window), and no
    API-server CPU read: the KV pool, not the front-end, is named."""
    kv = REPO / "tests" / "fixtures" / "real" / "h200-llama8b-kv-tune" / "at-48rps"
    recorded = load_recorded(kv)
    study = recorded.study
    found = diagnose(context_of(observe_study(study, study.engine, recorded.result)))
    assert found.binding == "cache"
    assert all(e.signal != "ttft_in_frontend_share" for e in found.evidence)
