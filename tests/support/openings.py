"""What the backend openers are given (``kneepoint.probes.backends.base.Opening``), built for tests
that open a backend kind from a study without running a trial."""

from __future__ import annotations

from pathlib import Path

from kneepoint.load.size import PointSize
from kneepoint.probes.backends.base import Opening
from kneepoint.records.engine import EngineConfig
from kneepoint.records.study import StudySpec

CONFIG = EngineConfig(model="llama-3.2-1b", max_num_seqs=32)


def opening(study: StudySpec, tmp_path: Path, config: EngineConfig = CONFIG) -> Opening:
    """What the backend openers are given, for ``study`` serving ``config``."""
    return Opening(study=study, config=config, trial_dir=tmp_path, size=PointSize(), keep=None,
                   trace=(), launch=1)  # fmt: skip
