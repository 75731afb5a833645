"""The simulator launched as ``kneepoint sim serve``, one process per configuration, with the
same flags vLLM would get (and the study's calibration and the faults it is to act out), driven
over HTTP like a real server."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from kneepoint.probes.backends.base import Backend, Opening
from kneepoint.probes.backends.launch import ArgvFor, LaunchBackend
from kneepoint.records import EngineConfig, StudySpec, fault_flags


def sim_server(o: Opening) -> Backend:
    """The launcher of ``kneepoint sim serve`` for the study."""
    calibration = _calibration_file(o.study, o.trial_dir)
    faults = fault_flags(o.faults) if o.faults is not None else []
    argv = sim_argv(o.study.gpu.name, o.study.model.name, calibration, faults)
    return LaunchBackend(argv, sim_telemetry=True, nice=o.study.measurement.server_nice)


def sim_argv(
    gpu: str, model: str, calibration: Path | None = None, faults: Sequence[str] = ()
) -> ArgvFor:
    """``kneepoint sim serve`` with the same flags vLLM would get (and the study's
    calibration, when it names one, and the ``--fault-*`` flags it is to act out)."""
    fitted = ["--calibration", str(calibration)] if calibration is not None else []
    fitted += faults

    def argv(config: EngineConfig, host: str, port: int, served: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kneepoint.cli.main",
            "sim",
            "serve",
            "--gpu",
            gpu,
            "--model",
            model,
            *fitted,
            *config.flag_args(),
            "--host",
            host,
            "--port",
            str(port),
            "--served-model-name",
            served,
        ]

    return argv


def _calibration_file(study: StudySpec, trial_dir: Path) -> Path | None:
    """The study's calibration written into the trial's folder, for the launched simulator to
    read (and to show what it served with); None without one."""
    if study.calibration is None:
        return None
    trial_dir.mkdir(parents=True, exist_ok=True)
    path = trial_dir / "calibration.yaml"
    path.write_text(yaml.safe_dump(study.calibration.model_dump(mode="json"), sort_keys=False))
    return path
