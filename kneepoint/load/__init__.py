"""Pure load arithmetic: a workload, an offered rate and a seed become the exact list of
requests to send; records of what came back become scored load points (latency percentiles
over the stable window, goodput, SLO margins, capacity, the objective's value). Imports only
records, so the simulator, the real load generator and tests send and score alike."""

from kneepoint.load.bootstrap import mean_percentile_interval
from kneepoint.load.burst import BurstPlan, burst_plan, recovery_s, ttft_limits, window_s, windows
from kneepoint.load.capacity import interpolate_capacity, mean_interval, slo_margin
from kneepoint.load.fleet import FleetSize, gpu_price, output_per_request, size_fleet
from kneepoint.load.knee import Capacity, Verdict, find_capacity
from kneepoint.load.node import filled_node, node_replicas
from kneepoint.load.objective import AT_RATE_TOLERANCE, out_of_reach, rules
from kneepoint.load.origin import counted
from kneepoint.load.plan import PlannedRequest, plan_requests, point_seed, rate_salt, sample_length
from kneepoint.load.point import load_point, window_bounds
from kneepoint.load.ranges import VALIDATE_FRACTIONS
from kneepoint.load.scoring import Score, metric_values, score, stable_window, summarize
from kneepoint.load.settle import ramp_seconds
from kneepoint.load.size import PointSize
from kneepoint.load.sweep_result import merge, read_sweep
from kneepoint.load.trust import Trust
from kneepoint.load.warmup import BURST_RPS, warmup_plan

__all__ = [
    "AT_RATE_TOLERANCE",
    "BURST_RPS",
    "VALIDATE_FRACTIONS",
    "BurstPlan",
    "Capacity",
    "FleetSize",
    "PlannedRequest",
    "PointSize",
    "Score",
    "Trust",
    "Verdict",
    "burst_plan",
    "counted",
    "filled_node",
    "find_capacity",
    "gpu_price",
    "interpolate_capacity",
    "load_point",
    "mean_interval",
    "mean_percentile_interval",
    "merge",
    "metric_values",
    "node_replicas",
    "out_of_reach",
    "output_per_request",
    "plan_requests",
    "point_seed",
    "ramp_seconds",
    "rate_salt",
    "read_sweep",
    "recovery_s",
    "rules",
    "sample_length",
    "score",
    "size_fleet",
    "slo_margin",
    "stable_window",
    "summarize",
    "ttft_limits",
    "warmup_plan",
    "window_bounds",
    "window_s",
    "windows",
]
