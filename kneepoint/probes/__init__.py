"""Everything with side effects: engine backends (one registry: the in-process simulator, the
launched simulator, vllm serve, an attached server), the load generator, metrics scraping, GPU
telemetry and process groups. The sweeps that use them are ``kneepoint.measure``'s.
Policies never import this package."""
