"""`kneepoint config list gpus|models|workloads|knobs`: the names a study may use, with what
each is, so nobody guesses a catalogue key (a study's ``gpu`` and ``model`` also take a key's
unambiguous prefix and a model's Hugging Face id)."""

from __future__ import annotations

import argparse
import sys

KINDS = ("gpus", "models", "workloads", "knobs")


def add_list_command(config_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    listing = config_commands.add_parser(
        "list",
        help="print a catalogue: the GPUs, models, workload presets or knobs a study may name",
    )
    listing.add_argument("kind", choices=KINDS, help="which catalogue")
    listing.set_defaults(handler=run_list)


def run_list(args: argparse.Namespace) -> int:
    rows = {"gpus": _gpus, "models": _models, "workloads": _workloads, "knobs": _knobs}
    sys.stdout.write("\n".join(rows[args.kind]()) + "\n")
    return 0


def _gpus() -> list[str]:
    from kneepoint.config import gpu_catalogue

    return [
        f"{key:<16} {gpu.display_name} ({gpu.memory_mib / 1024:.0f} GiB, {gpu.hbm_tb_s:g} TB/s)"
        for key, gpu in gpu_catalogue().items()
    ]


def _models() -> list[str]:
    from kneepoint.config import model_catalogue

    return [
        f"{key:<16} {model.hf_id or '-':<36} {model.num_layers} layers, hidden "
        f"{model.hidden_size}, {model.num_attention_heads}/{model.num_kv_heads} heads"
        for key, model in model_catalogue().items()
    ]


def _workloads() -> list[str]:
    from kneepoint.config import configs_dir, preset_names

    lines = []
    for name in preset_names("workloads"):
        first = (configs_dir() / "workloads" / f"{name}.yaml").read_text().splitlines()[:1]
        said = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        lines.append(f"{name:<16} {said}")
    return lines


def _knobs() -> list[str]:
    from kneepoint.config import knob_catalogue

    return [
        f"{knob.name:<30} {knob.flag:<34} vLLM {knob.vllm_versions or 'any':<10} "
        f"acts on {', '.join(knob.acts_on)}"
        for knob in knob_catalogue().knobs
    ]
