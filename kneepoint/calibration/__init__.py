"""The simulator against real engines: recorded real sweeps, the simulator replaying them at the
same configurations and rates, and the fit of its constants to them (a calibration)."""
