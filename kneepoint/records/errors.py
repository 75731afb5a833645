"""The root of kneepoint's own errors.

Every error the agent raises on purpose derives from ``KneepointError`` (besides the builtin
its callers expect: a ``ValueError`` for a bad ledger, a ``RuntimeError`` for a server that
died), and says in its message what went wrong in words a person can act on. The command line
prints one that reaches it as one line (``kneepoint.cli.main``), never a traceback. The
simulated server's own HTTP errors are not the agent's and stay outside the tree.
"""

from __future__ import annotations


class KneepointError(Exception):
    """An error of kneepoint's own (see the module docstring)."""

    exit_code = 1
    """The command line's exit status when it ends a command: 1, the run failed; a bad input
    says 2 (``kneepoint.config.errors.ConfigError``)."""

    def lines(self) -> list[str]:
        """What the command line prints, one line each."""
        return [str(self)]
