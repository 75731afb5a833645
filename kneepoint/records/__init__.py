"""Typed, frozen records that cross every boundary of kneepoint.

Field names carry their units (``ttft_p99_ms``, ``memory_mib``); ``None`` means "not set"
(for engine knobs: the engine's default; for telemetry: the source cannot tell).
"""

from kneepoint.records.artifacts import PointArtifacts
from kneepoint.records.backend_spec import AttachBackend, BackendSpec, SimBackend, VllmBackend
from kneepoint.records.base import Record
from kneepoint.records.budget import Budget
from kneepoint.records.calibration import Calibration
from kneepoint.records.diagnosis import (
    Binding,
    Diagnosis,
    Evidence,
    Observation,
    SchedulingKind,
    ServerResponse,
    SignalSource,
)
from kneepoint.records.drafts import AcceptanceProbe, DraftAcceptance
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig, flag_for, knob_fields
from kneepoint.records.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_RUN_FAILED,
    KneepointError,
    RunInterruptedError,
    noted,
    said_after,
)
from kneepoint.records.faults import CRASH_TEXT, MARKER, OOM_TEXT, Faults, fault_flags
from kneepoint.records.hardware import GIB, MIB, GpuSpec, ModelSpec
from kneepoint.records.host import HostInfo
from kneepoint.records.judgement import FinalistCheck, Judgement, RepeatsMethod
from kneepoint.records.knob_domains import Categorical, canonical, same
from kneepoint.records.knobs import (
    CONSTRAINTS,
    ChoiceDomain,
    Condition,
    Constraint,
    Knob,
    KnobCatalogue,
    KnobDomain,
)
from kneepoint.records.ledger import (
    Baseline,
    BurstChecked,
    BurstWindow,
    Event,
    Finished,
    Promoted,
    Proposed,
    QualityChecked,
    RunStarted,
    Screened,
    Validated,
)
from kneepoint.records.lengths import (
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    UniformLength,
    mean_length_tokens,
)
from kneepoint.records.limits import MAX_POINT_SECONDS, MAX_RATE_RPS, MAX_SEARCH_RPS
from kneepoint.records.loadpoint import Backlog, LoadPoint, Signals, SpecReading, host_words
from kneepoint.records.measure import Dist, RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.objective import GoodputAtRate, Objective, PeakThroughput, SloCapacity
from kneepoint.records.plan import (
    KNEE_REL_TOL,
    Layout,
    LayoutPrediction,
    Plan,
    PlanLengths,
    WeightOption,
)
from kneepoint.records.proposal import (
    Direction,
    KnobCandidate,
    Outcome,
    Prediction,
    Proposal,
    Pruning,
    RuledOut,
    SearchSpace,
    TrialPrice,
    TrialStatus,
)
from kneepoint.records.secret_env import MASK, looks_secret, mask_shapes, referenced, secret_flag
from kneepoint.records.session import (
    ExponentialThink,
    FixedThink,
    FixedTurns,
    ThinkDist,
    TurnsDist,
    UniformTurns,
    turn_survival,
)
from kneepoint.records.slo import METRICS, ClassSlo, GoodputRule, Slo
from kneepoint.records.study import FleetSpec, StopRule, StudySpec
from kneepoint.records.sweep import SweepKind, SweepPoint, SweepResult, nothing_met
from kneepoint.records.task import BaselinePart, Task, TaskKind, TaskResult, ValidationPart
from kneepoint.records.telemetry import GpuSample
from kneepoint.records.workload import (
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    PrefixGroup,
    TraceArrivals,
    TraceEntry,
    TraceFormat,
    TrafficClass,
    Workload,
)

__all__ = [
    "CONSTRAINTS",
    "CRASH_TEXT",
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_RUN_FAILED",
    "GIB",
    "KNEE_REL_TOL",
    "MARKER",
    "MASK",
    "MAX_POINT_SECONDS",
    "MAX_RATE_RPS",
    "MAX_SEARCH_RPS",
    "METRICS",
    "MIB",
    "OOM_TEXT",
    "AcceptanceProbe",
    "AttachBackend",
    "BackendSpec",
    "Backlog",
    "Baseline",
    "BaselinePart",
    "Binding",
    "Budget",
    "BurstChecked",
    "BurstWindow",
    "Calibration",
    "Categorical",
    "ChoiceDomain",
    "ClassSlo",
    "Condition",
    "ConstantArrivals",
    "Constraint",
    "Diagnosis",
    "Direction",
    "Dist",
    "DraftAcceptance",
    "Efficiency",
    "EmpiricalLength",
    "EngineConfig",
    "Event",
    "Evidence",
    "ExponentialThink",
    "Faults",
    "FinalistCheck",
    "Finished",
    "FixedLength",
    "FixedThink",
    "FixedTurns",
    "FleetSpec",
    "GammaArrivals",
    "GoodputAtRate",
    "GoodputRule",
    "GpuSample",
    "GpuSpec",
    "HostInfo",
    "Judgement",
    "KneepointError",
    "Knob",
    "KnobCandidate",
    "KnobCatalogue",
    "KnobDomain",
    "Layout",
    "LayoutPrediction",
    "LengthDist",
    "LoadPoint",
    "LognormalLength",
    "MeasurementSpec",
    "ModelSpec",
    "Objective",
    "Observation",
    "Outcome",
    "PeakThroughput",
    "Plan",
    "PlanLengths",
    "PointArtifacts",
    "PoissonArrivals",
    "Prediction",
    "PrefixGroup",
    "Promoted",
    "Proposal",
    "Proposed",
    "Pruning",
    "QualityChecked",
    "Record",
    "RepeatsMethod",
    "RequestRecord",
    "RuledOut",
    "RunInterruptedError",
    "RunStarted",
    "SchedulingKind",
    "Screened",
    "SearchSpace",
    "ServerResponse",
    "SignalSource",
    "Signals",
    "SimBackend",
    "Slo",
    "SloCapacity",
    "SpecReading",
    "StopRule",
    "StudySpec",
    "SweepKind",
    "SweepPoint",
    "SweepResult",
    "Task",
    "TaskKind",
    "TaskResult",
    "ThinkDist",
    "TraceArrivals",
    "TraceEntry",
    "TraceFormat",
    "TrafficClass",
    "TrialPrice",
    "TrialStatus",
    "TurnsDist",
    "UniformLength",
    "UniformTurns",
    "Validated",
    "ValidationPart",
    "VllmBackend",
    "WeightOption",
    "Workload",
    "canonical",
    "fault_flags",
    "flag_for",
    "host_words",
    "knob_fields",
    "looks_secret",
    "mask_shapes",
    "mean_length_tokens",
    "noted",
    "nothing_met",
    "referenced",
    "said_after",
    "same",
    "secret_flag",
    "turn_survival",
]
