"""What a load point reads besides its requests: ``/metrics`` scraped and summarised into
signals, NVML's GPU samples, the engine's and the host's CPU, and the host described."""

from kneepoint.probes.telemetry.cpu import HostLoad
from kneepoint.probes.telemetry.host_info import describe_host
from kneepoint.probes.telemetry.nvml import NvmlSampler, gpu_count
from kneepoint.probes.telemetry.prom import Scrape, parse_metrics
from kneepoint.probes.telemetry.samplers import HttpSampler
from kneepoint.probes.telemetry.signals import summarize_signals

__all__ = [
    "HostLoad",
    "HttpSampler",
    "NvmlSampler",
    "Scrape",
    "describe_host",
    "gpu_count",
    "parse_metrics",
    "summarize_signals",
]
