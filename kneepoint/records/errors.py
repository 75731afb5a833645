"""The root of kneepoint's own errors, and how a failure says where its work is kept.

Every error the agent raises on purpose derives from ``KneepointError`` (besides the builtin
its callers expect: a ``ValueError`` for a bad ledger, a ``RuntimeError`` for a server that
died), says in its ``lines`` what went wrong in words a person can act on, and carries the
command line's exit status: 2 for bad input (a file, a flag, a folder the user named: each a
``ConfigError``, said as the ``Problem`` lines it holds), 1 for a run that failed. Foreign
errors (OS, YAML, pydantic, httpx, Optuna's storage) are turned into these where they enter,
so the command line has one ``except`` (``kneepoint.cli.main``), which prints them as lines,
never a traceback. The simulated server's own HTTP errors are not the agent's and stay outside
the tree (tests/test_error_tree.py draws the tree from the code and holds it to this picture)::

    KneepointError                  1  a run failed
    ├── ConfigError                 2  config: bad input the user named, a line each problem
    │   ├── LedgerError             2  run: a ledger line that is not the next event
    │   ├── RunFolderError          2  run: a folder that is not this run
    │   └── RunLockedError          2  run: another agent holds the run
    ├── EngineRefusedError          1  sim: the engine will not start so configured
    ├── GpDependenciesError         1  policies.search: the GP sampler's torch is missing
    ├── PageTooLargeError           1  probes.client: a server's page past its cap
    ├── QualityCheckError           1  probes.client: the quality check got no answer
    ├── RunInterruptedError       130  tune: interrupted, said by its progress
    ├── ServerFailedError           1  probes.server: the server failed, in its words
    ├── StateError                  1  run: events that cannot have happened in this order
    ├── TrialFailedError            1  measure: a trial's server failed
    └── UnmodeledSettingError       1  physics: a setting the simulator cannot price

An interrupt (Ctrl-C, SIGTERM, SIGHUP) stays a ``KeyboardInterrupt`` until the command line.
A command that keeps what it measured says where with ``noted``: the words are added to
whatever ends the block, and the command line prints them after its line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
"""As a shell says for Ctrl-C (128 + SIGINT)."""


class KneepointError(Exception):
    """An error of kneepoint's own (see the module docstring)."""

    exit_code = EXIT_RUN_FAILED
    """The command line's exit status when it ends a command: 1, the run failed; a bad input
    says 2 (``EXIT_BAD_INPUT``: ``kneepoint.config.errors.ConfigError``)."""

    def lines(self) -> list[str]:
        """What the command line prints, one line each."""
        return [str(self)]


class RunInterruptedError(KneepointError):
    """A run interrupted whose progress has already said so, and how to resume it: the
    command line adds nothing and exits 130, as a shell does for Ctrl-C."""

    exit_code = EXIT_INTERRUPTED

    def lines(self) -> list[str]:
        return []


@contextmanager
def noted(note: Callable[[], str]) -> Iterator[None]:
    """Within it, whatever ends the block (an error, an interrupt) carries ``note()``'s words,
    e.g. where the points measured until then are kept; '' adds nothing. ``note`` runs once,
    after the failure, so it may write what it names."""
    try:
        yield
    except BaseException as exc:
        if text := note():
            exc.add_note(text)
        raise


def said_after(exc: BaseException) -> str:
    """The notes ``noted`` added, as they follow the failure's last line."""
    return "".join(getattr(exc, "__notes__", ()))
