"""Interrupts that must not be lost: Ctrl-C, SIGTERM and SIGHUP unwind a command as
KeyboardInterrupt, and one that a finalizer swallowed is raised again at the loop's next step.

Python runs a signal's handler in whichever frame the main thread is in, and an exception
raised inside a ``__del__`` or a weakref callback (a garbage collection mid-point) is printed
as "Exception ignored" and dropped: a SIGINT that lands while the garbage collector runs
would leave the command measuring (tests/test_cli_run_folder.py). So the handler also
remembers the signal, and a
long-running loop calls ``raise_pending`` between steps. Inside an event loop (``run_async``)
Ctrl-C is asyncio's again, as without this module: it cancels the main task, whose cleanups
run, and raises KeyboardInterrupt once that is done, never from a finalizer.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_pending: list[str] = []
"""The signals received since ``unwinding`` was entered, by name."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _pending.append(name)
    raise KeyboardInterrupt(name)


@contextmanager
def unwinding() -> Iterator[None]:
    """Within it, each of ``SIGNALS`` raises KeyboardInterrupt and is remembered; the
    handlers before it are restored after (a command run in-process, as the tests run it)."""
    _pending.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _pending.clear()


def raise_pending() -> None:
    """KeyboardInterrupt again if a signal came and the loop is still running: its first
    raise was lost."""
    if _pending:
        raise KeyboardInterrupt(_pending[0])


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with SIGINT handed to asyncio meanwhile (it installs its own
    handler only over Python's default one) and remembered if it came."""
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is _interrupt
    )
    if not ours:
        return asyncio.run(main)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return asyncio.run(main)
    except KeyboardInterrupt as exc:
        _pending.append(str(exc) or "SIGINT")
        raise
    finally:
        signal.signal(signal.SIGINT, _interrupt)
