"""``kneepoint plan``: before any GPU is rented, what fits, on which GPUs, in which layout, at
what rate and price.

    kneepoint plan STUDY.yaml                         the study's GPU, TP 1/2/4/8 on 8 GPUs
    kneepoint plan STUDY.yaml --gpus 4 --gpu-catalogue h100-sxm,h200-sxm,a100-80gb-sxm
    kneepoint plan STUDY.yaml --gpu-catalogue all --price h100-sxm=2.20 --out plans/70b

The plan goes to stdout as markdown (and with ``--out`` into DIR/plan.md and DIR/plan.json);
one progress line per layout goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kneepoint.config import (
    ConfigError,
    Problem,
    add_overrides_argument,
    arguments,
    gpu_catalogue,
    load_study,
)

if TYPE_CHECKING:
    from kneepoint.records import GpuSpec, Layout


def add_plan_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = commands.add_parser(
        "plan", help="what fits on which GPUs, in which layout, at what rate and price (no GPU)"
    )
    cmd.add_argument("file", type=Path, help="the study YAML file")
    cmd.add_argument(
        "--gpus",
        type=int,
        default=8,
        metavar="N",
        help="GPUs in the node (the largest tensor-parallel size; default 8)",
    )
    cmd.add_argument(
        "--gpu-catalogue",
        metavar="NAMES",
        help="GPU kinds to plan for, comma-separated catalogue names or 'all' "
        "(default: the study's GPU)",
    )
    cmd.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="GPU=USD",
        help="a GPU-hour's price, e.g. h100-sxm=2.20 (repeatable; default: the "
        "study's budget price for its GPU, else the catalogue's)",
    )
    cmd.add_argument("--out", type=Path, metavar="DIR", help="also write plan.md and plan.json")
    add_overrides_argument(cmd, "override a study field, e.g. model=llama-3.1-70b")
    cmd.set_defaults(handler=run_plan)


def _gpus(names: str | None, study_gpu: GpuSpec) -> list[GpuSpec]:
    if names is None:
        return [study_gpu]
    catalogue = gpu_catalogue()
    if names.strip() == "all":
        return list(catalogue.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in catalogue]
    if unknown or not wanted:
        message = (
            f"unknown GPU {', '.join(unknown)} (known: {', '.join(catalogue)})"
            if unknown
            else "name at least one GPU"
        )
        raise ConfigError([Problem("--gpu-catalogue", None, None, message)])
    return [catalogue[n] for n in wanted]


def _prices(given: list[str]) -> Mapping[str, float]:
    prices: dict[str, float] = {}
    for text in given:
        name, _, value = text.partition("=")
        price = arguments.positive(value)
        if name not in gpu_catalogue() or price is None:
            message = "expected GPU=USD, a catalogue GPU and a positive price"
            raise ConfigError([Problem(f"--price {text}", None, None, message)])
        prices[name] = price
    return prices


def run_plan(args: argparse.Namespace) -> int:
    from kneepoint.config import check_output
    from kneepoint.planning import make_plan
    from kneepoint.report import plan_document, to_markdown
    from kneepoint.run import write_atomically

    if not 1 <= args.gpus <= 64:
        raise ConfigError([Problem("--gpus", None, None, "expected 1 to 64 GPUs in the node")])
    study = load_study(args.file, args.overrides)
    if args.out is not None:
        check_output("--out", args.out, directory=True)
    gpus, prices = _gpus(args.gpu_catalogue, study.gpu), _prices(args.price)
    started = time.monotonic()

    def progress(lay: Layout) -> None:
        if lay.excluded is not None or lay.refusal is not None:
            what = "not laid out" if lay.excluded is not None else "vLLM would refuse it"
        elif lay.prediction is None or not lay.prediction.capacity_rps:
            what = f"{lay.kv_tokens:,} KV tokens, misses the SLO at every rate tried"
        else:
            what = (
                f"{lay.kv_tokens:,} KV tokens, SLO capacity {lay.prediction.capacity_rps:.2f} req/s"
            )
        elapsed = time.monotonic() - started
        sys.stderr.write(f"plan: {lay.gpu} {lay.label}: {what} ({elapsed:.0f} s)\n")

    plan = make_plan(study, gpus, args.gpus, prices, progress)
    text = to_markdown(plan_document(plan), Path("."))
    if args.out is not None:
        write_atomically(args.out / "plan.json", plan.model_dump_json(indent=1) + "\n")
        write_atomically(args.out / "plan.md", text)
        text += f"\nwritten: {args.out}\n"
    sys.stdout.write(text)
    return 0
