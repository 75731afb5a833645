"""The acceptance probe: a run that searches speculation and starts without it reads how n-gram
drafts fare on its traffic before its first trial (the start with the knob's longest draft, one
low rate, vLLM's spec-decode counters), and prices turning drafts on from that reading."""

from __future__ import annotations

from pathlib import Path

from kneepoint.cli.main import main
from kneepoint.config import knob_catalogue, load_study
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.diagnosis import Diagnosis, Observation
from kneepoint.records.drafts import AcceptanceProbe
from kneepoint.records.engine import EngineConfig
from kneepoint.records.ledger import Baseline, Proposed, Validated
from kneepoint.records.sweep import SweepResult
from kneepoint.run.ledger import Ledger
from kneepoint.tune.acceptance_step import probed_setting
from tests.conftest import CONFIGS, SMALL
from tests.support.readings import BANDWIDTH, H100, LLAMA_8B, point

EDITS = CONFIGS / "scenarios" / "code-edits.yaml"
K5 = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
SHORT = ["budget.max_trials=1", "tuning.screen_seconds=8", "tuning.validate_seconds=8",
         "tuning.validate_repeats=2", "tuning.burst.enabled=false"]  # fmt: skip


def test_the_run_probes_acceptance_and_its_first_trial_is_priced_from_it(tmp_path: Path) -> None:
    argv = ["tune", str(EDITS), "--runs-dir", str(tmp_path)]
    assert main([*argv, *(a for s in SHORT for a in ("--set", s))]) == 0
    (folder,) = tmp_path.iterdir()
    events = Ledger(folder / "ledger.jsonl").read()
    baseline = next(e for e in events if isinstance(e, Baseline))
    probe = baseline.acceptance
    assert probe is not None and probe.speculative_config == K5 and probe.device_s > 0
    # one point at the knee search's lowest passing rate: it reads the traffic, not a knee
    kept = SweepResult.model_validate_json(
        (folder / "trials" / "000-baseline" / "acceptance.json").read_text()
    )
    assert [p.rate_rps for p in kept.points] == [probe.rate_rps]
    # the study's class drafts as Llama-3.1-8B rewriting code did (vllm-project/vllm #24344)
    reading = probe.reading
    assert reading is not None and reading.draft_share is not None
    assert abs(reading.draft_share - 0.55) < 0.05
    assert abs(reading.accepted_by_position[0] - 0.81) < 0.05
    first = next(e for e in events if isinstance(e, Proposed))
    assert first.proposal.config.speculative_config == K5
    assert "the acceptance probe (5-token n-gram drafts" in first.proposal.prediction.reason
    # priced at the knee's batch and for the TPOT tail the knee failed on, within 1.25x of
    # what the trial's interleaved validation measured (Step 18's goal for a new lever)
    validated = next(e for e in events if isinstance(e, Validated))
    assert validated.promote and validated.challenger and validated.incumbent
    measured = (validated.challenger.capacity_rps or 0) / (validated.incumbent.capacity_rps or 1)
    predicted = first.proposal.prediction.capacity_ratio
    assert measured > 1.5 and measured / 1.25 < predicted < measured * 1.25
    assert (
        "acceptance probe (5-token n-gram drafts on the start" in (folder / "report.md").read_text()
    )


def test_only_a_run_that_searches_speculation_without_it_probes() -> None:
    catalogue = knob_catalogue()
    assert probed_setting(load_study(EDITS), catalogue) == K5  # the longest draft
    assert probed_setting(load_study(SMALL), catalogue) is None  # not searched
    speculating = load_study(EDITS, [f"engine.speculative_config={K5}"])
    assert probed_setting(speculating, catalogue) is None  # its own points carry the counters
    http = load_study(EDITS, ["backend={kind: sim, clock: http}"])
    assert probed_setting(http, catalogue) is None  # `kneepoint sim serve` knows no drafts
    old = load_study(EDITS, ["backend={kind: vllm, vllm_version: 0.8.0}"])
    assert probed_setting(old, catalogue) is None  # no --speculative-config before 0.8.2


def _priced(probe: AcceptanceProbe) -> str:
    engine = EngineConfig(model=LLAMA_8B.name)
    observation = Observation(
        saturated=point(BANDWIDTH), gpu=H100, model=LLAMA_8B, engine=engine, acceptance=probe
    )
    context = context_of(observation)
    diagnosis = Diagnosis(binding="bandwidth", confidence=0.9)
    pruning = prune(diagnosis, context, knob_catalogue(), backend=VllmBackend())
    return next(r.reason for r in pruning.ruled_out if r.knob == "speculative_config")


def test_a_probe_that_failed_rules_speculation_out_in_the_servers_words() -> None:
    words = "ValueError: Speculative decoding is not supported on this platform"
    failed = AcceptanceProbe(speculative_config=K5, rate_rps=1.0, failure=words)
    assert _priced(failed) == (
        f"the acceptance probe (5-token n-gram drafts at 1 req/s) failed: {words}"
    )
    silent = AcceptanceProbe(speculative_config=K5, rate_rps=1.0)
    assert "read no spec-decode counters" in _priced(silent)
