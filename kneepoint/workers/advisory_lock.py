"""PostgreSQL advisory locks for the shared study: held by one connection, so a lock dies with
the worker that held it, never left behind by a crash."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy
from sqlalchemy import text


def lock_key(name: str) -> int:
    """A name's advisory-lock key: 63 bits of its SHA-256 (PostgreSQL's keys are signed)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


SCHEMA_LOCK = lock_key("kneepoint: Optuna's tables")


@contextmanager
def advisory_lock(engine: sqlalchemy.Engine, key: int) -> Iterator[None]:
    """A PostgreSQL advisory lock, held by one connection: it dies with the process."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
