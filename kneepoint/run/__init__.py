"""A run's record: its folder, the append-only ledger and the state it folds into, the lock and
the run's Optuna storage."""

from kneepoint.run.folder import (
    RunFolder,
    RunFolderError,
    serve_command,
    study_digest,
    write_atomically,
    write_point,
)
from kneepoint.run.ledger import LedgerError
from kneepoint.run.lock import RunLockedError
from kneepoint.run.optuna_storage import open_storage
from kneepoint.run.state import RunState, TrialState

__all__ = [
    "LedgerError",
    "RunFolder",
    "RunFolderError",
    "RunLockedError",
    "RunState",
    "TrialState",
    "open_storage",
    "serve_command",
    "study_digest",
    "write_atomically",
    "write_point",
]
