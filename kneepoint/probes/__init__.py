"""Everything with side effects: engine backends (one registry: the in-process simulator, the
launched simulator, vllm serve, an attached server), the load generator, metrics scraping, GPU
telemetry, process groups and sweeps. Policies never import this package."""
