"""A run's record: its folder, the append-only ledger and the state it folds into, the lock,
atomic files, logs, the progress port and the run's Optuna storage."""

from kneepoint.run.files import check_output, write_atomically
from kneepoint.run.folder import (
    RunFolder,
    RunFolderError,
    serve_command,
    study_digest,
    write_point,
)
from kneepoint.run.ledger import LedgerError
from kneepoint.run.lock import RunLockedError
from kneepoint.run.logs import configure_logging
from kneepoint.run.optuna_storage import open_storage
from kneepoint.run.progress import LogProgress, Progress, duration
from kneepoint.run.state import RunState
from kneepoint.run.trial_state import TrialState

__all__ = [
    "LedgerError",
    "LogProgress",
    "Progress",
    "RunFolder",
    "RunFolderError",
    "RunLockedError",
    "RunState",
    "TrialState",
    "check_output",
    "configure_logging",
    "duration",
    "open_storage",
    "serve_command",
    "study_digest",
    "write_atomically",
    "write_point",
]
