"""The embedded simulated serving engine: a discrete-event model of a vLLM-V1-like engine that
runs on a virtual clock or behind a real HTTP server on loopback."""

from kneepoint.sim.access import is_loopback
from kneepoint.sim.deployment import serving
from kneepoint.sim.drafting import acceptance_of
from kneepoint.sim.engine import EngineRefusedError, SimEngine
from kneepoint.sim.fault_server import refuse_start
from kneepoint.sim.loadpoint import SimLoadPoint, simulate_load_point
from kneepoint.sim.metrics import CLOCK_LAG_LIMIT_S
from kneepoint.sim.serve_args import add_serve_arguments, bind_problem, resolve_serve_args
from kneepoint.sim.server import build_server, serve
from kneepoint.sim.virtual import run_plan

__all__ = [
    "CLOCK_LAG_LIMIT_S",
    "EngineRefusedError",
    "SimEngine",
    "SimLoadPoint",
    "acceptance_of",
    "add_serve_arguments",
    "bind_problem",
    "build_server",
    "is_loopback",
    "refuse_start",
    "resolve_serve_args",
    "run_plan",
    "serve",
    "serving",
    "simulate_load_point",
]
