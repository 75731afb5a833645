"""The ``kneepoint`` command line: one module per command (``main`` parses and dispatches;
each command imports its machinery when it runs)."""

__all__: list[str] = []  # no package imports the command line; its entry point is main.main
