"""The package's parts and what each may import from kneepoint (docs/development.md's Layout
table says what each part is for): held by tests/test_architecture.py and
tests/test_import_cycles.py."""

from __future__ import annotations

# What each part of the package may import from kneepoint (besides itself).
ALLOWED = {
    "records": set(),
    "physics": {"records"},
    "config": {"records"},
    "policies": {"records", "physics", "load"},
    "load": {"records"},
    "sim": {"records", "config", "physics", "load"},
    "probes": {"records", "config", "physics", "load", "sim"},
    "calibration": {"records", "config", "physics", "load", "sim", "policies"},
    # the run's record: its folder, ledger and state, written by whoever runs it
    "run": {"records", "config", "load", "probes"},
    # how one configuration is measured: the sweep protocol and the harness that runs it
    "measure": {"records", "config", "physics", "load", "sim", "probes", "run"},
    # the plan runs knee searches (measure.sweep) on the virtual clock, never a server
    "planning": {"records", "config", "physics", "load", "sim", "probes", "measure"},
    "report": {"records", "config", "load", "policies", "run"},
    # the one loop, its steps and checks
    "tune": {
        "records",
        "config",
        "physics",
        "load",
        "policies",
        "probes",
        "sim",
        "report",
        "run",
        "measure",
    },
    "cli": {
        "records",
        "config",
        "physics",
        "load",
        "probes",
        "measure",
        "policies",
        "sim",
        "calibration",
        "planning",
        "report",
        "run",
        "tune",
    },
}
