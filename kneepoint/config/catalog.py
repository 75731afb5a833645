"""The shipped catalogues (GPUs, models, knobs) and presets, and models from `config.json`.

From a source checkout the files are read from the repository's ``configs/``; an installed
wheel carries the same files as ``kneepoint/_configs``.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import Field, model_validator

from kneepoint.config.errors import ConfigError, Problem
from kneepoint.config.hf_window import window_fields, with_model_type_defaults
from kneepoint.config.validation import validate
from kneepoint.config.yaml_bounds import TOO_DEEP
from kneepoint.config.yamlio import YamlDoc, read_mapping, read_text
from kneepoint.records import (
    EngineConfig,
    GpuSpec,
    KnobCatalogue,
    ModelSpec,
    Record,
    flag_for,
    knob_fields,
)

_PACKAGE = Path(__file__).resolve().parent.parent


def configs_dir() -> Path:
    """The directory holding the shipped catalogues and presets."""
    for candidate in (_PACKAGE / "_configs", _PACKAGE.parent / "configs"):
        if (candidate / "knobs.yaml").is_file():
            return candidate
    raise FileNotFoundError("kneepoint's configs/ directory is missing from this installation")


class GpuCatalogue(Record):
    gpus: tuple[GpuSpec, ...] = Field(min_length=1)


class ModelCatalogue(Record):
    models: tuple[ModelSpec, ...] = Field(min_length=1)


def read_gpu_catalogue(path: Path) -> dict[str, GpuSpec]:
    doc = read_mapping(path)
    return _by_name(doc, validate(GpuCatalogue, doc.data, doc).gpus, "gpus")


def read_model_catalogue(path: Path) -> dict[str, ModelSpec]:
    doc = read_mapping(path)
    return _by_name(doc, validate(ModelCatalogue, doc.data, doc).models, "models")


@cache
def gpu_catalogue() -> dict[str, GpuSpec]:
    """The shipped GPU catalogue, by name."""
    return read_gpu_catalogue(configs_dir() / "gpus.yaml")


@cache
def model_catalogue() -> dict[str, ModelSpec]:
    """The shipped model catalogue, by name."""
    return read_model_catalogue(configs_dir() / "models.yaml")


def _by_name(doc: YamlDoc, items: tuple[Any, ...], field: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for i, item in enumerate(items):
        if item.name in found:
            loc = (field, i, "name")
            problem = f"name {item.name!r} appears more than once"
            raise ConfigError([Problem(doc.source, doc.line_of(loc), loc, problem)])
        found[item.name] = item
    return found


class _CheckedKnobCatalogue(KnobCatalogue):
    """The knob catalogue, checked against EngineConfig: every knob names a field, its flag is
    that field's vLLM spelling, and its domain's values are values the field accepts."""

    @model_validator(mode="after")
    def _matches_engine(self) -> _CheckedKnobCatalogue:
        fields = knob_fields()
        for i, knob in enumerate(self.knobs):
            if knob.name not in fields:
                raise ValueError(f"knobs[{i}].name: {knob.name!r} is not an EngineConfig knob")
            if knob.flag != flag_for(knob.name):
                raise ValueError(f"knobs[{i}].flag: must be {flag_for(knob.name)!r}")
            for value in knob.domain.named_values:
                try:
                    EngineConfig(model="check", **{knob.name: value})
                except ValueError as exc:
                    raise ValueError(
                        f"knobs[{i}].domain: {value!r} is not a valid {knob.name}"
                    ) from exc
        return self


def exact_key(entries: dict[str, Any], ref: str) -> str | None:
    """The catalogue key ``ref`` names as a person writes it: the key itself, or a model's
    Hugging Face id (the one kneepoint prints in its own `vllm serve` line), in any case."""
    wanted = ref.casefold()
    for key, entry in entries.items():
        if wanted in (key.casefold(), (getattr(entry, "hf_id", None) or "").casefold()):
            return key
    return None


_VARIANT = re.compile(r"(-(instruct|chat|it|pt|base|hf)|-v\d+(\.\d+)?|-\d{4})+$")
"""The tails one family's checkpoints differ by (Llama-3.1-8B and Llama-3.1-8B-Instruct,
Qwen3-30B-A3B and Qwen3-30B-A3B-Instruct-2507, Mistral-7B-v0.1 and Mistral-7B-Instruct-v0.3):
same shapes, other weights."""


def _family(hf_id: str) -> str:
    repo = hf_id.rsplit("/", 1)[-1].casefold().removeprefix("meta-")
    return _VARIANT.sub("", repo)


def family_key(entries: dict[str, Any], ref: str) -> str | None:
    """The catalogue model whose Hugging Face id is ``ref``'s family (``ref`` an id with an
    organisation): `meta-llama/Llama-3.1-8B` and `meta-llama/Meta-Llama-3.1-8B-Instruct` read
    llama-3.1-8b's shapes, where taking `Llama-3.1-8B` as a prefix would refuse both. None
    where no entry, or more than one, is of that family."""
    if ref.count("/") != 1:
        return None
    wanted = _family(ref)
    found = [k for k, e in entries.items() if _family(getattr(e, "hf_id", None) or "") == wanted]
    return found[0] if len(found) == 1 else None


def prefix_keys(entries: dict[str, Any], ref: str) -> tuple[str, ...]:
    """The catalogue keys ``ref`` begins (``h100`` for ``h100-sxm``): one where it is
    unambiguous, so that a study's `gpu: h100` reads as `sim serve --gpu h100` does."""
    wanted = ref.casefold()
    return tuple(key for key in entries if key.casefold().startswith(wanted))


def hf_cache_config(ref: str) -> Path | None:
    """A Hugging Face id's config.json in the local hub cache at its ``refs/main`` revision,
    the one ``vllm serve`` loads (offline: nothing is fetched); None where the cache does not
    hold it. Read through huggingface_hub, which knows the cache's layout and its
    ``HF_HOME``/``HF_HUB_CACHE`` settings."""
    if ref.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache  # 0.1 s: only for an id to look up

    found = try_to_load_from_cache(ref, "config.json")
    return Path(found) if isinstance(found, str) else None


def read_knob_catalogue(path: Path) -> KnobCatalogue:
    doc = read_mapping(path)
    return KnobCatalogue(knobs=validate(_CheckedKnobCatalogue, doc.data, doc).knobs)


@cache
def knob_catalogue() -> KnobCatalogue:
    """The shipped knob catalogue, checked against EngineConfig."""
    return read_knob_catalogue(configs_dir() / "knobs.yaml")


def is_file(path: Path) -> bool:
    """``path.is_file()`` for whatever a study names: a name the OS refuses (too long, a
    component that is not a directory) is no file rather than an OSError."""
    try:
        return path.is_file()
    except OSError:
        return False


def find_preset(kind: str, name: str) -> Path | None:
    """The shipped preset file ``configs/<kind>/<name>.yaml``, if there is one."""
    path = configs_dir() / kind / f"{name}.yaml"
    return path if is_file(path) else None


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (configs_dir() / kind).glob("*.yaml"))


_HF_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "intermediate_size": ("intermediate_size", "ffn_dim"),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
}


def model_from_hf_config(path: Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (or a directory holding one).

    Parameter counts are estimated from the shape. Multimodal configs are read through their
    ``text_config``; sliding-window layers as ``kneepoint.config.hf_window`` reads them.
    """
    file = path / "config.json" if path.is_dir() else path
    source = str(file)
    text = read_text(file)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON: {exc.msg} (column {exc.colno})"
        raise ConfigError([Problem(source, exc.lineno, None, problem)]) from exc
    except RecursionError as exc:
        raise ConfigError([Problem(source, None, None, TOO_DEEP)]) from exc
    except ValueError as exc:  # an integer past Python's 4,300-digit limit on int()
        problem = f"not a JSON Python reads: {str(exc).split(':')[0]}"
        raise ConfigError([Problem(source, None, None, problem)]) from exc
    if not isinstance(config, dict):
        raise ConfigError([Problem(source, 1, None, "config.json must hold a JSON object")])
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        config = {**config, **text_config}
    config = with_model_type_defaults(config)
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers"):
        # The shape is computed with before it is validated: a "4096" or a 0 is named here.
        if key in config and not _count(config[key]):
            problem = f"must be a whole number above 0 (got {str(config[key])[:40]!r})"
            raise ConfigError([Problem(source, None, (key,), problem)])
    fields = _hf_fields(config, name or (path.name if path.is_dir() else path.parent.name))
    if isinstance(fields.get("num_layers"), int):
        fields.update(window_fields(config, fields["num_layers"], source))
    doc = YamlDoc(source=source, data=fields, root=None)
    return validate(ModelSpec, fields, doc)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _hf_fields(config: dict[str, Any], name: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": name}
    for field, keys in _HF_KEYS.items():
        value = next((config[k] for k in keys if k in config), None)
        if value is not None:
            fields[field] = value
    heads = fields.get("num_attention_heads")
    fields["num_kv_heads"] = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim")
    hidden = fields.get("hidden_size")
    if not head_dim and _count(heads) and _count(hidden):
        head_dim = hidden // heads
    fields["head_dim"] = head_dim
    fields["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    experts = config.get("num_experts") or config.get("num_local_experts") or 0
    if experts:
        fields["num_experts"] = experts
        fields["experts_per_token"] = config.get("num_experts_per_tok", 0)
        fields["moe_intermediate_size"] = config.get(
            "moe_intermediate_size", fields.get("intermediate_size", 0)
        )
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    fields["weight_dtype_bytes"] = 4.0 if dtype in {"float32", "float"} else 2.0
    return fields
