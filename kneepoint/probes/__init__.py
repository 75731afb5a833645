"""Everything with side effects, in five clusters, each a package with its own face:
``backends`` (one module a kind a study can name: the in-process simulator, the launched
simulator, vllm serve, an attached server; and ``measure``, one load point with the client and
the telemetry on one clock), ``server`` (a launched server's lifecycle), ``client`` (the load
generator), ``telemetry`` (metrics, NVML, CPU) and ``runtime`` (the clock and the interrupts
they all share). The sweeps that use them are ``kneepoint.measure``'s. Policies never import
this package."""

__all__: list[str] = []
