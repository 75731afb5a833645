"""The contract every backend kind keeps (``kneepoint.records.backend_spec``), one suite run over
every kind a study can name, as Optuna runs one suite over every storage: a new kind added to
the ``Backend`` union is held to it without a line added here."""

from __future__ import annotations

import shlex
import sys
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kneepoint.config import load_study
from kneepoint.load.size import PointSize
from kneepoint.probes.backends import BACKENDS, LaunchBackend, open_target, sim_argv
from kneepoint.records.backend_spec import (
    AttachBackend,
    Backend,
    BackendSpec,
    SimBackend,
    VllmBackend,
)
from kneepoint.records.engine import EngineConfig
from kneepoint.run.folder import serve_command
from tests.conftest import QUICKSTART, SMALL
from tests.support.pruned import run
from tests.support.readings import COMPUTE

KINDS: tuple[type[BackendSpec], ...] = typing.get_args(typing.get_args(Backend)[0])
REQUIRED = {"url": "http://127.0.0.1:8000"}
VARIANTS = [
    kind(**{k: v for k, v in REQUIRED.items() if k in kind.model_fields}, **extra)
    for kind in KINDS
    for extra in (
        {},
        *([{"clock": "http"}] if "clock" in kind.model_fields else []),
        *([{"vllm_version": "0.11.2"}] if "vllm_version" in kind.model_fields else []),
        *([{"api_key_env": "SERVER_KEY"}] if "api_key_env" in kind.model_fields else []),
    )
]
CONFIG = EngineConfig(model="meta-llama/Llama-3.1-8B-Instruct", max_num_seqs=64)


@pytest.fixture(params=VARIANTS, ids=lambda b: b.model_dump_json(exclude_defaults=True))
def backend(request: pytest.FixtureRequest) -> BackendSpec:
    return typing.cast(BackendSpec, request.param)


def test_every_kind_opens_through_the_one_registry(backend: BackendSpec) -> None:
    kind = typing.cast(str, getattr(backend, "kind"))  # noqa: B009 - every kind has one
    assert kind in BACKENDS


FAKE_VLLM = Path(__file__).resolve().parent / "support" / "fakes" / "fake_vllm.py"
WIDE = ["engine.max_num_seqs=16"]
"""The small study's 2-sequence cap serves a server's 16 warm-up requests two at a time (~5 s
of a simulator's real time); the contract is the same at 16."""


SIM_CLOCKS = typing.get_args(SimBackend.model_fields["clock"].annotation)
SERVED = [f"sim {clock}" for clock in SIM_CLOCKS] + [k for k in sorted(BACKENDS) if k != "sim"]
"""Every kind the registry opens, the simulator on each of its clocks."""


@contextmanager
def _serving(served: str, folder: Path) -> Iterator[BackendSpec]:
    """A backend of ``served`` for the small study; attach gets a launched simulator to reach."""
    if served != "attach":
        yield {
            "sim virtual": SimBackend(),
            "sim http": SimBackend(clock="http"),
            "vllm": VllmBackend(command=(sys.executable, str(FAKE_VLLM), "serve")),
        }[served]
        return
    study = load_study(SMALL, WIDE)
    with LaunchBackend(sim_argv(study.gpu.name, study.model.name)).serve(
        study.engine, folder
    ) as running:
        yield AttachBackend(url=running.url)


@pytest.mark.parametrize("served", SERVED)
def test_every_kind_serves_the_study_and_measures_one_point(served: str, tmp_path: Path) -> None:
    kept = []
    with _serving(served, tmp_path / "attached") as backend:
        study = load_study(SMALL, WIDE).model_copy(update={"backend": backend})
        size = PointSize(seconds=1.0, min_requests=6)  # one point, not a long one: 6 requests
        with open_target(study, study.engine, tmp_path, size, kept.append) as target:
            point = target.probe(6.0, 0)
            seconds = target.clock.seconds()
    assert point.completed == point.sent > 0 and point.failed == 0  # the stable window's
    assert [(k.rate_rps, k.attempt) for k in kept] == [(6.0, 0)]
    records = kept[0].records
    assert len(records) == size.requests(6.0) and all(r.ok for r in records)
    assert seconds > 0.0


def test_its_clock_and_outputs_follow_from_what_it_runs(backend: BackendSpec) -> None:
    assert not backend.virtual_clock or backend.simulated
    assert backend.real_outputs == (not backend.simulated)
    if backend.injected_faults is not None:
        assert backend.simulated  # faults are injected into the simulator only


def test_the_command_it_serves_a_configuration_with_runs_that_configuration(
    backend: BackendSpec,
) -> None:
    argv = backend.serve_argv(CONFIG)
    assert CONFIG.model in argv and "--max-num-seqs" in argv
    command = backend.launch_command
    assert command is None or tuple(argv[: len(command)]) == command
    study = load_study(QUICKSTART).model_copy(update={"backend": backend})
    assert serve_command(study, CONFIG) == shlex.join(argv)


def test_a_launched_version_key_and_environment_are_its_own(backend: BackendSpec) -> None:
    version = getattr(backend, "vllm_version", None)
    assert backend.stated_vllm_version == version
    assert backend.api_key_variable == getattr(backend, "api_key_env", None)
    if backend.launch_command is None:
        assert not backend.launch_env
    moved = backend.on_gpus(("2", "3"))
    assert type(moved) is type(backend)
    assert getattr(moved, "gpu_ids", ("2", "3")) == ("2", "3")  # a label where it launches nothing


def test_pruning_respects_what_it_owns_and_what_it_ignores(backend: BackendSpec) -> None:
    pruning, _ = run("bandwidth", COMPUTE, backend=backend)
    ruled = {r.knob: r.reason for r in pruning.ruled_out}
    if not backend.owns_knobs:
        assert not pruning.candidates
        assert all("not ours" in reason for reason in ruled.values())
    for knob, why in backend.unmodeled_knobs.items():
        assert ruled.get(knob) == why
    assert not {c.knob.name for c in pruning.candidates} & set(backend.unmodeled_knobs)


def test_the_simulator_names_what_it_would_ignore() -> None:
    # a change the simulator would silently ignore proves nothing: the virtual clock models
    # n-gram drafts from the workload's classes; the HTTP server knows no classes' drafts,
    # runs one API server and one engine, and offloads no KV
    assert set(SimBackend().unmodeled_knobs) == set()
    http = SimBackend(clock="http").unmodeled_knobs
    assert set(http) == {
        "speculative_config", "api_server_count", "kv_offloading_size", "data_parallel_size"
    }  # fmt: skip
