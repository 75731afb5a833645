"""What every probe shares: the clock a load point's sends, scrapes and GPU samples line up
on, interrupts (Ctrl-C, SIGTERM, SIGHUP) that are never lost in a finalizer, and the agent's
numeric work held to one BLAS thread."""

from kneepoint.probes.runtime.clock import Clock
from kneepoint.probes.runtime.interrupts import raise_pending, run_async, unwinding
from kneepoint.probes.runtime.threads import one_blas_thread

__all__ = ["Clock", "one_blas_thread", "raise_pending", "run_async", "unwinding"]
