"""Why a server did not come up or did not stay up, named from its log in vLLM's own words
(CUDA and the CPU build, across versions) and its exit code: the ``Failure`` that becomes a
trial's status, and what else a startup log says (the KV cache it announced, a port race)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kneepoint.probes.runtime import redact
from kneepoint.records import KneepointError

FailureKind = Literal[
    "startup_oom",
    "bad_argument",
    "not_started",
    "crashed",
    "hung",
    "timed_out",
    "unreachable",
    "wrong_server",
]
"""``not_started``: exited before it answered /health, for no reason its log names (a server
that never came up did not crash); ``unreachable``: an attached server that does not answer;
``wrong_server``: one that answers, but is not the model or configuration asked for."""

# vLLM's own wording, across versions and platforms (CUDA and the CPU build).
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks"
    r"|larger than the available KV cache memory|Insufficient memory|out of memory",
    re.IGNORECASE,
)
_BAD_ARGUMENT = re.compile(
    r"error: unrecognized arguments|error: argument |invalid choice|ValidationError"
    r"|not modeled by the simulator|error: the following arguments are required"
)
_RAISED = re.compile(
    r"^(?:\([^)]*pid=\d+\) )?(?:(?:ERROR|CRITICAL) [\d-]+ [\d:]+ \[[^\]]+\] )?"
    r"((?:\w+\.)*\w*(?:Error|Exception): .+)$"
)
"""An exception as a traceback ends, bare or in vLLM's log prefix (``(Worker pid=7) ERROR
12-07 15:31:01 [multiproc_executor.py:1063] ValueError: ...``); its group, the exception."""
_KV_TOKENS = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
_ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a server did not come up or did not stay up."""

    kind: FailureKind
    message: str
    exit_code: int | None
    log_tail: tuple[str, ...]

    def __str__(self) -> str:
        code = f" (exit {self.exit_code})" if self.exit_code is not None else ""
        return f"{self.kind}{code}: {self.message}"

    def sentence(self) -> str:
        """What a person reads: the kind in words, where the message does not say it."""
        code = f" (exit {self.exit_code})" if self.exit_code is not None else ""
        if self.kind in ("unreachable", "wrong_server"):
            return self.message  # "... does not answer", "wrong server at ..."
        if self.kind == "not_started":
            return f"the server exited before it started{code}: {self.message}"
        return f"the server failed: {self}"


class ServerFailedError(KneepointError, RuntimeError):
    """A server failed; ``failure`` says how."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.held_s = 0.0
        """Device seconds the server held before it failed (a failed start's included), where
        the opener that started it counted them."""


def kv_capacity_tokens(log: str) -> int | None:
    """The KV cache size the server announced at startup, in tokens (the last one said)."""
    found = _KV_TOKENS.findall(log)
    return int(found[-1].replace(",", "")) if found else None


_BOUND_CORES = re.compile(r"local_rank=\d+, core ids=\[([0-9, ]*)\]")


def bound_cores(log: str) -> int | None:
    """How many cores vLLM's CPU build bound its OpenMP threads to (``VLLM_CPU_OMP_THREADS_BIND``,
    'auto' by default: one thread a core, a core kept back for the API server), from the
    binding it logs at startup; None where it logged none (a GPU build)."""
    found = _BOUND_CORES.findall(log)
    return sum(len([c for c in ids.split(",") if c.strip()]) for ids in found) if found else None


def classify(
    log: str, exit_code: int | None, *, silent_s: float = 0.0, started: bool = True
) -> Failure:
    """Name a failure from the server's log and exit code (None: still running; ``started``:
    it had answered /health). The lines kept go into the ledger and the report, so secrets
    are taken out of them."""
    tail = tuple(redact(line) for line in log.rstrip().splitlines()[-20:])
    if exit_code is None:
        kind: FailureKind = "hung" if silent_s > 0 else "timed_out"
        what = f"no answer, log silent for {silent_s:.0f} s" if silent_s else "still starting"
        return Failure(kind, what, None, tail)
    lines = log.splitlines()
    for pattern, kind in ((_OOM, "startup_oom"), (_BAD_ARGUMENT, "bad_argument")):
        line = _last_matching(lines, pattern)
        if line is not None:
            return Failure(kind, redact(_said(line)), exit_code, tail)
    kind = "crashed" if started else "not_started"
    said = _root_cause(lines) or (_said(tail[-1]) if tail else "no output")
    return Failure(kind, redact(said), exit_code, tail)


def _root_cause(lines: Sequence[str]) -> str | None:
    """The first exception the log raised: the engine's own words for why it stopped. The
    processes it takes down raise theirs after it (a worker's ``ValueError``, then the engine
    core's and the API server's ``RuntimeError``), and shutdown warnings may end the log."""
    for line in lines:
        found = _RAISED.match(line.strip())
        if found:
            return found.group(1)
    return None


_PLAIN = re.compile(r"^\d\d:\d\d:\d\dZ \w+: (.*)$")
"""A plain log line (``kneepoint sim serve``'s off a terminal): time, level, message."""


def _said(line: str) -> str:
    """A log line's message: what follows the time and level of a plain line, else the line
    itself (vLLM's own lines carry their message whole)."""
    found = _PLAIN.match(line.strip())
    return found.group(1) if found else line.strip()


def _last_matching(lines: Sequence[str], pattern: re.Pattern[str]) -> str | None:
    for line in reversed(lines):
        if pattern.search(line):
            return line
    return None


def address_in_use(log: str) -> bool:
    """Whether a failed start was a port race (worth one retry on another port)."""
    return bool(_ADDRESS_IN_USE.search(log))
