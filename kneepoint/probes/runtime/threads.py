"""The agent's own numeric work on one BLAS thread.

numpy's OpenBLAS starts a thread per core and, between calls, keeps them spinning: on the
2-core hosts the agent shares with the server it measures (as the load generator shares a GPU
host's CPUs) that is a core taken from the server, and it is not even faster. The report's
bootstrap product (400 x 300 by 300 x 1024, ``kneepoint.load.bootstrap``) took 10.3 ms on two
threads and 3.95 ms on one, a whole `kneepoint report` of small-tune 2.3 s against 1.87 s
(2-core Intel Xeon, OpenBLAS 0.3.31). The limit is set on the loaded library,
not through OPENBLAS_NUM_THREADS, which every server the agent starts would inherit.
"""

from __future__ import annotations

import numpy  # noqa: F401  # loads OpenBLAS: threadpoolctl limits only libraries loaded
from threadpoolctl import threadpool_limits


def one_blas_thread() -> None:
    """Limit every BLAS library this process has loaded to one thread, for good."""
    threadpool_limits(limits=1, user_api="blas")
