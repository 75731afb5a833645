"""What the engine runs on and what it serves: GPU and model specifications.

These feed the memory model (will a config start, how many KV tokens fit), the roofline
(compute vs bandwidth time of a step) and the simulator. Peaks are dense tensor-core figures
from the vendors' spec sheets.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from kneepoint.records.base import InputRecord

MIB = 1024**2
GIB = 1024**3


class GpuSpec(InputRecord):
    """One accelerator's peaks and memory: a GPU model, or a CPU host serving vLLM's CPU
    build (``architecture: cpu``: its peaks are the host's, its memory the host's RAM)."""

    name: str = Field(min_length=1)
    """Catalogue key, e.g. h100-sxm."""
    display_name: str
    architecture: Literal["ampere", "ada", "hopper", "blackwell", "cdna3", "cpu"]
    cores: int | None = Field(default=None, ge=1)
    """A CPU device's cores (None for a GPU)."""
    bf16_tflops: float = Field(gt=0.0)
    """Dense BF16 tensor-core peak, TFLOP/s."""
    fp8_tflops: float | None = Field(default=None, gt=0.0)
    """Dense FP8 tensor-core peak; None where the GPU has no FP8 tensor cores."""
    fp4_tflops: float | None = Field(default=None, gt=0.0)
    """Dense FP4 (NVFP4) tensor-core peak; None where the GPU has no FP4 tensor cores
    (Blackwell has them)."""
    hbm_tb_s: float = Field(gt=0.0)
    """Peak memory bandwidth, TB/s."""
    memory_mib: int = Field(gt=0)
    """Total device memory as NVML reports it."""
    interconnect_gb_s: float = Field(gt=0.0)
    """Per-GPU bandwidth for tensor-parallel all-reduce (NVLink or PCIe), GB/s."""
    nvlink: bool = False
    """Whether the GPUs of a node are joined by a GPU-to-GPU fabric: NVLink (SXM/HGX boards
    do; PCIe cards do not) or AMD's Infinity Fabric between OAM parts. Tensor parallelism
    past 2 GPUs runs its all-reduces over it."""
    has_gpm: bool
    """Whether NVML GPM metrics (SM, tensor, DRAM activity) exist on this GPU."""
    nvml_names: tuple[str, ...] = ()
    """Substrings of nvmlDeviceGetName() that identify this GPU (none for AMD's parts,
    which NVML does not see)."""
    host_link_gb_s: float | None = Field(default=None, gt=0.0)
    """The device's link to host memory, each way, GB/s (PCIe Gen5 x16 64, Gen4 x16 32:
    PCI-SIG's rates); None where none is (a CPU host)."""
    usd_per_hour: float | None = Field(default=None, gt=0.0)
    """A typical on-demand price of one GPU-hour (None where the catalogue has no source);
    a study's ``budget.price_per_gpu_hour_usd`` overrides it."""

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops is not None

    @property
    def has_fp4(self) -> bool:
        return self.fp4_tflops is not None

    def nvml_match(self, reported: str) -> int:
        """How closely an NVML device name (``NVIDIA GB200``) names this GPU: the length of
        the longest of its ``nvml_names`` the name holds, 0 for none (``NVIDIA GB200`` holds
        the B200's ``B200`` and the GB200's ``GB200``: the longer match identifies it)."""
        return max((len(n) for n in self.nvml_names if n in reported), default=0)

    @property
    def is_cpu(self) -> bool:
        return self.architecture == "cpu"

    @property
    def has_nvml(self) -> bool:
        """Whether NVML reads this device: NVIDIA's GPUs; not a CPU host, not AMD's parts
        (ROCm's amd-smi, which kneepoint does not read)."""
        return not self.is_cpu and self.architecture != "cdna3"

    @property
    def runs_marlin(self) -> bool:
        """Whether vLLM's Marlin w4a16 kernels (awq_marlin, gptq_marlin) run here: NVIDIA
        Ampere and newer (vLLM's quantization supported-hardware table: not on AMD GPUs or
        the CPU)."""
        return self.architecture in ("ampere", "ada", "hopper", "blackwell")

    @property
    def offloads_kv(self) -> bool:
        """Whether vLLM offloads KV blocks to host memory from this device: CUDA-alike GPUs
        (NVIDIA's, AMD's through ROCm) and Intel's XPUs; its CPU build refuses ("CPU
        Offloading is currently only supported on CUDA-alike and XPU GPUs", vLLM 0.32)."""
        return not self.is_cpu and self.host_link_gb_s is not None

    @property
    def kind(self) -> str:
        """``CPU`` or ``GPU``: what the reports call the device."""
        return "CPU" if self.is_cpu else "GPU"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity at which BF16 compute and bandwidth take equal time."""
        return self.bf16_tflops * 1e12 / (self.hbm_tb_s * 1e12)


# Shape bounds: past the largest published configs by 8x or more (Llama-3.1-405B: 126
# layers, hidden 16,384, MLP 53,248, 128 heads; Llama 4 Scout: a 10,485,760-token context;
# Gemma 3: a 262,144-token vocabulary; DeepSeek-V3: 256 experts). A config.json far past them
# is a typo or an attack, and its shape overflowed a float computing parameter counts.
_LAYERS, _WIDTH, _HEADS, _TOKENS = 4096, 2**20, 8192, 2**30


class ModelSpec(InputRecord):
    """A decoder-only transformer's shape (the text part) and parameter counts."""

    name: str = Field(min_length=1)
    hf_id: str | None = None
    """Hugging Face repository id, used as the served model when the study names none."""
    num_layers: int = Field(ge=1, le=_LAYERS)
    hidden_size: int = Field(ge=1, le=_WIDTH)
    num_attention_heads: int = Field(ge=1, le=_HEADS)
    num_kv_heads: int = Field(ge=1, le=_HEADS)
    head_dim: int = Field(ge=1, le=_WIDTH)
    intermediate_size: int = Field(ge=1, le=_WIDTH)
    """Dense MLP width (unused by MoE layers)."""
    vocab_size: int = Field(ge=1, le=_TOKENS)
    max_position_embeddings: int = Field(ge=1, le=_TOKENS)
    tie_word_embeddings: bool = False
    num_experts: int = Field(default=0, ge=0, le=_WIDTH)
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_per_token: int = Field(default=0, ge=0, le=_WIDTH)
    moe_intermediate_size: int = Field(default=0, ge=0, le=_WIDTH)
    weight_dtype_bytes: float = Field(default=2.0, gt=0.0)
    """Bytes per weight as stored (2 for bf16/fp16)."""
    params_total: float | None = Field(default=None, gt=0.0)
    """Total parameters; estimated from the shape when not given."""
    params_active: float | None = Field(default=None, gt=0.0)
    """Parameters used per token (differs from total for MoE); estimated when not given."""
    sliding_window_tokens: int | None = Field(default=None, ge=1, le=_TOKENS)
    """Keys a sliding-window layer attends to (and keeps KV for), e.g. 1024 for Gemma 3."""
    sliding_window_layers: int = Field(default=0, ge=0, le=_LAYERS)
    """How many of the layers use the window; the others attend over the whole context."""

    @model_validator(mode="after")
    def _shape(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_kv_heads")
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError("an MoE model needs 0 < experts_per_token <= num_experts")
        if self.num_experts and not self.moe_intermediate_size:
            raise ValueError("an MoE model needs moe_intermediate_size")
        if self.sliding_window_layers > self.num_layers:
            raise ValueError("sliding_window_layers must be at most num_layers")
        if self.sliding_window_layers and self.sliding_window_tokens is None:
            raise ValueError("sliding_window_layers needs sliding_window_tokens (the window size)")
        if self.sliding_window_tokens is not None and not self.sliding_window_layers:
            raise ValueError("sliding_window_tokens needs sliding_window_layers (layers using it)")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def full_attention_layers(self) -> int:
        """Layers that attend over the whole context."""
        return self.num_layers - self.sliding_window_layers

    @property
    def window_tokens(self) -> int:
        """The sliding window in tokens; 0 for a model with no sliding-window layers."""
        return self.sliding_window_tokens or 0

    def _attention_params(self) -> int:
        q_and_o = 2 * self.hidden_size * self.num_attention_heads * self.head_dim
        k_and_v = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        return q_and_o + k_and_v

    def _embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def estimated_params(self) -> tuple[float, float]:
        """(total, active) parameters from the shape: gated MLPs, untied norms ignored."""
        attention = self._attention_params()
        if self.is_moe:
            expert = 3 * self.hidden_size * self.moe_intermediate_size
            router = self.hidden_size * self.num_experts
            total_mlp = self.num_experts * expert + router
            active_mlp = self.experts_per_token * expert + router
        else:
            total_mlp = active_mlp = 3 * self.hidden_size * self.intermediate_size
        embeddings = self._embedding_params()
        total = self.num_layers * (attention + total_mlp) + embeddings
        active = self.num_layers * (attention + active_mlp) + embeddings
        return float(total), float(active)

    def total_params(self) -> float:
        return self.params_total or self.estimated_params()[0]

    def active_params(self) -> float:
        return self.params_active or self.estimated_params()[1]

    def kv_bytes_per_token(
        self, kv_dtype_bytes: float = 2.0, tensor_parallel: int = 1, layers: int | None = None
    ) -> float:
        """KV bytes one token occupies on one GPU: 2 x layers x kv_heads x head_dim x bytes,
        over every layer unless ``layers`` says how many.

        Tensor parallelism splits the KV heads; when there are fewer heads than GPUs each GPU
        keeps a replica of one head.
        """
        heads_per_gpu = max(1, math.ceil(self.num_kv_heads / tensor_parallel))
        num_layers = self.num_layers if layers is None else layers
        return 2.0 * num_layers * heads_per_gpu * self.head_dim * kv_dtype_bytes
