"""Interrupts are not lost: a Ctrl-C that a finalizer swallowed is raised again at the loop's
next step, and inside an event loop Ctrl-C stays asyncio's (its task's cleanups run)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from kneepoint.probes.runtime import interrupts
from kneepoint.probes.runtime.interrupts import raise_pending, run_async, unwinding


class _SignalledWhileCollected:
    """Sends SIGINT from its finalizer, where a KeyboardInterrupt is printed and dropped (a
    resumed tune went on measuring for 120 s after its SIGINT, its stack in the garbage
    collector, 2026-12-02)."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs here, inside the finalizer
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_a_finalizer_swallowed_is_raised_at_the_next_step() -> None:
    before = signal.getsignal(signal.SIGINT)
    with unwinding():
        item = _SignalledWhileCollected()
        del item  # no KeyboardInterrupt escapes a finalizer
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            raise_pending()
    assert signal.getsignal(signal.SIGINT) is before
    raise_pending()  # outside, nothing is pending


def test_a_terminate_unwinds_like_ctrl_c() -> None:
    with unwinding(), pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):
            pass


def test_inside_an_event_loop_ctrl_c_cancels_the_task_and_its_cleanups_run() -> None:
    cleaned: list[bool] = []

    async def measuring() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(30)
        finally:
            cleaned.append(True)

    with unwinding():
        with pytest.raises(KeyboardInterrupt):
            run_async(measuring())
        assert cleaned == [True], "asyncio cancelled the task: its finally ran"
        assert signal.getsignal(signal.SIGINT) is interrupts._interrupt
        with pytest.raises(KeyboardInterrupt):
            raise_pending()
