"""Typed, frozen records that cross every boundary of kneepoint.

Field names carry their units (``ttft_p99_ms``, ``memory_mib``); ``None`` means "not set"
(for engine knobs: the engine's default; for telemetry: the source cannot tell).
"""

from kneepoint.records.backend_spec import AttachBackend, SimBackend, VllmBackend
from kneepoint.records.base import Record
from kneepoint.records.budget import Budget
from kneepoint.records.engine import EngineConfig, flag_for, knob_fields
from kneepoint.records.hardware import GpuSpec, ModelSpec
from kneepoint.records.knobs import CONSTRAINTS, Constraint, Knob, KnobCatalogue
from kneepoint.records.objective import GoodputAtRate, Objective, PeakThroughput, SloCapacity
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.records.study import StudySpec
from kneepoint.records.workload import TrafficClass, Workload

__all__ = [
    "CONSTRAINTS",
    "AttachBackend",
    "Budget",
    "ClassSlo",
    "Constraint",
    "EngineConfig",
    "GoodputAtRate",
    "GpuSpec",
    "Knob",
    "KnobCatalogue",
    "ModelSpec",
    "Objective",
    "PeakThroughput",
    "Record",
    "SimBackend",
    "Slo",
    "SloCapacity",
    "StudySpec",
    "TrafficClass",
    "VllmBackend",
    "Workload",
    "flag_for",
    "knob_fields",
]
