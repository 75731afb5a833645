"""Which GPUs ``kneepoint tune`` drives: one (today's loop, no Ray), or a pool of Ray's over
this node's GPUs or a cluster's. The choice is written into the run folder (``pool.json``) so
that ``kneepoint tune RUN_FOLDER`` resumes against the same GPUs without the flags.

    --gpus 8 | 0-7 | 0,2,4    this node's GPUs through a local Ray instance (a count on a
                              host without them: logical GPUs, for the simulator)
    --ray ADDRESS             join a Ray cluster (default: $RAY_ADDRESS), its GPUs
    --ray-resource NAME       a custom resource stands in for a GPU (vLLM's CPU build)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from kneepoint.config import ConfigError, Problem
from kneepoint.records import Record

if TYPE_CHECKING:
    from kneepoint.probes.cluster import RayPool

POOL_FILE = "pool.json"


class PoolChoice(Record):
    gpus: int = Field(ge=1)
    """GPUs of a local instance; ignored when joining a cluster (it has its own)."""
    gpu_ids: tuple[str, ...] = ()
    """The local GPUs named (``CUDA_VISIBLE_DEVICES`` for Ray); (): the first ``gpus``."""
    address: str | None = None
    resource: str = "GPU"


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus",
        help="GPUs to drive at once through a local Ray instance: a count, a range (0-7) "
        "or a list (0,2,4); default: every GPU NVML finds, where Ray is installed",
    )
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="join this Ray cluster (default: $RAY_ADDRESS)"
    )
    parser.add_argument(
        "--ray-resource",
        default="GPU",
        metavar="NAME",
        help="the Ray resource a server's GPU is counted in (a custom one on CPU hosts)",
    )


def choose(args: argparse.Namespace, folder: Path, resumed: bool) -> PoolChoice | None:
    """The pool for this run (None: one GPU, today's loop): a new run's, from its flags
    (``args.pool``, checked before its folder was made), is written beside its ledger; a
    resumed run's is read from there unless flags name another."""
    saved = folder / POOL_FILE
    named = args.gpus is not None or args.ray is not None
    if resumed and not named:
        return PoolChoice.model_validate_json(saved.read_text()) if saved.exists() else None
    choice: PoolChoice | None = args.pool
    if choice is not None:
        saved.write_text(choice.model_dump_json(indent=2) + "\n")
    return choice


def from_flags(args: argparse.Namespace) -> PoolChoice | None:
    """The pool the flags name (or this node's GPUs, ``_found_here``); a flag that names
    no pool, or Ray missing, is a ConfigError."""
    address = args.ray or os.environ.get("RAY_ADDRESS")
    if args.gpus is None and address is None:
        return _found_here(args.ray_resource)
    _need_ray("--ray" if args.gpus is None else "--gpus")
    gpus, ids = _parse_gpus(args.gpus) if args.gpus is not None else (1, ())
    return PoolChoice(gpus=gpus, gpu_ids=ids, address=address, resource=args.ray_resource)


def _found_here(resource: str) -> PoolChoice | None:
    """Every GPU NVML finds, where there are several and Ray is installed."""
    from kneepoint.probes.telemetry import gpu_count

    found = gpu_count()
    if found < 2 or importlib.util.find_spec("ray") is None:
        return None
    return PoolChoice(gpus=found, resource=resource)


def _parse_gpus(text: str) -> tuple[int, tuple[str, ...]]:
    """``8`` -> 8 GPUs; ``0-7`` or ``0,2,4`` -> those GPUs."""
    if text.isdigit():
        return _positive(int(text)), ()
    ids: tuple[str, ...] = ()
    if (span := re.fullmatch(r"(\d+)-(\d+)", text)) is not None:
        ids = tuple(str(i) for i in range(int(span[1]), int(span[2]) + 1))
    elif re.fullmatch(r"\d+(,\d+)+", text):
        ids = tuple(str(int(part)) for part in text.split(","))
    if not ids or len(set(ids)) != len(ids):
        raise ConfigError([Problem("--gpus", None, (), f"{text!r}: give a count, 0-7 or 0,2,4")])
    return len(ids), ids


def _positive(n: int) -> int:
    if n < 1:
        raise ConfigError([Problem("--gpus", None, (), "give at least one GPU")])
    return n


def _need_ray(flag: str) -> None:
    if importlib.util.find_spec("ray") is None:
        message = (
            "drives several GPUs through Ray, which is not installed: pip install 'kneepoint[ray]'"
        )
        raise ConfigError([Problem(flag, None, (), message)])


def open_pool(choice: PoolChoice) -> RayPool:
    """Ray's pool for ``choice``: the local GPUs named become ``CUDA_VISIBLE_DEVICES``
    before Ray starts (Ray then counts and hands out only those)."""
    from kneepoint.probes.cluster import RayPool

    if choice.gpu_ids and choice.address is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(choice.gpu_ids)
    gpus = None if choice.address is not None else choice.gpus
    return RayPool(address=choice.address, gpus=gpus, resource=choice.resource)


def say(choice: PoolChoice) -> str:
    """The pool in words, for the console."""
    if choice.address is not None:
        return f"the Ray cluster at {choice.address} ({choice.resource})"
    ids = f" ({','.join(choice.gpu_ids)})" if choice.gpu_ids else ""
    return f"{choice.gpus} {choice.resource}s{ids} through a local Ray instance"
