"""Which layers of a Hugging Face ``config.json`` attend through a sliding window, and how wide.

Configs say it four ways: ``layer_types`` (one "sliding_attention" or "full_attention" per
layer: Gemma 3 in recent transformers, gpt-oss), ``sliding_window_pattern`` N (every N-th
layer full, the others sliding: Gemma 3), a bare ``sliding_window`` (every layer slides:
Mistral 7B v0.1), and ``use_sliding_window: false`` (Qwen2: the window is written but off).
A window no shorter than the model's context is no window. Some configs leave the pattern to
their transformers class's defaults (``MODEL_TYPE_DEFAULTS``).
"""

from __future__ import annotations

from typing import Any

from kneepoint.config.errors import ConfigError, Problem

MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma2Config: layer_types alternate, sliding first ((i + 1) % 2).
    "gemma2": {"sliding_window_pattern": 2},
    # transformers Gemma3TextConfig defaults, which google/gemma-3-12b-it's text_config relies
    # on (it writes only hidden_size, intermediate_size, layers, heads and sliding_window).
    "gemma3_text": {
        "sliding_window_pattern": 6,
        "head_dim": 256,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    },
}

_KINDS = ("sliding_attention", "full_attention")


def with_model_type_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its transformers class's defaults under what it writes itself."""
    defaults = MODEL_TYPE_DEFAULTS.get(str(config.get("model_type", "")), {})
    return {**defaults, **config}


def window_fields(config: dict[str, Any], num_layers: int, source: str) -> dict[str, Any]:
    """``sliding_window_tokens`` and ``sliding_window_layers`` for ModelSpec ({} for none)."""
    window = config.get("sliding_window")
    if window is None or config.get("use_sliding_window") is False:
        return {}
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise _problem(source, "sliding_window", f"must be a positive integer, not {window!r}")
    sliding = _sliding_layers(config, num_layers, source)
    if sliding is None:  # no pattern: every layer slides, unless the window spans the context
        context = config.get("max_position_embeddings")
        sliding = 0 if isinstance(context, int) and window >= context else num_layers
    if not sliding:
        return {}
    return {"sliding_window_tokens": window, "sliding_window_layers": sliding}


def _sliding_layers(config: dict[str, Any], num_layers: int, source: str) -> int | None:
    """Sliding layers per ``layer_types`` or ``sliding_window_pattern``; None if neither."""
    kinds = config.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != num_layers:
            raise _problem(source, "layer_types", f"must list one kind for each of {num_layers}")
        for i, kind in enumerate(kinds):
            if kind not in _KINDS:
                raise _problem(
                    source, f"layer_types[{i}]", f"{kind!r} is not one of {', '.join(_KINDS)}"
                )
        return sum(1 for kind in kinds if kind == "sliding_attention")
    pattern = config.get("sliding_window_pattern")
    if pattern is None:
        return None
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 1:
        raise _problem(
            source, "sliding_window_pattern", f"must be a positive integer, not {pattern!r}"
        )
    # layer i is full where (i + 1) % pattern == 0 (transformers Gemma3TextConfig)
    return num_layers - num_layers // pattern


def _problem(source: str, field: str, message: str) -> ConfigError:
    return ConfigError([Problem(source, None, (field,), message)])
