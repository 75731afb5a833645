"""GuideLLM driven at a fixed open-loop rate for the load-generator capacity benchmark: one
``guidellm run`` per rate from its own virtual environment (scripts/install-guidellm.sh; never a
kneepoint dependency), its per-request timings read back from its JSON report."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from loadgen_figures import Timing

REPO = Path(__file__).resolve().parent.parent
INSTALL_GUIDELLM = REPO / "scripts" / "install-guidellm.sh"
MODEL = "fast-sse"


# A byte-level tokenizer (each byte one token): GuideLLM's synthetic data needs a tokenizer to
# cut prompts to length, and this one needs no download. Run with GuideLLM's python.
TOKENIZER = """
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
folder = Path(sys.argv[1])
folder.mkdir(parents=True, exist_ok=True)
alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.save(str(folder / "tokenizer.json"))
config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096}
(folder / "tokenizer_config.json").write_text(json.dumps(config))
"""
VERSION = "import importlib.metadata as m; print(m.version('guidellm'))"


class GuideLLM:
    """``guidellm run`` from its own environment: one invocation per rate, for a fixed time;
    per-request timings are read back from its JSON report."""

    def __init__(self, url: str, args: argparse.Namespace, workdir: Path) -> None:
        self.url, self.args, self.workdir = url, args, workdir
        self.python = str(_guidellm_venv(args.guidellm_venv) / "bin" / "python")
        found = subprocess.run([self.python, "-c", VERSION], capture_output=True, check=True)
        self.version = found.stdout.decode().strip()
        self.tokenizer = workdir / "tokenizer"
        subprocess.run([self.python, "-c", TOKENIZER, str(self.tokenizer)], check=True)

    def argv(self, rate: float, seconds: float, report: Path) -> list[str]:
        a = self.args
        backend = f"kind=openai_http,target={self.url},model={MODEL},request_format=/v1/completions"
        data = (
            f"kind=synthetic_text,prompt_tokens={a.prompt_tokens},output_tokens={a.output_tokens}"
        )
        return [
            self.python, "-m", "guidellm", "run", "--backend", backend,
            "--profile", f"kind={a.arrivals},rate={rate:g}",
            "--constraint", f"kind=max_duration,seconds={seconds:g}",
            "--data", data, "--tokenizer", f"kind=hf_auto,model={self.tokenizer}",
            "--metrics", "kind=generative,sample_size=0",
            "--output", f"kind=json,path={report}", "--disable-console",
        ]  # fmt: skip

    def __call__(self, rate: float, seconds: float) -> list[Timing]:
        report = self.workdir / f"guidellm-{rate:g}.json"
        workers = str(self.args.guidellm_workers)
        env = {**os.environ, "GUIDELLM__MAX_WORKER_PROCESSES": workers, "HF_HUB_OFFLINE": "1"}
        code, output = _run_group(self.argv(rate, seconds, report), env, self.workdir,
                                  timeout_s=seconds * 10 + 300)  # fmt: skip
        if code != 0 or not report.exists():
            raise RuntimeError(f"guidellm failed ({code}):\n{output[-2000:]}")
        return guidellm_timings(json.loads(report.read_text()))


def _run_group(
    argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float
) -> tuple[int, str]:
    """Run a command in its own process group, which is killed whole however the run ends:
    GuideLLM leaves worker processes behind when only its main process is stopped."""
    out = subprocess.PIPE
    with subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    ) as child:  # fmt: skip
        try:
            output, _ = child.communicate(timeout=timeout_s)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
    return child.returncode, output


def guidellm_timings(report: dict[str, Any]) -> list[Timing]:
    """Every request GuideLLM started, from its report (its times are Unix seconds)."""
    (benchmark,) = report["benchmarks"]
    timings: list[Timing] = []
    for status, requests in benchmark["requests"].items():
        for request in requests or ():
            t = request["info"]["timings"]
            if t.get("targeted_start") is None or t.get("resolve_start") is None:
                continue  # never handed to the backend
            end = t.get("request_end") if status == "successful" else None
            timings.append(Timing(t["targeted_start"], t["resolve_start"], end, t["request_start"]))
    return timings


def _guidellm_venv(given: str | None) -> Path:
    if given:
        return Path(given)
    print("GuideLLM: its own environment, from scripts/install-guidellm.sh ...", flush=True)
    argv = ["bash", str(INSTALL_GUIDELLM)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/install-guidellm.sh failed:\n{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])
