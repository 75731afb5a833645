"""The run's Optuna storage, opened by the agent: the port through which the pure Optuna proposer
(``kneepoint.policies.search.optuna_search``) keeps its study, so the policy never opens a file or a
database itself. A run folder's is SQLite (``optuna.db``, which optuna-dashboard opens)."""

from __future__ import annotations

import optuna


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The storage at ``url``, as Optuna itself opens a URL (SQLite behind a cache)."""
    return optuna.storages.get_storage(url)
