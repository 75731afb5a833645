"""What a load point reads besides its requests: ``/metrics`` scraped and summarised into
signals, NVML's GPU samples, the engine's and the host's CPU, and the host described."""
