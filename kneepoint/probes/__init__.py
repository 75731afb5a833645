"""Everything with side effects: engine backends, workload generation, the load generator,
metrics scraping, GPU telemetry and sweeps. Policies never import this package."""
