"""JSON Schema of the study file format, for editor completion and validation.

The file format is the StudySpec with its references allowed: ``gpu``, ``model`` and
``workload`` may be names (or paths) instead of records, ``calibration`` is a path,
``engine.model`` may be left out (the catalogue model's Hugging Face id is used), and ``slo``
may come from the workload preset.
"""

from __future__ import annotations

from typing import Any

from kneepoint.records import StudySpec

_REFERENCES = {
    "gpu": "GPU catalogue name (configs/gpus.yaml), e.g. h100-sxm",
    "model": "model catalogue name (configs/models.yaml) or a path to a Hugging Face config.json",
    "workload": "workload preset name (configs/workloads) or a path to a workload file",
    "calibration": "path to a calibration file written by `kneepoint calibrate`",
}


def study_file_schema() -> dict[str, Any]:
    schema = StudySpec.model_json_schema(mode="validation")
    properties = schema["properties"]
    for name, description in _REFERENCES.items():
        record = properties[name]
        properties[name] = {
            "anyOf": [{"type": "string", "description": description}, record],
            "description": record.get("description", description),
        }
    schema["required"] = [r for r in schema.get("required", []) if r != "slo"]
    engine = schema["$defs"]["EngineConfig"]
    engine["required"] = [r for r in engine.get("required", []) if r != "model"]
    schema["title"] = "kneepoint study file"
    return schema
