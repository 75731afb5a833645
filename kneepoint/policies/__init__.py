"""Pure decisions of the loop: diagnosis, knob pruning, proposers and the judge.

Nothing here touches processes, sockets, GPUs or files; it imports records and nothing from
``kneepoint.probes`` or ``kneepoint.agent``."""
