"""Pure load arithmetic: a workload, an offered rate and a seed become the exact list of
requests to send; records of what came back become scored load points (latency percentiles
over the stable window, goodput, SLO margins, capacity, the objective's value). Imports only
records, so the simulator, the real load generator and tests send and score alike."""
