"""EngineConfig: exact `vllm serve` argv, --config YAML, validation, identity."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import ValidationError

from kneepoint.records.engine import EngineConfig, flag_for, knob_fields

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_unset_knobs_render_nothing() -> None:
    assert EngineConfig(model=MODEL).serve_argv() == ["vllm", "serve", MODEL]


def test_every_knob_renders_exactly() -> None:
    config = EngineConfig(
        model=MODEL,
        max_num_seqs=128,
        max_num_batched_tokens=4096,
        gpu_memory_utilization=0.92,
        max_model_len=8192,
        kv_cache_dtype="fp8",
        quantization="fp8",
        enable_prefix_caching=True,
        block_size=32,
        async_scheduling=True,
        enforce_eager=False,
        tensor_parallel_size=2,
        long_prefill_token_threshold=512,
        stream_interval=4,
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        extra_args=("--seed", "7"),
    )
    assert config.serve_argv() == [
        "vllm", "serve", MODEL,
        "--max-num-seqs", "128",
        "--max-num-batched-tokens", "4096",
        "--gpu-memory-utilization", "0.92",
        "--max-model-len", "8192",
        "--kv-cache-dtype", "fp8",
        "--quantization", "fp8",
        "--enable-prefix-caching",
        "--block-size", "32",
        "--async-scheduling",
        "--no-enforce-eager",
        "--tensor-parallel-size", "2",
        "--long-prefill-token-threshold", "512",
        "--stream-interval", "4",
        "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
        "--seed", "7",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("field", "on", "off"),
    [
        ("enable_prefix_caching", "--enable-prefix-caching", "--no-enable-prefix-caching"),
        ("async_scheduling", "--async-scheduling", "--no-async-scheduling"),
        ("enforce_eager", "--enforce-eager", "--no-enforce-eager"),
    ],
)
def test_booleans_render_as_flag_or_negated_flag(field: str, on: str, off: str) -> None:
    assert EngineConfig(model=MODEL, **{field: True}).flag_args() == [on]
    assert EngineConfig(model=MODEL, **{field: False}).flag_args() == [off]


def test_kv_cache_bytes_render_as_plain_integer() -> None:
    config = EngineConfig(model=MODEL, kv_cache_memory_bytes=16 * 2**20)
    assert config.flag_args() == ["--kv-cache-memory-bytes", "16777216"]


def test_api_server_command_takes_model_as_flag() -> None:
    config = EngineConfig(model="/tmp/tiny", max_num_seqs=4)
    argv = config.serve_argv(
        command=("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"),
        model_as="flag",
    )
    assert argv == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/tmp/tiny", "--max-num-seqs", "4",
    ]  # fmt: skip


def test_flags_are_the_dashed_field_names() -> None:
    assert flag_for("max_num_batched_tokens") == "--max-num-batched-tokens"
    assert "model" not in knob_fields()
    assert "extra_args" not in knob_fields()


def test_config_file_keeps_what_vllm_would_drop_on_the_command_line() -> None:
    config = EngineConfig(
        model=MODEL,
        max_num_seqs=64,
        async_scheduling=True,
        enable_prefix_caching=False,
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        extra_args=("--seed", "1"),
    )
    rendered = config.vllm_config_file()
    assert yaml.safe_load(rendered.yaml_text) == {
        "model": MODEL,
        "max-num-seqs": 64,
        "async-scheduling": True,
        "speculative-config": '{"method":"ngram","num_speculative_tokens":3}',
    }
    assert rendered.cli_args == ("--no-enable-prefix-caching", "--seed", "1")


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"gpu_memory_utilization": 1.3}, "less than or equal to 1"),
        ({"gpu_memory_utilization": 0.0}, "greater than 0"),
        ({"max_num_seqs": 0}, "greater than or equal to 1"),
        ({"block_size": 24}, "must be one of"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
        (
            {"max_num_seqs": 512, "max_num_batched_tokens": 256},
            r"512 exceeds max_num_batched_tokens \(256\)",
        ),
        ({"gpu_memory_utilization": 0.9, "kv_cache_memory_bytes": 2**30}, "not both"),
        ({"extra_args": ("--max-num-seqs=4",)}, "modeled knob"),
        ({"extra_args": ("--no-enforce-eager",)}, "modeled knob"),
        ({"extra_args": ("--max_num_seqs", "4")}, "modeled knob"),
        ({"extra_args": ("--port", "8000")}, "chosen by the backend"),
        ({"max_num_sequences": 4}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_configs_are_refused(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        EngineConfig(model=MODEL, **changes)  # type: ignore[arg-type]


def test_records_are_frozen() -> None:
    config = EngineConfig(model=MODEL)
    with pytest.raises(ValidationError):
        config.max_num_seqs = 3  # type: ignore[misc]


def test_replace_validates_and_changes_from_lists_the_diff() -> None:
    base = EngineConfig(model=MODEL, max_num_seqs=256)
    challenger = base.replace(max_num_seqs=512, async_scheduling=True)
    assert challenger.changes_from(base) == {
        "max_num_seqs": (256, 512),
        "async_scheduling": (None, True),
    }
    with pytest.raises(ValidationError):
        base.replace(max_num_seqs=-1)


def test_fingerprint_identifies_equal_configs() -> None:
    a = EngineConfig(model=MODEL, max_num_seqs=8, speculative_config={"b": 1, "a": 2})
    b = EngineConfig(model=MODEL, speculative_config={"a": 2, "b": 1}, max_num_seqs=8)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != a.replace(max_num_seqs=9).fingerprint()


def test_a_knob_added_later_leaves_unset_configs_fingerprints_as_they_were() -> None:
    class Later(EngineConfig):
        new_knob: int | None = None

    assert Later(model=MODEL, max_num_seqs=8).fingerprint() == (
        EngineConfig(model=MODEL, max_num_seqs=8).fingerprint()
    )
    assert Later(model=MODEL, new_knob=1).fingerprint() != EngineConfig(model=MODEL).fingerprint()


def test_round_trips_through_json() -> None:
    config = EngineConfig(model=MODEL, max_num_seqs=8, extra_args=("--seed", "1"))
    assert EngineConfig.model_validate(json.loads(config.model_dump_json())) == config
