"""YAML configuration files into validated records, with errors a person can act on."""

from kneepoint.config.catalog import (
    configs_dir,
    gpu_catalogue,
    knob_catalogue,
    model_catalogue,
    model_from_hf_config,
)
from kneepoint.config.errors import ConfigError, Problem
from kneepoint.config.schema import study_file_schema
from kneepoint.config.study import WorkloadFile, load_study, study_from_mapping

__all__ = [
    "ConfigError",
    "Problem",
    "WorkloadFile",
    "configs_dir",
    "gpu_catalogue",
    "knob_catalogue",
    "load_study",
    "model_catalogue",
    "model_from_hf_config",
    "study_file_schema",
    "study_from_mapping",
]
