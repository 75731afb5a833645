"""What every probe shares: the clock a load point's sends, scrapes and GPU samples line up
on, and interrupts (Ctrl-C, SIGTERM, SIGHUP) that are never lost in a finalizer."""

from kneepoint.probes.runtime.clock import Clock
from kneepoint.probes.runtime.interrupts import raise_pending, run_async, unwinding

__all__ = ["Clock", "raise_pending", "run_async", "unwinding"]
