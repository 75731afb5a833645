"""Pure decisions of the loop, one subpackage per concept: ``diagnosis`` (what a sweep says at
its knee and which resource binds), ``pruning`` (the knobs that can help it, and by how much),
``search`` (the pruned space, the proposers and learning from misses) and ``judge`` (a gain
beyond the measured noise). Pruning and search read the diagnosis; the judge stands alone
(tests/test_architecture.py).

Nothing here touches processes, sockets, GPUs or files; it imports records, physics and load,
and nothing from ``kneepoint.probes`` or from the package that runs them (``kneepoint.tune``)."""

__all__: list[str] = []  # each concept is a package with its own face
