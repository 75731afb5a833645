"""Pure load planning: a workload, an offered rate and a seed become the exact list of requests
to send (when, which class, which token ids, how many tokens out). Imports only records, so the
simulator, the real load generator and tests all send the same requests for the same seed."""
