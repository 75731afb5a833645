"""What ``kneepoint plan`` finds for one study: per GPU kind and tensor-parallel layout, the
memory plan vLLM would make (or its refusal, in its words), the concurrency that fits, and the
simulator's knee, SLO capacity and price; the request lengths they rest on."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import Record

KNEE_REL_TOL = 0.05
"""A plan's knee searches bisect to 5%: finer than the gaps between layouts worth ranking,
and the width within which two layouts are a tie."""


class WeightOption(Record):
    """One weight format on a layout: does it start, and with how much KV cache."""

    quantization: str
    """The ``--quantization`` value, or the checkpoint's dtype (e.g. bf16) for none."""
    kv_tokens: int | None
    """The KV pool vLLM would log; None where it refuses to start."""
    needs: str = ""
    """What it needs besides the flag (a checkpoint quantized that way), or ''."""


class LayoutPrediction(Record):
    """The simulator's figures for a layout at the study's traffic and SLO."""

    knee_rps: float | None
    """Highest rate measured within the SLO."""
    capacity_rps: float | None
    """SLO capacity of one server, interpolated at the first failure."""
    output_tokens_per_request: float = Field(gt=0.0)
    usd_per_hour: float | None
    """One server's GPUs; None without a price."""

    def per_gpu_rps(self, gpus: int) -> float | None:
        return None if self.capacity_rps is None else self.capacity_rps / gpus

    def usd_per_million_output(self, gpus: int) -> float | None:
        """At the SLO capacity, every GPU of the server busy: the floor a fleet pays."""
        if self.usd_per_hour is None or not self.capacity_rps:
            return None
        tokens_per_hour = self.capacity_rps * self.output_tokens_per_request * 3600.0
        return self.usd_per_hour / tokens_per_hour * 1e6


class Layout(Record):
    """One GPU kind at one tensor-parallel size, per GPU where memory is concerned."""

    gpu: str
    tensor_parallel_size: int = Field(ge=1)
    replicas: int = Field(ge=0)
    """Servers of this layout the node's GPUs hold, each on its own GPUs."""
    data_parallel_size: int = Field(default=1, ge=1)
    """Data-parallel ranks within one server: laid out for a mixture-of-experts model only,
    whose ranks share the experts (``kneepoint.physics.experts``); a dense model's ranks are
    whole replicas, counted in ``replicas``."""
    expert_parallel: bool = False
    """The experts sit whole on each GPU (``--enable-expert-parallel``), not sliced."""
    excluded: str | None = None
    """Why the layout is not laid out at all (no NVLink, too few GPUs, heads not divisible)."""
    max_model_len: int = Field(ge=1)
    weight_gib: float = 0.0
    activation_gib: float = 0.0
    overhead_gib: float = 0.0
    kv_gib: float = 0.0
    kv_tokens: int = 0
    concurrency_p50: float = 0.0
    """Requests of the median length the pool holds at once."""
    concurrency_p99: float = 0.0
    refusal: str | None = None
    """vLLM's words where it would not start at ``max_model_len``."""
    refusal_as_configured: str | None = None
    """vLLM's words at the study's own max_model_len, where that one is refused and the
    right-sized one is not: what right-sizing buys."""
    weights: tuple[WeightOption, ...] = ()
    prediction: LayoutPrediction | None = None

    @property
    def fits(self) -> bool:
        return self.excluded is None and self.refusal is None

    @property
    def gpus(self) -> int:
        """GPUs one server of this layout holds."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def label(self) -> str:
        """``TP 2``, ``TP 1 x DP 8``, ``TP 1 x DP 8, EP``."""
        dp = f" x DP {self.data_parallel_size}" if self.data_parallel_size > 1 else ""
        return f"TP {self.tensor_parallel_size}{dp}{', EP' if self.expert_parallel else ''}"


class PlanLengths(Record):
    """Request lengths (prefix + prompt + output) the plan sizes for."""

    p50_tokens: int
    p99_tokens: int
    longest_tokens: int
    max_model_len: int
    """Right-sized: the least, in steps of 1,024, that rejects no request."""
    p99_max_model_len: int
    over_p99_share: float
    """Share of requests a max_model_len of ``p99_max_model_len`` would reject."""


class Plan(Record):
    study: str
    model: str
    workload: str
    gpus_per_node: int
    lengths: PlanLengths
    layouts: tuple[Layout, ...]
    calibrated_on: str | None = None
    """The GPU whose predictions use the study's calibration; the others use the built-in
    constants."""

    def ranked(self) -> list[Layout]:
        """Fitting layouts with a capacity, cheapest per million output tokens first (by
        capacity per GPU where there is no price)."""
        priced = [
            lay
            for lay in self.layouts
            if lay.fits and lay.prediction is not None and lay.prediction.capacity_rps
        ]

        def key(lay: Layout) -> tuple[float, float]:
            assert lay.prediction is not None
            cost = lay.prediction.usd_per_million_output(lay.gpus)
            return (
                cost if cost is not None else float("inf"),
                -(lay.prediction.per_gpu_rps(lay.gpus) or 0.0),
            )

        return sorted(priced, key=key)
