"""Studies that cannot run, refused when they are loaded, before any server starts.

Validation (``kneepoint.records.study``) refuses what a study contradicts by itself: a request
longer than max_model_len, a value of the wrong type or range. What is left needs more than
the records know, and is checked here as (field path, problem) pairs the loader locates in the
file or the ``--set`` that gave it (``kneepoint.config.study.StudyCheck``):

- a knob the vLLM to be launched does not know (its flag is newer than the release);
- an engine setting the simulator has no model for, on a simulated backend (``kneepoint sim
  serve`` would refuse to start it);
- an SLO limit below the fastest step the GPU can run for the model at batch 1;
- a deadline already past, or too close for one baseline (``kneepoint.tune.deadline``);
- a variable the study reads a secret from (``backend.api_key_env``, ``${NAME}`` in
  ``backend.env``) that the agent's environment does not set.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from datetime import datetime
from functools import cache

import structlog
from packaging.version import InvalidVersion, Version

from kneepoint.config import Loc, knob_catalogue
from kneepoint.physics import UnmodeledSettingError, resolve_engine
from kneepoint.probes.server import missing_variables
from kneepoint.records import KnobCatalogue, StudySpec
from kneepoint.tune.deadline import deadline_problem

log = structlog.get_logger(__name__)

Finding = tuple[Loc, str]

LEAST_BYTES_PER_PARAM = 0.5
"""The smallest weight format a study can reach: 4-bit (AWQ/GPTQ, the catalogue's
quantization choices); fp8 is 1 byte, bf16 2."""
SLO_FLOOR_MARGIN = 2.0
"""An SLO is refused only below half the floor: the floor is already an ideal bound, so this
keeps rounding in the model's parameter count or the GPU's datasheet from refusing a limit
that a real engine could just meet."""
_DEFAULT_COMMAND = ("vllm", "serve")


Check = Callable[[StudySpec], list[Finding]]


def launch_checks() -> tuple[Check, ...]:
    """What one configuration's servers need to start and its SLO to be meetable, whatever
    the study's search and budget (``kneepoint sweep`` measures the engine as given)."""
    return (
        lambda s: unknown_knobs(s, searched=False),
        unmodeled_settings,
        slo_below_floor,
        missing_variables,
    )


def study_checks(now: datetime) -> tuple[Check, ...]:
    """Every check a study must pass before anything is launched, for a run started ``now``."""
    return (
        unknown_knobs,
        unmodeled_settings,
        slo_below_floor,
        missing_variables,
        lambda s: late(s, now),
    )


@cache
def installed_vllm() -> str | None:
    """The vLLM release installed beside kneepoint, if any."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def launched_vllm(study: StudySpec) -> str | None:
    """The vLLM release a study's servers will run: the one it states, else (for the plain
    ``vllm serve`` command, which runs the vLLM on this PATH, normally beside kneepoint) the
    installed one; None where it cannot be known before a server answers /version."""
    backend = study.backend
    command = backend.launch_command
    if command is None:
        return None
    if backend.stated_vllm_version is not None:
        return backend.stated_vllm_version
    return installed_vllm() if tuple(command) == _DEFAULT_COMMAND else None


def unknown_knobs(
    study: StudySpec, catalogue: KnobCatalogue | None = None, *, searched: bool = True
) -> list[Finding]:
    """Knobs the study sets (or, if ``searched``, asks to search) that the launched vLLM
    release does not know (the catalogue's ``vllm_versions``); an attached server is not
    launched, so not judged."""
    version = launched_vllm(study)
    if version is None:
        return []
    stated = study.backend.stated_vllm_version is not None
    where: Loc = ("backend", "vllm_version")
    try:
        Version(version)
    except InvalidVersion:
        return [(where, f"{version!r} is not a vLLM version (e.g. 0.11.2)")] if stated else []
    release = f"vLLM {version}" + ("" if stated else " (installed)")
    knobs = catalogue or knob_catalogue()
    found: list[Finding] = []
    for name in study.engine.knob_values():
        knob = knobs.get(name)
        if knob is not None and not knob.known_by(version):
            found.append(
                (
                    ("engine", name),
                    f"{release} does not know {knob.flag} (it needs vLLM {knob.vllm_versions})",
                )
            )
    for index, name in enumerate(study.search.knobs if searched else ()):
        knob = knobs.get(name)
        if knob is not None and not knob.known_by(version):
            found.append(
                (
                    ("search", "knobs", index),
                    f"{release} does not know {knob.flag} (it needs vLLM {knob.vllm_versions})",
                )
            )
    return found


def unmodeled_settings(study: StudySpec) -> list[Finding]:
    """On a simulated backend, an engine setting the simulator cannot run: `kneepoint sim
    serve` would refuse it at start, so the baseline could never be measured."""
    if not study.backend.simulated:
        return []
    try:
        resolve_engine(study.engine, study.gpu, study.model)
    except UnmodeledSettingError as exc:
        fields = ("kv_cache_dtype", "quantization", "speculative_config")
        field = next((f for f in fields if f in str(exc)), None)
        loc: Loc = ("engine", field) if field else ("engine",)
        return [(loc, f"the simulator cannot run it: {exc}")]
    return []


def step_floor_s(study: StudySpec) -> float:
    """The least time any engine step can take for this model on the study's GPUs.

    Every step, prefill or decode, streams each active weight from HBM once (the roofline's
    weight-read term, ``kneepoint.physics.roofline``); at batch 1 nothing else is cheaper to
    skip. The bound takes the best case of every choice the search or the engine has: the
    smallest weight format (4-bit), the weights split over all the study's GPUs (tensor
    parallel), and the datasheet bandwidth at 100% (real engines reach 60-85%).
    """
    model = study.model
    weight_bytes = model.active_params() * min(model.weight_dtype_bytes, LEAST_BYTES_PER_PARAM)
    return weight_bytes / (study.gpus * study.gpu.hbm_tb_s * 1e12)


def slo_below_floor(study: StudySpec) -> list[Finding]:
    """TTFT and ITL limits no load can meet: each is at least one whole step (the first
    token's prefill step; the step between two token-carrying chunks). TPOT and E2E are not
    judged: speculative decoding makes several tokens per step.

    Only the simulator is refused: it runs exactly the study's GPU and model entries. A real
    (vllm) or attached server may run on a device those entries do not describe (vLLM's CPU
    build, a faster GPU than the entry, a small stand-in model served under a catalogue
    model's name), where the floor is not a bound; there it is logged as a warning only.
    """
    slo = study.slo
    if slo is None:
        return []
    floor_ms = step_floor_s(study) * 1e3
    found: list[Finding] = []
    for name in study.workload.class_names():
        limits = slo.for_class(name)
        if limits is None:
            continue
        where: Loc = ("slo", "classes", name) if name in slo.classes else ("slo", "default")
        for (metric, pct), limit_ms in limits.limits_ms().items():
            if metric in ("ttft", "itl") and limit_ms * SLO_FLOOR_MARGIN < floor_ms:
                loc = (*where, f"{metric}_p{pct}_ms")
                found.append(
                    (
                        loc,
                        f"{limit_ms:g} ms cannot be met at any load: one step of "
                        f"{study.model.name} on {study.gpus} x {study.gpu.name} takes "
                        f"at least {floor_ms:.3g} ms (its weights streamed once at "
                        f"peak bandwidth, 4-bit)",
                    )
                )
    found = list(dict.fromkeys(found))  # a default shared by several classes, said once
    if found and not study.backend.simulated:
        for loc, problem in found:
            log.warning("study.slo_below_floor", field=".".join(map(str, loc)), problem=problem)
        return []
    return found


def late(study: StudySpec, now: datetime) -> list[Finding]:
    """A deadline already past, or too close for one baseline."""
    problem = deadline_problem(study, now)
    return [] if problem is None else [(("budget", "deadline"), problem)]
