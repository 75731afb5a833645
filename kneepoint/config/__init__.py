"""YAML configuration files into validated records, with errors a person can act on."""

from kneepoint.config import arguments
from kneepoint.config.catalog import (
    configs_dir,
    exact_key,
    family_key,
    gpu_catalogue,
    knob_catalogue,
    model_catalogue,
    model_from_hf_config,
    prefix_keys,
    preset_names,
)
from kneepoint.config.errors import ConfigError, Loc, Problem, first_problem, render_loc
from kneepoint.config.gpu_identity import study_gpu_mismatch
from kneepoint.config.outputs import check_output
from kneepoint.config.overrides import add_overrides_argument, parse_override
from kneepoint.config.schema import study_file_schema
from kneepoint.config.study import WorkloadFile, load_study, study_from_mapping
from kneepoint.config.trace import workload_trace
from kneepoint.config.validation import validate
from kneepoint.config.yamlio import read_mapping

__all__ = [
    "ConfigError",
    "Loc",
    "Problem",
    "WorkloadFile",
    "add_overrides_argument",
    "arguments",
    "check_output",
    "configs_dir",
    "exact_key",
    "family_key",
    "first_problem",
    "gpu_catalogue",
    "knob_catalogue",
    "load_study",
    "model_catalogue",
    "model_from_hf_config",
    "parse_override",
    "prefix_keys",
    "preset_names",
    "read_mapping",
    "render_loc",
    "study_file_schema",
    "study_from_mapping",
    "study_gpu_mismatch",
    "validate",
    "workload_trace",
]
