"""The knobs of one serving-engine configuration, and their exact `vllm serve` rendering.

Every modeled knob is spelled on vLLM's command line as its field name with dashes
(``max_num_seqs`` -> ``--max-num-seqs``), so the flag of a field is derived, never typed twice.
``None`` always means "leave it to the engine's default": nothing is rendered for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import Field, JsonValue, field_validator, model_validator

from kneepoint.records.base import InputRecord
from kneepoint.records.secret_env import secret_flag, secret_shaped, where_instead

# The union over vLLM 0.3 - 0.33; which of them a given release accepts varies.
KvCacheDtype = Literal[
    "auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "nvfp4"
]
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
PerformanceMode = Literal["balanced", "interactivity", "throughput"]

# Flags the backend owns (where the server listens, which config file it reads); letting
# extra_args set them would make the launched server differ from the one we think we run.
_BACKEND_OWNED_FLAGS = frozenset({"--host", "--port", "--config", "--model"})
_NOT_KNOBS = frozenset({"model", "extra_args"})


class VllmConfigFile(NamedTuple):
    """A rendering for ``vllm serve --config FILE``: the file's text, and the arguments that
    must be passed on the command line beside it."""

    yaml_text: str
    cli_args: tuple[str, ...]


def flag_for(field_name: str) -> str:
    """The vLLM long option for a knob field: ``max_num_seqs`` -> ``--max-num-seqs``."""
    return "--" + field_name.replace("_", "-")


class EngineConfig(InputRecord):
    """One server's configuration. Unset (``None``) knobs are the engine's defaults."""

    model: str = Field(min_length=1)
    """The model vLLM serves: a Hugging Face id or a local directory."""
    max_num_seqs: int | None = Field(default=None, ge=1)
    """Most sequences scheduled at once (running batch cap)."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """Token budget of one engine step; also the prefill chunk size."""
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    """Fraction of GPU memory for weights, activations and KV cache."""
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """KV cache size in bytes; replaces the fraction when set."""
    max_model_len: int | None = Field(default=None, ge=1)
    """Longest prompt + output, in tokens."""
    kv_cache_dtype: KvCacheDtype | None = None
    """Element type of the KV cache; fp8 halves its bytes per token."""
    quantization: str | None = Field(default=None, pattern=r"^[a-z0-9_\-]+$")
    """Weight quantization method (e.g. fp8). Changes model outputs."""
    enable_prefix_caching: bool | None = None
    """Reuse KV blocks of shared prompt prefixes."""
    block_size: int | None = None
    """Tokens per KV cache block."""
    async_scheduling: bool | None = None
    """Overlap CPU-side scheduling with GPU execution."""
    enforce_eager: bool | None = None
    """Disable CUDA graphs (less memory, faster start, slower decode)."""
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    """GPUs one model replica is split across."""
    data_parallel_size: int | None = Field(default=None, ge=1)
    """Replicas of the model one server runs, each on tensor_parallel_size GPUs of its own,
    behind vLLM's internal load balancer."""
    enable_expert_parallel: bool | None = None
    """A mixture-of-experts model's routed experts whole on each GPU (E/GPUs of them) rather
    than a slice of every expert on each; either way spread over all TP x DP GPUs."""
    long_prefill_token_threshold: int | None = Field(default=None, ge=0)
    """Cap on one request's prefill tokens per step."""
    stream_interval: int | None = Field(default=None, ge=1)
    """Tokens per streamed chunk."""
    speculative_config: dict[str, JsonValue] | None = None
    """Speculative decoding settings, passed to vLLM as JSON."""
    api_server_count: int | None = Field(default=None, ge=1)
    """API-server processes in front of the engine (`vllm serve` only)."""
    kv_offloading_size: float | None = Field(default=None, gt=0.0)
    """Host memory, in GiB, vLLM's native connector offloads KV blocks to and loads prefix
    hits back from (the total over tensor-parallel ranks)."""
    performance_mode: PerformanceMode | None = None
    """vLLM's intent flag (0.17 on): throughput doubles max_num_seqs and
    max_num_batched_tokens where they are left to their defaults; interactivity captures
    CUDA graphs at every batch size up to 32; balanced (unset) neither."""
    extra_args: tuple[str, ...] = ()
    """Further `vllm serve` arguments kneepoint does not model, passed through verbatim."""

    @field_validator("block_size")
    @classmethod
    def _known_block_size(cls, value: int | None) -> int | None:
        if value is not None and value not in BLOCK_SIZES:
            raise ValueError(f"must be one of {', '.join(map(str, BLOCK_SIZES))}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_modeled_flags(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        modeled = {flag_for(name) for name in knob_fields()}
        modeled |= {"--no-" + flag[2:] for flag in modeled}
        for arg in args:
            flag = arg.split("=", 1)[0].replace("_", "-")
            secret = secret_flag(arg)
            if secret is not None:  # its value is not repeated here: it is the secret
                raise ValueError(
                    f"{secret}: its value here would be seen in `ps` and written to the run "
                    f"folder and best-command.txt; {where_instead(secret)}"
                )
            if secret_shaped(arg):
                raise ValueError(
                    "an argument looks like a token; it would be written to the run folder "
                    "and best-command.txt: pass it through backend.env, written ${NAME}"
                )
            if flag in modeled:
                raise ValueError(f"{arg!r} is a modeled knob; set the engine field instead")
            if flag in _BACKEND_OWNED_FLAGS:
                raise ValueError(f"{arg!r} is chosen by the backend, not the engine config")
        return args

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        if self.gpu_memory_utilization is not None and self.kv_cache_memory_bytes is not None:
            raise ValueError(
                "kv_cache_memory_bytes: set either this or gpu_memory_utilization, not both "
                "(vLLM sizes the KV cache from the bytes and ignores the fraction)"
            )
        seqs, tokens = self.max_num_seqs, self.max_num_batched_tokens
        if seqs is not None and tokens is not None and tokens < seqs:
            # Named on the sequence cap, with both values: either may be the typo.
            raise ValueError(
                f"max_num_seqs: {seqs} exceeds max_num_batched_tokens ({tokens}); vLLM "
                "needs a step budget of at least one token per running sequence"
            )
        return self

    @property
    def gpu_count(self) -> int:
        """GPUs the server holds: tensor-parallel size times data-parallel replicas."""
        return (self.tensor_parallel_size or 1) * (self.data_parallel_size or 1)

    def knob_values(self) -> dict[str, Any]:
        """The knobs that are set, by field name, in declaration order."""
        return {name: value for name in knob_fields() if (value := getattr(self, name)) is not None}

    def flag_args(self) -> list[str]:
        """The set knobs as vLLM arguments, then ``extra_args``; the model is not included."""
        args: list[str] = []
        for name, value in self.knob_values().items():
            flag = flag_for(name)
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, dict):
                args += [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
            else:
                args += [flag, str(value)]
        return [*args, *self.extra_args]

    def serve_argv(
        self,
        command: Sequence[str] = ("vllm", "serve"),
        model_as: Literal["positional", "flag"] = "positional",
    ) -> list[str]:
        """The whole launch command as an argv list (never a shell string).

        ``vllm serve`` takes the model positionally; the bare API-server module
        (``python -m vllm.entrypoints.openai.api_server``) needs ``--model``.
        """
        model = [self.model] if model_as == "positional" else ["--model", self.model]
        return [*command, *model, *self.flag_args()]

    def vllm_config_file(self) -> VllmConfigFile:
        """The configuration as a vLLM ``--config`` YAML file plus the arguments that must
        stay on the command line.

        vLLM turns a YAML ``true`` into ``--flag`` but silently drops ``false`` (through at
        least 0.33 for ``vllm serve``), so negated booleans and ``extra_args`` go on the
        command line. Dicts are written as JSON strings: before 0.16 vLLM passed a YAML
        mapping on as Python text, which its JSON parser rejects.
        """
        body: dict[str, Any] = {"model": self.model}
        cli_args: list[str] = []
        for name, value in self.knob_values().items():
            key = flag_for(name)[2:]
            if value is False:
                cli_args.append("--no-" + key)
            elif isinstance(value, dict):
                body[key] = json.dumps(value, sort_keys=True, separators=(",", ":"))
            else:
                body[key] = value
        return VllmConfigFile(
            yaml_text=yaml.safe_dump(body, sort_keys=False),
            cli_args=(*cli_args, *self.extra_args),
        )

    def changes_from(self, base: EngineConfig) -> dict[str, tuple[Any, Any]]:
        """Fields that differ from ``base``, as ``{name: (base value, this value)}``."""
        return {
            name: (getattr(base, name), getattr(self, name))
            for name in type(self).model_fields
            if getattr(base, name) != getattr(self, name)
        }

    def replace(self, **changes: Any) -> EngineConfig:
        """A validated copy with ``changes`` applied (``model_copy`` would skip validation)."""
        return type(self).model_validate({**self.model_dump(), **changes})

    def fingerprint(self) -> str:
        """A stable short hash of the configuration, equal for equal configs. Unset knobs
        are left out, so a knob added to the record later leaves every fingerprint as it
        was (a run folder resumed by a newer kneepoint finds its trials by them)."""
        canonical = json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def knob_fields() -> tuple[str, ...]:
    """Names of the EngineConfig fields that are tunable knobs, in declaration order."""
    return tuple(name for name in EngineConfig.model_fields if name not in _NOT_KNOBS)
