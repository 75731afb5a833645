"""Every shipped config file loads cleanly, and the catalogues agree with what they describe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kneepoint.config import (
    ConfigError,
    WorkloadFile,
    configs_dir,
    gpu_catalogue,
    knob_catalogue,
    load_study,
    model_catalogue,
)
from kneepoint.config.catalog import read_knob_catalogue
from kneepoint.config.validation import validate
from kneepoint.config.yamlio import read_mapping
from kneepoint.records.engine import EngineConfig, flag_for, knob_fields
from kneepoint.records.knobs import BoolDomain, ChoiceDomain, FloatDomain, IntDomain

from .conftest import CONFIGS

STUDIES = sorted((CONFIGS / "studies").glob("*.yaml")) + sorted(
    (CONFIGS / "scenarios").glob("*.yaml")
)
WORKLOADS = sorted((CONFIGS / "workloads").glob("*.yaml"))


def test_configs_dir_is_the_repository_s() -> None:
    assert configs_dir().resolve() == CONFIGS.resolve()


def test_every_yaml_file_is_known_to_a_test() -> None:
    loaded_here = {*STUDIES, *WORKLOADS} | {CONFIGS / f for f in ("gpus.yaml", "models.yaml")}
    loaded_here.add(CONFIGS / "knobs.yaml")
    assert set(CONFIGS.rglob("*.yaml")) <= loaded_here


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_study_loads(path: Path) -> None:
    study = load_study(path)
    assert study.name == path.stem


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.name)
def test_workload_preset_loads(path: Path) -> None:
    doc = read_mapping(path)
    preset = validate(WorkloadFile, doc.data, doc)
    assert preset.workload.name == path.stem
    assert preset.slo is not None, "a preset ships SLOs that suit it"


def test_four_class_mix_has_shared_prefix_documents() -> None:
    doc = read_mapping(CONFIGS / "workloads" / "mix.yaml")
    mix = validate(WorkloadFile, doc.data, doc).workload
    assert mix.class_names() == ("siso", "silo", "liso", "lilo")
    shared = {c.name for c in mix.classes if c.prefix_group}
    assert shared == {"liso", "lilo"}


def test_gpu_catalogue_holds_the_reference_gpus() -> None:
    gpus = gpu_catalogue()
    assert {"h100-sxm", "h200-sxm", "a100-80gb-sxm", "l40s", "l4", "rtx-6000-ada"} <= set(gpus)
    assert not gpus["a100-80gb-sxm"].has_fp8
    assert gpus["h100-sxm"].has_gpm and not gpus["l40s"].has_gpm
    assert gpus["h100-sxm"].ridge_flop_per_byte() == pytest.approx(295, rel=0.01)


@pytest.mark.parametrize("name", sorted(model_catalogue()))
def test_published_parameter_counts_match_the_shapes(name: str) -> None:
    model = model_catalogue()[name]
    total, active = model.estimated_params()
    assert model.params_total == pytest.approx(total, rel=0.02)
    if model.params_active is not None:
        assert model.params_active == pytest.approx(active, rel=0.03)


@pytest.mark.parametrize(
    ("name", "kib"),
    [("llama-3.1-8b", 128), ("llama-3.1-70b", 320), ("qwen2.5-14b", 192), ("qwen3-30b-a3b", 96)],
)
def test_kv_bytes_per_token_match_the_reference(name: str, kib: int) -> None:
    model = model_catalogue()[name]
    assert model.kv_bytes_per_token() == kib * 1024
    assert model.kv_bytes_per_token(kv_dtype_bytes=1) == kib * 512


def test_kv_heads_split_by_tensor_parallelism_then_replicate() -> None:
    model = model_catalogue()["llama-3.1-70b"]  # 8 KV heads
    assert model.kv_bytes_per_token(tensor_parallel=4) == model.kv_bytes_per_token() / 4
    assert model.kv_bytes_per_token(tensor_parallel=16) == model.kv_bytes_per_token() / 8


def test_knob_catalogue_matches_engine_config() -> None:
    catalogue = knob_catalogue()
    for knob in catalogue.knobs:
        assert knob.name in knob_fields()
        assert knob.flag == flag_for(knob.name)
        domain = knob.domain
        if isinstance(domain, IntDomain | FloatDomain):
            EngineConfig(model="m", **{knob.name: domain.low})
            EngineConfig(model="m", **{knob.name: domain.high})
        elif isinstance(domain, ChoiceDomain):
            for choice in domain.choices:
                EngineConfig(model="m", **{knob.name: choice})
        else:
            assert isinstance(domain, BoolDomain)


def test_output_changing_knobs_are_flagged() -> None:
    catalogue = knob_catalogue()
    flagged = {k.name for k in catalogue.knobs if k.changes_outputs}
    assert {"quantization", "kv_cache_dtype"} <= flagged
    assert "max_num_seqs" not in flagged


def test_knob_versions_gate_new_flags() -> None:
    async_scheduling = knob_catalogue().get("async_scheduling")
    assert async_scheduling is not None
    assert async_scheduling.known_by("0.12.0")
    assert async_scheduling.known_by("0.11.0+cpu")
    assert not async_scheduling.known_by("0.6.3")


def test_a_broken_catalogue_is_reported_with_its_file(tmp_path: Path) -> None:
    bad = yaml.safe_load((CONFIGS / "knobs.yaml").read_text())
    bad["knobs"][0]["flag"] = "--max-seqs"
    path = tmp_path / "knobs.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as info:
        read_knob_catalogue(path)
    assert str(info.value).startswith(f"{path}:")
    assert "knobs[0].flag: must be '--max-num-seqs'" in str(info.value)
