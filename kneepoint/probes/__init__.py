"""Everything with side effects, in four clusters: ``backends`` (one module a kind a study can
name: the in-process simulator, the launched simulator, vllm serve, an attached server),
``server`` (a launched server's lifecycle), ``client`` (the load generator) and ``telemetry``
(metrics, NVML, CPU); ``measure`` runs one load point with the client and the telemetry on
one clock. The sweeps that use them are ``kneepoint.measure``'s. Policies never import this
package."""
