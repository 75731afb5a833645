"""A run's record: its folder, the append-only ledger and the state it folds into, the lock,
atomic files, logs, the progress port and the run's Optuna storage."""
