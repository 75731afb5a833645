"""How a trial's server failing ends up in the ledger: the trial status each kind of server
failure means, which of them a fresh server may cure (``TRANSIENT``), and ``retrying``, which
runs a measurement again on a fresh server after such a failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog

from kneepoint.measure.progress import Progress
from kneepoint.probes.server import FailureKind
from kneepoint.records import KneepointError, TrialStatus

log = structlog.get_logger(__name__)
T = TypeVar("T")

FAILURE_STATUS: dict[FailureKind, TrialStatus] = {
    "startup_oom": "startup_failed",
    "bad_argument": "startup_failed",
    "not_started": "startup_failed",
    "crashed": "crashed",
    "hung": "timed_out",
    "timed_out": "timed_out",
    "unreachable": "crashed",
    "wrong_server": "startup_failed",
}


TRANSIENT: frozenset[TrialStatus] = frozenset({"crashed", "timed_out"})
"""Failures worth a fresh server: a crash or a hang mid-sweep. A refused start is not."""


class TrialFailedError(KneepointError, RuntimeError):
    """A trial's server failed: the status it means and the device time already spent."""

    def __init__(
        self, status: TrialStatus, cause: str, device_s: float, sentence: str | None = None
    ) -> None:
        super().__init__(f"{status}: {cause}")
        self.status, self.cause, self.device_s = status, cause, device_s
        self.sentence = sentence or cause
        """What a person reads (the server's failure in words)."""

    def lines(self) -> list[str]:
        return [self.sentence]


def retrying(
    what: str, attempt: Callable[[], tuple[T, float]], retries: int, progress: Progress
) -> tuple[T, float, tuple[str, ...]]:
    """``attempt`` re-run on a fresh server after a transient failure, up to ``retries``
    times (``tuning.transient_retries``): its result, the device time of every attempt, and
    why the failed ones ended. A failure that is not transient, or the last one, is raised
    with the earlier causes and all the time spent."""
    spent = 0.0
    causes: list[str] = []
    said: list[str] = []
    for tries in range(retries + 1):
        try:
            result, seconds = attempt()
        except TrialFailedError as exc:
            spent += exc.device_s
            if exc.status not in TRANSIENT or tries == retries:
                cause = "; ".join([*(f"first {c}" for c in causes[:1]), exc.cause])
                sentence = exc.sentence + _after(said)
                raise TrialFailedError(exc.status, cause, spent, sentence) from exc
            causes.append(f"{exc.status}: {exc.cause}")
            said.append(exc.sentence)
            log.warning(
                "bench.retry",
                what=what,
                status=exc.status,
                cause=exc.cause,
                attempt=tries + 1,
                retries=retries,
            )
            progress.status(f"{what}: server {exc.status} ({exc.cause}); again on a fresh server")
            continue
        return result, seconds + spent, tuple(causes)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _after(said: list[str]) -> str:
    """The earlier attempts' failures, as the last one's sentence ends (nothing: none)."""
    if not said:
        return ""
    return f" (on a fresh server; the first failed: {said[0]})"
