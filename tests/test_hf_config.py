"""Models given as a Hugging Face config.json instead of a catalogue name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneepoint.config import ConfigError, load_study, model_catalogue, model_from_hf_config

from .conftest import QUICKSTART

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN3_MOE = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
}


def _write(directory: Path, config: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_dense_config_matches_the_catalogue_entry(tmp_path: Path) -> None:
    spec = model_from_hf_config(_write(tmp_path / "Llama-3.1-8B", LLAMA_8B))
    reference = model_catalogue()["llama-3.1-8b"]
    assert spec.name == "Llama-3.1-8B"
    assert spec.head_dim == 128  # derived: hidden / heads
    assert spec.kv_bytes_per_token() == reference.kv_bytes_per_token()
    assert spec.total_params() == pytest.approx(reference.total_params(), rel=0.01)


def test_moe_config_counts_active_parameters(tmp_path: Path) -> None:
    spec = model_from_hf_config(_write(tmp_path / "q", QWEN3_MOE) / "config.json")
    assert spec.is_moe
    assert spec.total_params() == pytest.approx(30.5e9, rel=0.02)
    assert spec.active_params() == pytest.approx(3.3e9, rel=0.03)


def test_multimodal_configs_are_read_through_text_config(tmp_path: Path) -> None:
    spec = model_from_hf_config(_write(tmp_path / "vl", {"text_config": LLAMA_8B}))
    assert spec.num_layers == 32


def test_a_study_can_name_a_config_json(tmp_path: Path) -> None:
    _write(tmp_path / "mymodel", LLAMA_8B)
    study_path = tmp_path / "study.yaml"
    study_path.write_text(
        QUICKSTART.read_text().replace("model: llama-3.1-8b", "model: mymodel/config.json")
    )
    study = load_study(study_path)
    assert study.model.name == "mymodel"
    assert study.engine.model == "mymodel"  # no hf_id: the served model defaults to its name


def test_incomplete_config_names_the_file_and_field(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA_8B.items() if k != "num_hidden_layers"}
    path = _write(tmp_path / "m", config) / "config.json"
    with pytest.raises(ConfigError) as info:
        model_from_hf_config(path)
    assert str(info.value) == f"{path}: num_layers: required field is missing"


def test_invalid_json_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,\n  "oops"}')
    with pytest.raises(ConfigError, match=rf"^{path}:2: not valid JSON"):
        model_from_hf_config(path)


def test_unreadable_config_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"hidden_size": "\xff\xfe"}')
    with pytest.raises(ConfigError, match=rf"^{path}: cannot read file: .*utf-8"):
        model_from_hf_config(path)
