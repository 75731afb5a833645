"""A published campaign of real vLLM runs as kneepoint studies, and the simulator run through
each the way the campaign's load generator ran the real server.

The campaign is BLIS's sim-to-real one (tests/fixtures/published/blis-campaign: 38 runs of vLLM
v0.15.1 on H100, A100-80GB and L40S, measured with inference-perf). Each run becomes a study
(GPU, GPUs, model, engine knobs, workload) read by the same loader as a study file; its stages
are simulated in order on one engine, each once the one before has drained, as inference-perf
runs them; every request of a stage is scored from its send, as inference-perf scores it (no
warm-up cut, no trim), and the whole run pools every stage's requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kneepoint.config.study import study_from_mapping
from kneepoint.load import plan_requests
from kneepoint.physics import BatchShape
from kneepoint.records import Efficiency, RequestRecord, StudySpec
from kneepoint.sim import serving
from kneepoint.sim.virtual import run_plan

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "published" / "blis-campaign"
METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean")
CLIENT_TIMEOUT_S = 300.0
"""inference-perf e8e0aa99 sets no request timeout, so aiohttp's default session timeout (300 s
in all) cuts a request off (inference_perf/client/modelserver/openai_client.py)."""
PERMISSIVE_SLO = {"default": {"e2e_p99_ms": CLIENT_TIMEOUT_S * 1000.0}}
"""The campaign judged no SLO; a study needs one, so it is the client's timeout."""


@dataclass(frozen=True)
class Stage:
    """One stage of a run: its offered load and the figures (ms) each source gives for it."""

    rate_rps: float
    duration_s: float
    requests: int
    measured: dict[str, float]
    blis_evolved: dict[str, float]
    blis_roofline: dict[str, float]

    def client_output_tokens(self) -> float:
        """Mean output tokens as the campaign's client counted them, which its ITL divides by:
        (mean e2e - mean ttft) / itl + 1. inference-perf counts a response by tokenising its
        text again (248 generated read as 236-238 for Llama-3.1-8B), so this is what makes a
        simulated ITL comparable."""
        m = self.measured
        return 1.0 + (m["e2e_mean_ms"] - m["ttft_mean_ms"]) / m["itl_mean_ms"]


@dataclass(frozen=True)
class Sent:
    """What the load generator sent for one workload profile (workloads.yaml's ``sent``)."""

    system_prompts: int
    prompts_per_system_prompt: int
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Run:
    """One real run: its server, its workload profile and its stages (``whole``: every
    request of every stage pooled, the campaign's stage -1)."""

    id: int
    folder: str
    model: str
    model_spec: str
    gpu: str
    tensor_parallel_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    kv_offloading_gib: float
    workload: str
    stages: tuple[Stage, ...]
    whole: Stage

    @property
    def label(self) -> str:
        return f"{self.id} {self.model.split('/')[-1]}"


def load_runs(fixture: Path = FIXTURE) -> list[Run]:
    """The campaign's runs from ``runs.yaml``."""
    doc = yaml.safe_load((fixture / "runs.yaml").read_text())
    return [_run(entry) for entry in doc["runs"]]


def _run(entry: dict[str, Any]) -> Run:
    stages = tuple(_stage(s) for s in entry.pop("stages"))
    whole = entry.pop("run")
    pooled = {
        **whole,
        "rate_rps": 0.0,
        "duration_s": 0.0,
        "requests": sum(s.requests for s in stages),
    }
    return Run(**entry, stages=stages, whole=_stage(pooled))


def _stage(entry: dict[str, Any]) -> Stage:
    return Stage(**entry)


def load_workloads(fixture: Path = FIXTURE) -> dict[str, Sent]:
    """What the load generator sent for each workload profile."""
    doc = yaml.safe_load((fixture / "workloads.yaml").read_text())
    return {name: Sent(**w["sent"]) for name, w in doc["workloads"].items()}


def study_mapping(run: Run, sent: Sent, fixture: Path = FIXTURE) -> dict[str, Any]:
    """The run as a study file would say it. The corpus is the prompts themselves, sent in
    turn (``cycle``) as inference-perf sends them: each document is a whole prompt's cached
    part (its full 16-token blocks), the request's own tokens the last block's remainder."""
    cached = (sent.prompt_tokens - 1) // 16 * 16
    model = run.model_spec
    if model.endswith(".json"):
        model = str(fixture / model)
    engine: dict[str, Any] = {
        "model": run.model,
        "tensor_parallel_size": run.tensor_parallel_size,
        "max_num_batched_tokens": run.max_num_batched_tokens,
        "max_num_seqs": run.max_num_seqs,
        "max_model_len": run.max_model_len,
        "gpu_memory_utilization": run.gpu_memory_utilization,
    }
    if run.kv_offloading_gib:
        engine["kv_offloading_size"] = run.kv_offloading_gib
    documents = sent.system_prompts * sent.prompts_per_system_prompt
    return {
        "name": f"blis-{run.id}",
        "description": f"BLIS campaign run {run.folder} (vLLM v0.15.1), as inference-perf sent it",
        "gpu": run.gpu,
        "gpus": run.tensor_parallel_size,
        "model": model,
        "backend": {"kind": "sim", "clock": "virtual"},
        "engine": engine,
        "workload": {
            "name": run.workload,
            "prefix_groups": [
                {
                    "name": "prompts",
                    "documents": documents,
                    "prefix_tokens": cached,
                    "popularity": "cycle",
                },
            ],
            "classes": [
                {
                    "name": run.workload,
                    "prefix_group": "prompts",
                    "input_tokens": {"kind": "fixed", "tokens": sent.prompt_tokens - cached},
                    "output_tokens": {"kind": "fixed", "tokens": sent.output_tokens},
                },
            ],
            "arrival": {"kind": "poisson"},
            "client": {"request_timeout_s": CLIENT_TIMEOUT_S},
        },
        "slo": PERMISSIVE_SLO,
    }


def study_of(run: Run, sent: Sent, fixture: Path = FIXTURE) -> StudySpec:
    """The run as a kneepoint study, validated as a study file is."""
    return study_from_mapping(study_mapping(run, sent, fixture), f"{fixture}/runs.yaml#{run.id}")


GENERAL_GAPS = (
    "requests: 100 prompts in turn, each a whole cached document plus its last block's "
    "tokens; the real ones share a system prompt in groups of 10 (only the first hundred "
    "requests, on a cold cache, could tell) and vary 559-596 tokens about the mean",
    "arrivals: Poisson with the stage's count; inference-perf rescales exponential gaps to "
    "fill the stage's seconds exactly",
    "output: the configured length exactly (ignore_eos); the client's count of it is read "
    "back from the measured means for ITL",
)
"""What stands in, in every run, for what the published files do not hold."""


def not_expressed(run: Run) -> list[str]:
    """What of the real run the study cannot say, and what stands in for it: the general
    stand-ins, then this run's own."""
    gaps = list(GENERAL_GAPS)
    if run.kv_offloading_gib:
        gaps.append(
            "CPU offload: vLLM's OffloadingConnector as kneepoint's host tier of "
            f"{run.kv_offloading_gib:g} GiB (every prompt fits in the pool: nothing loads back)"
        )
    if run.model_spec.endswith(".json"):
        gaps.append(f"model: {run.model}'s config.json (shapes; parameters counted from them)")
    return gaps


@dataclass(frozen=True)
class Simulated:
    """One stage's (or the pooled run's) figures as the simulator measured them, in ms."""

    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    failed: int

    def figure(self, metric: str, client_output_tokens: float) -> float:
        """The campaign's figure ``metric`` (e.g. ``ttft_p99``) from these requests; ITL as
        the campaign computes it, over the client's output count."""
        if metric == "itl_mean":
            gap = float(self.e2e_ms.mean() - self.ttft_ms.mean())
            return gap / (client_output_tokens - 1.0)
        name, stat = metric.split("_")
        values = self.ttft_ms if name == "ttft" else self.e2e_ms
        return float(values.mean() if stat == "mean" else np.percentile(values, int(stat[1:])))

    @classmethod
    def pooled(cls, parts: list[Simulated]) -> Simulated:
        return cls(
            np.concatenate([p.ttft_ms for p in parts]),
            np.concatenate([p.e2e_ms for p in parts]),
            sum(p.failed for p in parts),
        )


def simulate(
    study: StudySpec,
    run: Run,
    efficiency: Efficiency | None = None,
    steps: list[list[BatchShape]] | None = None,
) -> list[Simulated]:
    """Each stage in order on one engine, the next sent once the one before has ended (its
    prefix cache as that one left it, as the real server's was); ``steps``, if given, gets
    each stage's steps that gave some request a token (their shapes)."""
    engine = serving(study.gpu, study.model, study.engine, efficiency or study.efficiency)
    out = []
    for index, stage in enumerate(run.stages):
        plan = plan_requests(
            study.workload,
            stage.rate_rps,
            num_requests=stage.requests,
            seed=study.workload.seed + index,
            vocab_size=study.model.vocab_size,
        )
        timeout = CLIENT_TIMEOUT_S
        load = run_plan(engine, plan, timeout_s=timeout, request_timeout_s=timeout)
        out.append(_figures(load.records))
        if steps is not None:
            steps.append([s.shape for s in load.run.steps if s.num_samples])
    return out


def _figures(records: tuple[RequestRecord, ...]) -> Simulated:
    ok = [r for r in records if r.ok and r.end_s is not None]
    ttft = np.array([(r.chunk_times_s[0] - r.sent_s) * 1000.0 for r in ok])
    e2e = np.array([(r.end_s - r.sent_s) * 1000.0 for r in ok if r.end_s is not None])
    return Simulated(ttft, e2e, len(records) - len(ok))
