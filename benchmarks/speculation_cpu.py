"""Speculative decoding on a real engine: n-gram speculation on vLLM's CPU build serving the
tests' tiny Llama, priced from the acceptance the server measured and checked against the
capacity it measured.

For each sampling temperature (greedy, where the model's own repetitive output feeds the
n-gram lookup, and 1.0, where a dummy-weight model's near-uniform sampling accepts almost
nothing), `kneepoint diagnose` measures the study with 3-token n-gram drafts and reads vLLM's
spec-decode counters at its knee; the rule (``kneepoint.policies.pruning.spec_effects``)
prices speculation against none from them; then `kneepoint sweep` measures the same study
without speculation. One line per temperature: acceptance by position, tokens a draft, share
of decoding steps that drafted, the predicted and the measured capacity ratio (speculation on
over off).

Then the way a tune meets it (``--probe``): `kneepoint tune` of the same study without
speculation, searching only the knob, one trial: its baseline ends with the acceptance probe
(the start with 5-token drafts at one low rate), the rule prices turning drafts on from it,
and the tune screens and validates the best-priced choice where it is priced above 1. One
line per temperature: the probe's acceptance, the first move's price and what its
validation (or screen) measured, or why no move was made.

Run: .venv/bin/python benchmarks/speculation_cpu.py [--work DIR] [--probe]
     (~15 min, ~30 with --probe, on a 2-core AVX-512 host)
Goal (issue "Step 18"): high and near-zero acceptance priced on the sides of 1 the
measurement finds.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import vllm_cpu

sys.path.insert(0, str(vllm_cpu.REPO))
import versions

from kneepoint.config import knob_catalogue, load_study
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.knob_domains import ChoiceDomain
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.sweep import SweepResult
from tests.support.real_vllm.host_speed import kv_study_sizing, measure_host

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
KNEEPOINT = str(vllm_cpu.REPO / ".venv" / "bin" / "kneepoint")
K3 = "{method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 4}"
ANSWER_TOKENS = 128
"""Longer answers than the tier's 32: most of a request's steps are then decodes."""


def study_sets(model: Path, venv: Path, sized: list[str], temperature: float) -> list[str]:
    command = f"[{venv / 'bin' / 'python'}, -m, vllm.entrypoints.openai.api_server]"
    shape = f"{{kind: fixed, tokens: {ANSWER_TOKENS}}}"
    return [
        f"model={model / 'config.json'}", f"engine.model={model}", f"backend.command={command}",
        *sized, "engine.kv_cache_memory_bytes=67108864",  # a pool that does not bind
        f"workload.classes=[{{name: c, input_tokens: {{kind: fixed, tokens: 128}}, "
        f"output_tokens: {shape}}}]",
        f"workload.client.temperature={temperature}", "objective={kind: slo_capacity}",
    ]  # fmt: skip


def _argv(sets: list[str]) -> list[str]:
    return [arg for override in sets for arg in ("--set", override)]


def diagnose_on(sets: list[str], runs: Path) -> Path:
    """`kneepoint diagnose` with 3-token n-gram drafts: the folder it wrote."""
    spec = [*sets, f"engine.speculative_config={K3}", "search.knobs=[speculative_config]"]
    shutil.rmtree(runs, ignore_errors=True)
    done = subprocess.run([KNEEPOINT, "diagnose", str(STUDY), "--runs-dir", str(runs),
                           *_argv(spec)], capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"kneepoint diagnose failed:\n{done.stderr[-3000:]}")
    (folder,) = runs.iterdir()
    return folder


def sweep_off(sets: list[str], out: Path) -> float:
    done = subprocess.run([KNEEPOINT, "sweep", str(STUDY), "--out", str(out), *_argv(sets)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"kneepoint sweep failed:\n{done.stderr[-3000:]}")
    return float(json.loads(out.read_text())["capacity_rps"])


def priced(folder: Path) -> tuple[float, float | None, str]:
    """The measured capacity with speculation, the rule's price of it over none (the knob's
    choices cut to these two, so that the rule's best other choice is off), and the
    acceptance it was priced from, in words."""
    study = load_study(folder / "study.yaml")
    result = SweepResult.model_validate_json((folder / "sweep.json").read_text())
    context = context_of(observe_study(study, study.engine, result))
    reading = context.observation.saturated.signals.speculation
    if reading is None:
        raise SystemExit(f"{folder}: the server exported no spec-decode counters")
    knob = knob_catalogue().get("speculative_config")
    assert knob is not None and study.engine.speculative_config is not None
    two = ChoiceDomain(choices=(None, study.engine.speculative_config))
    catalogue = KnobCatalogue(knobs=(knob.model_copy(update={"domain": two}),))
    pruning = prune(diagnose(context), context, catalogue, backend=study.backend)
    said = " ".join([c.reason for c in pruning.candidates] + [r.reason for r in pruning.ruled_out])
    found = re.search(r"speculation off (?:priced )?([0-9.]+)x", said)
    shares = ", ".join(f"{p:.2f}" for p in reading.accepted_by_position)
    words = (f"accepted by position {shares}, {reading.acceptance_length or 1:.2f} tokens a "
             f"draft, {reading.draft_share or 0:.0%} of decoding steps drafted")  # fmt: skip
    if found is None:
        return float(result.capacity_rps or 0.0), None, f"{words}; not priced: {said}"
    return float(result.capacity_rps or 0.0), 1.0 / float(found.group(1)), words


def tune_probed(sets: list[str], runs: Path) -> str:
    """`kneepoint tune` without speculation, searching only it, one trial: what its acceptance
    probe read, how its first move was priced and what it measured, in words."""
    shutil.rmtree(runs, ignore_errors=True)
    extra = ["search.knobs=[speculative_config]", "budget.max_trials=1",
             "tuning.burst.enabled=false"]  # fmt: skip
    done = subprocess.run([KNEEPOINT, "tune", str(STUDY), "--runs-dir", str(runs),
                           *_argv([*sets, *extra])], capture_output=True, text=True,
                          check=False)  # fmt: skip
    (folder,) = runs.iterdir()
    events = [json.loads(line) for line in (folder / "ledger.jsonl").open()]
    baseline = next((e for e in events if e["event"] == "baseline"), None)
    if baseline is None:
        raise SystemExit(f"kneepoint tune measured no baseline:\n{done.stderr[-3000:]}")
    probe = baseline.get("acceptance") or {}
    reading = probe.get("reading")
    read = "no probe" if not probe else probe.get("failure") or "no counters"
    if reading:
        shares = ", ".join(f"{p:.2f}" for p in reading["accepted_by_position"])
        length = 1 + reading["accepted_tokens"] / max(1.0, reading["drafts"])
        read = f"probe at {probe['rate_rps']:.3g} req/s: by position {shares}, {length:.2f} a draft"
    proposed = next((e for e in events if e["event"] == "proposed"), None)
    if proposed is None:
        finished = next((e for e in events if e["event"] == "finished"), {})
        return f"{read}; no move: {finished.get('detail', '')[:300]}"
    predicted = proposed["proposal"]["prediction"]["capacity_ratio"]
    start = baseline["repeats"]["capacity_rps"] or 0.0
    validated = next((e for e in events if e["event"] == "validated"), None)
    screened = next(e for e in events if e["event"] == "screened")
    if validated is not None and validated.get("challenger") and validated.get("incumbent"):
        # the two arms interleaved on the host as it was then
        against = validated["incumbent"]["capacity_rps"] or start
        measured = (validated["challenger"]["capacity_rps"] or 0.0) / against
        by = "validated"
    else:
        measured, by = (screened["outcome"].get("objective") or 0.0) / start, "screened"
    k = proposed["proposal"]["config"].get("speculative_config") or {}
    return (f"{read}; {k.get('num_speculative_tokens', 0)} draft tokens predicted "
            f"{predicted:.2f}x, {by} {measured:.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("speculation-cpu"))
    parser.add_argument("--probe", action="store_true", help="also tune through the probe")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    venv = vllm_cpu.vllm_venv()
    model = vllm_cpu.kept_tiny_model(venv, args.work)
    speed = measure_host(venv, model)
    print(f"host: {speed.summary()}", flush=True)
    sized = [s for s in kv_study_sizing(speed) if not s.startswith("workload.")]
    print(f"{'temperature':>11} {'predicted on/off':>16} {'measured on/off':>15}  acceptance")
    for temperature in (0.0, 1.0):
        sets = study_sets(model, venv, sized, temperature)
        folder = diagnose_on(sets, args.work / f"t{temperature:g}-on")
        on_rps, predicted, words = priced(folder)
        off_rps = sweep_off(sets, args.work / f"t{temperature:g}-off.json")
        measured = on_rps / off_rps if off_rps else float("nan")
        said = "not priced" if predicted is None else f"{predicted:.2f}x"
        print(f"{temperature:>11g} {said:>16} {measured:>14.2f}x  {words} "
              f"({on_rps:.2f} against {off_rps:.2f} req/s)", flush=True)  # fmt: skip
        if args.probe:
            words = tune_probed(sets, args.work / f"t{temperature:g}-tune")
            print(f"{'':>11} tune through the acceptance probe: {words}", flush=True)


if __name__ == "__main__":
    main()
