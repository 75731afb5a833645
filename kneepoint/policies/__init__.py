"""Pure decisions of the loop: what a sweep says (the knee and the server's measured
response), diagnosis, knob pruning and effects, proposers, learning from misses and the judge.

Nothing here touches processes, sockets, GPUs or files; it imports records, physics and load,
and nothing from ``kneepoint.probes`` or from the packages that run them (``kneepoint.tune``,
``kneepoint.workers``)."""
