"""What every probe shares: the clock a load point's sends, scrapes and GPU samples line up
on, interrupts (Ctrl-C, SIGTERM, SIGHUP) that are never lost in a finalizer, the agent's
numeric work held to one BLAS thread, the process's structured logging, and the secrets taken
out of everything it logs or writes (``redaction``)."""

from kneepoint.probes.runtime.clock import Clock
from kneepoint.probes.runtime.interrupts import raise_pending, run_async, unwinding
from kneepoint.probes.runtime.logs import configure_logging
from kneepoint.probes.runtime.redaction import redact, redact_all, redact_file, remember_secret
from kneepoint.probes.runtime.threads import one_blas_thread

__all__ = [
    "Clock",
    "configure_logging",
    "one_blas_thread",
    "raise_pending",
    "redact",
    "redact_all",
    "redact_file",
    "remember_secret",
    "run_async",
    "unwinding",
]
