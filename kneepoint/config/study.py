"""Load a study file into a validated StudySpec.

A study file may refer to things by name instead of spelling them out: ``gpu: h100-sxm`` and
``model: llama-3.1-8b`` (catalogue entries; a model may also be a path to a Hugging Face
``config.json``), ``workload: chat`` (a preset in configs/workloads, or a path to a workload
file, whose SLOs are used when the study gives none). Loading replaces every reference by its
record, applies ``--set`` overrides, and validates once; problems come back as one
ConfigError, each naming its file (or override), line and field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kneepoint.config.catalog import (
    exact_key,
    family_key,
    find_preset,
    gpu_catalogue,
    hf_cache_config,
    is_file,
    knob_catalogue,
    model_catalogue,
    model_from_hf_config,
    prefix_keys,
    preset_names,
)
from kneepoint.config.errors import ConfigError, Loc, Problem
from kneepoint.config.overrides import Override, apply_override, parse_override
from kneepoint.config.trace import read_trace
from kneepoint.config.validation import validate
from kneepoint.config.yamlio import YamlDoc, read_mapping
from kneepoint.records import Calibration, Record, Slo, StudySpec, TraceArrivals, Workload

StudyCheck = Callable[[StudySpec], Sequence[tuple[Loc, str]]]
"""A check of a validated study that needs more than the records know (the physics, the
installed vLLM, the clock: kneepoint.tune.feasibility), as (field path, problem) pairs; the
loader locates each in the file or the --set that gave it."""


class WorkloadFile(Record):
    """A workload preset file: the workload and, optionally, SLOs that suit it."""

    workload: Workload
    slo: Slo | None = None


@dataclass
class _Resolver:
    """Replaces references in the raw study tree, remembering what it resolved."""

    doc: YamlDoc
    overrides: Sequence[Override]
    preset_slo: dict[str, Any] | None = None

    def fail(self, loc: Loc, problem: str) -> ConfigError:
        source, line = self.locate(loc)
        return ConfigError([Problem(source, line, loc, problem)])

    def locate(self, loc: Loc) -> tuple[str, int | None]:
        for override in reversed(self.overrides):
            if override.explains(loc):
                return override.source, None
        return self.doc.source, self.doc.line_of(loc)

    def base_dir(self) -> Path:
        return Path(self.doc.source).resolve().parent

    def gpu(self, raw: dict[str, Any]) -> None:
        ref = raw.get("gpu")
        if isinstance(ref, str):
            catalogue = gpu_catalogue()
            key = exact_key(catalogue, ref)
            found = (key,) if key is not None else prefix_keys(catalogue, ref)
            if len(found) != 1:
                said = "ambiguous GPU" if found else "unknown GPU"
                choices = ", ".join(found or catalogue)
                raise self.fail(("gpu",), f"{said} {ref!r} (catalogue: {choices})")
            raw["gpu"] = catalogue[found[0]].model_dump(mode="json")

    def model(self, raw: dict[str, Any]) -> None:
        """A catalogue key or Hugging Face id, a path to a config.json (or its folder), a
        Hugging Face id in the local hub cache, a Hugging Face id of a catalogue model's
        family (served as named, with the catalogue's shapes), or an unambiguous prefix of a
        key; in that order, so a folder of the study's is read before a key it happens to
        begin."""
        ref = raw.get("model")
        if not isinstance(ref, str):
            return
        catalogue = model_catalogue()
        key = exact_key(catalogue, ref)
        if key is not None:
            raw["model"] = catalogue[key].model_dump(mode="json")
            return
        path = self.base_dir() / ref
        if is_file(path) or is_file(path / "config.json"):
            raw["model"] = model_from_hf_config(path).model_dump(mode="json")
            return
        cached = hf_cache_config(ref)
        if cached is not None:  # named by its id: its folder is a snapshot's hash
            spec = model_from_hf_config(cached, name=ref.rsplit("/", 1)[-1])
            raw["model"] = spec.model_copy(update={"hf_id": ref}).model_dump(mode="json")
            return
        family = family_key(catalogue, ref)
        if family is not None:
            raw["model"] = {**catalogue[family].model_dump(mode="json"), "hf_id": ref}
            return
        found = prefix_keys(catalogue, ref)
        if len(found) == 1:
            raw["model"] = catalogue[found[0]].model_dump(mode="json")
            return
        raise self.fail(
            ("model",),
            f"{ref!r} is neither a catalogue model ({', '.join(found or catalogue)}), nor a "
            "path to a Hugging Face config.json, nor a Hugging Face id in the local hub cache",
        )

    def served_model(self, raw: dict[str, Any]) -> None:
        engine, model = raw.get("engine"), raw.get("model")
        if isinstance(engine, dict) and "model" not in engine and isinstance(model, dict):
            engine["model"] = model.get("hf_id") or model.get("name")

    def workload(self, raw: dict[str, Any]) -> None:
        ref = raw.get("workload")
        if isinstance(ref, str):
            preset = self._read_workload_file(ref)
            raw["workload"] = preset.workload.model_dump(mode="json")
            if preset.slo is not None:
                self.preset_slo = preset.slo.model_dump(mode="json", exclude_none=True)
        elif isinstance(ref, dict):
            _absolute_trace(ref, self.base_dir())

    def calibration(self, raw: dict[str, Any]) -> None:
        """``calibration: FILE`` (a `kneepoint calibrate` output, relative to the study) read
        in; it must have been fitted on this study's GPU and model."""
        ref = raw.get("calibration")
        if not isinstance(ref, str):
            return
        path = self.base_dir() / ref
        if not is_file(path):
            raise self.fail(("calibration",), f"no such file: {path}")
        found = validate(Calibration, read_mapping(path).data, read_mapping(path))
        gpu, model = raw.get("gpu"), raw.get("model")
        names = (
            gpu.get("name") if isinstance(gpu, dict) else gpu,
            model.get("name") if isinstance(model, dict) else model,
        )
        if (found.gpu, found.model) != names:
            raise self.fail(
                ("calibration",),
                f"{ref} was fitted for {found.gpu} / {found.model}, not {names[0]} / {names[1]}",
            )
        raw["calibration"] = found.model_dump(mode="json")

    def _read_workload_file(self, ref: str) -> WorkloadFile:
        path = find_preset("workloads", ref) if "/" not in ref else None
        if path is None:
            path = self.base_dir() / ref
            if not is_file(path):
                known = ", ".join(preset_names("workloads"))
                raise self.fail(
                    ("workload",), f"{ref!r} is neither a preset ({known}) nor a workload file"
                )
        doc = read_mapping(path)
        _absolute_trace(doc.data.get("workload"), path.resolve().parent)
        return validate(WorkloadFile, doc.data, doc)


def _absolute_trace(workload: Any, base: Path) -> None:
    """Make a trace path relative to the file that names it absolute."""
    arrival = workload.get("arrival") if isinstance(workload, dict) else None
    if isinstance(arrival, dict) and arrival.get("kind") == "trace":
        path = arrival.get("path")
        if isinstance(path, str) and not Path(path).is_absolute():
            arrival["path"] = str(base / path)


def load_study(
    path: Path, overrides: Sequence[str | Override] = (), checks: Sequence[StudyCheck] = ()
) -> StudySpec:
    """Read, resolve, override and validate a study file, then run ``checks`` on it."""
    return resolve_study(read_mapping(path), overrides, checks)


def study_from_mapping(
    data: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> StudySpec:
    """A study given as a mapping (built from command-line options) rather than a file;
    problems name ``source`` instead of a file and line."""
    return resolve_study(YamlDoc(source, data, None), overrides)


def resolve_study(
    doc: YamlDoc, overrides: Sequence[str | Override] = (), checks: Sequence[StudyCheck] = ()
) -> StudySpec:
    """Resolve references, apply overrides (``--set`` texts, or parsed from another flag),
    validate a study document and run ``checks``."""
    parsed = [o if isinstance(o, Override) else parse_override(o) for o in overrides]
    resolver = _Resolver(doc, parsed)
    raw: dict[str, Any] = copy.deepcopy(doc.data)
    for override in parsed:
        if override.loc[:1] == ("workload",) and len(override.loc) > 1:
            # so overrides reach inside a preset's classes, one named before them included
            resolver.workload(raw)
        if override.loc[:1] == ("slo",) and len(override.loc) > 1 and "slo" not in raw:
            # one limit set on the preset's SLO keeps the others: `--set
            # slo.default.itl_p95_ms=1` had dropped the chat preset's TTFT limit
            resolver.workload(raw)
            if resolver.preset_slo is not None:
                raw["slo"] = copy.deepcopy(resolver.preset_slo)
        apply_override(raw, override)
    problems: list[Problem] = []
    for field, resolve in (
        ("gpu", resolver.gpu),
        ("model", resolver.model),
        ("workload", resolver.workload),
        ("engine", resolver.served_model),
        ("calibration", resolver.calibration),
    ):
        try:
            resolve(raw)
        except ConfigError as exc:  # every unknown name at once, not the first of them
            problems += exc.problems
            raw.pop(field, None)  # no second problem from the record about the same field
    if "slo" not in raw and resolver.preset_slo is not None:
        raw["slo"] = resolver.preset_slo
    try:
        study = validate(
            StudySpec, raw, doc, context={"knobs": knob_catalogue()}, source_of=resolver.locate
        )
    except ConfigError as exc:
        failed = {p.loc[:1] for p in problems if p.loc}
        if ("model",) in failed:  # the served name comes from the model
            failed.add(("engine", "model"))
        later = [p for p in exc.problems if not p.loc or not failed & {p.loc[:1], p.loc[:2]}]
        raise ConfigError(problems + later) from exc
    if problems:
        raise ConfigError(problems)
    _check_trace(study, resolver)
    found = [(loc, problem) for check in checks for loc, problem in check(study)]
    if found:
        raise ConfigError([Problem(*resolver.locate(loc), loc, problem) for loc, problem in found])
    return study


def _check_trace(study: StudySpec, resolver: _Resolver) -> None:
    arrival = study.workload.arrival
    if not isinstance(arrival, TraceArrivals):
        return
    if not is_file(arrival.path):
        raise resolver.fail(("workload", "arrival", "path"), f"no such file: {arrival.path}")
    # Read now: a bad row is named before anything runs, not when the first point starts.
    read_trace(arrival.path, study.workload.class_names(), arrival.format)
