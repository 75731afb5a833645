"""Where to look next: the pruned search space, the proposer interface (ask, batch, tell) and
its plug-ins (coordinate descent, Optuna over the pruned space, both in phases), and learning
from misses within a run. Pure: Optuna's storage is opened by the agent and passed in."""
