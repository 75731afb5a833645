"""The simulator against real engines: recorded real sweeps, the simulator replaying them at the
same configurations and rates, and the fit of its constants to them (a calibration)."""

from kneepoint.calibration.from_sweeps import Fitted, calibrate
from kneepoint.calibration.held_out import score
from kneepoint.calibration.recorded import (
    find_recorded,
    is_run_folder,
    load_recorded,
    study_path_for,
)

__all__ = [
    "Fitted",
    "calibrate",
    "find_recorded",
    "is_run_folder",
    "load_recorded",
    "score",
    "study_path_for",
]
