"""``kneepoint plan``: what fits on which GPUs, in which layout, at what rate and price, before
any GPU is rented. Pure: the memory model, the roofline and the simulator's virtual clock.
"""

from kneepoint.planning.plan import make_plan

__all__ = [
    "make_plan",
]
