"""The embedded simulated serving engine: a discrete-event model of a vLLM-V1-like engine that
runs on a virtual clock or behind a real HTTP server on loopback."""
