"""The knob catalogue's records: what each tunable engine knob is and what it can act on.

A knob is named after its EngineConfig field. Its entry says which of the four constraints
(compute, scheduling, bandwidth, cache) it can relieve, so pruning can drop knobs aimed at a
resource that does not bind; whether it changes model outputs (and so needs a quality check);
and which vLLM releases know the flag. The domains (the values a knob can take) are in
``kneepoint.records.knob_domains``, re-exported here.
"""

from __future__ import annotations

from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import Field, JsonValue, field_validator, model_validator

from kneepoint.records.base import InputRecord
from kneepoint.records.knob_domains import (
    BoolDomain,
    ChoiceDomain,
    FloatDomain,
    IntDomain,
    KnobDomain,
)

__all__ = [
    "CONSTRAINTS",
    "BoolDomain",
    "ChoiceDomain",
    "Condition",
    "Constraint",
    "FloatDomain",
    "IntDomain",
    "Knob",
    "KnobCatalogue",
    "KnobDomain",
]

Constraint = Literal["compute", "scheduling", "bandwidth", "cache"]
CONSTRAINTS: tuple[Constraint, ...] = ("compute", "scheduling", "bandwidth", "cache")

Condition = Literal[
    "fp8_tensor_cores",
    "multiple_gpus",
    "shared_prefixes",
    "unquantized_checkpoint",
    "awq_checkpoint",
    "gptq_checkpoint",
    "nvfp4_checkpoint",
    "marlin_kernels",
    "kv_host_offload",
    "moe_model",
    "gpu_device",
]
"""Conditions outside the engine without which a knob (or one of its values) cannot help: the
served checkpoint's own quantization decides which ``--quantization`` values load at all, the
GPU whether vLLM's Marlin kernels run on it, and the device whether it is a GPU at all (vLLM's
CPU build refuses 16-token KV blocks: its attention takes multiples of 32)."""


class Knob(InputRecord):
    """One tunable engine knob."""

    name: str = Field(min_length=1)
    """The EngineConfig field it sets."""
    flag: str = Field(pattern=r"^--[a-z0-9][a-z0-9\-]*$")
    domain: KnobDomain
    acts_on: tuple[Constraint, ...] = Field(min_length=1)
    """The constraints a change of this knob can relieve."""
    changes_outputs: bool = False
    """True where a change alters the model's outputs (needs a quality check)."""
    needs: tuple[Condition, ...] = ()
    """Conditions without which the knob cannot help."""
    value_needs: dict[str, tuple[Condition, ...]] = Field(default_factory=dict)
    """Conditions without which one choice cannot be tried, by choice as text (e.g. ``awq``
    needs an AWQ checkpoint, ``"16"`` a GPU); choices not named need nothing beyond
    ``needs``."""
    vllm_versions: str = ""
    """PEP 440 specifier of the vLLM releases that know the flag; empty means all."""
    restart_required: bool = True
    description: str = Field(min_length=1)

    @model_validator(mode="after")
    def _needs_name_choices(self) -> Knob:
        choices = self.domain.choices_or_empty
        unknown = sorted(set(self.value_needs) - {_as_key(c) for c in choices})
        if unknown:
            raise ValueError(f"value_needs: {', '.join(unknown)} are not choices of the domain")
        return self

    def choices_under(self, held: frozenset[Condition]) -> tuple[JsonValue, ...]:
        """The domain's choices whose needs ``held`` conditions meet (empty unless a choice)."""
        needs = self.value_needs
        return tuple(
            c for c in self.domain.choices_or_empty if set(needs.get(_as_key(c), ())) <= held
        )

    @field_validator("vllm_versions")
    @classmethod
    def _valid_specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {value!r}") from exc
        return value

    def known_by(self, vllm_version: str) -> bool:
        """Whether a vLLM release (e.g. '0.11.2' or '0.12.0+cpu') accepts this flag."""
        try:
            version = Version(vllm_version)
        except InvalidVersion as exc:
            raise ValueError(f"not a vLLM version: {vllm_version!r}") from exc
        return SpecifierSet(self.vllm_versions).contains(version, prereleases=True)


def _as_key(choice: JsonValue) -> str:
    """A choice as ``value_needs`` names it: a string as it is, any other value as text."""
    return choice if isinstance(choice, str) else str(choice)


class KnobCatalogue(InputRecord):
    """All knobs kneepoint may search, by name."""

    knobs: tuple[Knob, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> KnobCatalogue:
        names = [k.name for k in self.knobs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"knobs listed more than once: {', '.join(duplicates)}")
        return self

    def get(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)
