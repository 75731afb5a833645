"""The ``kneepoint`` command line: one module per command (``main`` parses and dispatches;
each command imports its machinery when it runs)."""
