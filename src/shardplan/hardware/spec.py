"""What the machines are: GPUs, links, nodes, and a cluster of N GPUs built from a system preset.

All quantities are SI with the unit in the field name (bytes, bytes_per_s, flops, s). Achievable
efficiencies are data here (overridable by the user in a YAML/JSON file), never constants in code."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shardplan.hardware.software import AttentionKernel as AttentionKernel  # re-exported: defined here first
from shardplan.hardware.software import SoftwareSpec
from shardplan.hardware.units import Bytes, Flops, Fraction, MaybeRate, NonNeg, Positive, Rate, Seconds

MAX_CURVE_POINTS = 256  # most points in one efficiency curve (the catalog's have at most a dozen)
MAX_GPUS_PER_NODE = 65_536
MAX_NODES = 2**20

PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")  # carry a peak rate (int4/fp4: dequantised)


class LinkSpec(BaseModel):
    """A communication link as seen by one GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bandwidth_bytes_per_s: Rate = Field(description="Peak bandwidth per GPU, one direction.")
    latency_s: Seconds = Field(description="Per-message (per ring step) latency.")
    efficiency: Fraction = Field(0.8, description="Achievable fraction of peak for large messages.")
    nvls_bus_bytes_per_s: Positive | None = Field(
        None, description="All-reduce bus bandwidth with NVLink SHARP (NVLS: the NVSwitch reduces in the network; "
        "NCCL selects it above 4 GPUs of a node), measured by nccl-tests; None: no in-switch reduction.")

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


class AttentionCurve(BaseModel):
    """Measured throughput of one attention kernel vs sequence length (one direction, mask and head dim)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kernel: Literal["flash2", "cudnn", "flash3"]
    direction: Literal["fwd", "bwd"]
    causal: bool
    head_dim: Annotated[int, Field(gt=0, le=2**16)]
    seq: list[Annotated[int, Field(gt=0, le=2**31)]] = Field(description="Sequence lengths, increasing.",
                                                            max_length=MAX_CURVE_POINTS)
    tflops: list[Positive] = Field(description="TFLOP/s at each length (causal: executed FLOPs).",
                                   max_length=MAX_CURVE_POINTS)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if len(self.seq) != len(self.tflops) or not self.seq or list(self.seq) != sorted(set(self.seq)):
            raise ValueError("seq must be increasing, one tflops value per length")
        return self


GiB = 2**30


class KernelScales(BaseModel):
    """Multipliers on a GPU's achievable fractions of peak, copied from ``SystemSpec.calibration``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gemm: Positive = 1.0
    attention: Positive = 1.0
    elementwise: Positive = 1.0


class Calibration(BaseModel):
    """A system file's fit to measured runs (``shardplan calibrate``); every default means "no change".

    Each field acts in exactly one place of the cost model: ``gemm_scale``/``attention_scale``/
    ``elementwise_scale`` in the kernel roofline (``costmodel.roofline``; a fraction never exceeds 1),
    the comm scales in the collective bandwidths (``costmodel.comm``; efficiency never above 1), the two
    overheads in the training step composition (``costmodel.train``), ``memory_overhead_bytes`` in the
    per-GPU memory total (framework share). The bounds are physical ranges, not fit conveniences.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gemm_scale: Annotated[float, Field(ge=0.5, le=1.3)] = Field(
        1.0, description="Multiplies the achievable GEMM fraction of peak (capped at peak).")
    attention_scale: Annotated[float, Field(ge=0.5, le=1.5)] = Field(
        1.0, description="Multiplies the fused-attention fraction of peak (capped at peak).")
    elementwise_scale: Annotated[float, Field(ge=0.5, le=1.3)] = Field(
        1.0, description="Multiplies the achieved fraction of memory bandwidth of every memory-bound kernel.")
    intra_node_comm_scale: Annotated[float, Field(ge=0.3, le=1.3)] = Field(
        1.0, description="Multiplies the intra-node link efficiency of collectives (capped at 1).")
    inter_node_comm_scale: Annotated[float, Field(ge=0.3, le=1.3)] = Field(
        1.0, description="Multiplies the inter-node link efficiency of collectives (capped at 1).")
    step_overhead_s: Annotated[float, Field(ge=0.0, le=10.0)] = Field(
        0.0, description="Fixed time added to every training step (data loading, logging, host sync).")
    microbatch_overhead_s: Annotated[float, Field(ge=0.0, le=0.1)] = Field(
        0.0, description="Fixed time per microbatch per pipeline stage slot (launch gaps, Python overhead).")
    memory_overhead_bytes: Annotated[float, Field(ge=0.0, le=16 * GiB)] = Field(
        0.0, description="Extra GPU memory per GPU (allocator fragmentation, NCCL and library buffers).")
    loo_error_pct: NonNeg | None = Field(
        None, description="Leave-one-out |error| of step time over the calibration runs (≥ 3 runs), in %.")
    band_pct: NonNeg | None = Field(
        None, description="Error band half-width (%) for predictions on this system: the 85th percentile of the "
        "leave-one-out |errors| (≥ 3 runs); None: the shipped table's band for calibrated systems.")
    runs: list[str] = Field(default_factory=list, description="sha256 fingerprints of the runs fitted.")
    date: str | None = Field(None, description="ISO date of the fit.")

    @property
    def kernel_scales(self) -> KernelScales:
        return KernelScales(gemm=self.gemm_scale, attention=self.attention_scale, elementwise=self.elementwise_scale)

    @property
    def is_identity(self) -> bool:
        return self.model_dump(include=set(PARAMETERS)) == Calibration().model_dump(include=set(PARAMETERS))


# The fitted parameters, in the order the calibrator considers them.
PARAMETERS = ("gemm_scale", "attention_scale", "elementwise_scale", "intra_node_comm_scale",
              "inter_node_comm_scale", "step_overhead_s", "microbatch_overhead_s", "memory_overhead_bytes")


class GpuSpec(BaseModel):
    """One accelerator: memory, peak rates per datatype, and what fraction of peak is achievable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name, e.g. h100-sxm.")
    vendor: str = Field("nvidia", description="nvidia, amd, …")
    memory_bytes: Bytes = Field(description="Device memory (HBM/GDDR) in bytes.")
    memory_bandwidth_bytes_per_s: Rate = Field(description="Peak device-memory bandwidth.")
    peak_flops: dict[str, Flops] = Field(
        description="Dense (no sparsity) peak FLOP/s per datatype: fp32, tf32, bf16, fp16, fp8, int8, fp4."
    )
    matmul_efficiency: list[tuple[Positive, Fraction]] = Field(
        description="Achieved fraction of peak for one GEMM vs its FLOPs, as (flops, fraction) points; "
        "interpolated in log(flops), clamped at the ends."
    )
    memory_efficiency: list[tuple[Positive, Fraction]] = Field(
        description="Achieved fraction of peak memory bandwidth vs bytes moved by one kernel, as points.")
    elementwise_efficiency: list[tuple[Positive, Fraction]] | None = Field(
        None, description="Framework elementwise kernels (norms, activations, dropout, softmax) vs bytes moved; "
        "tuned GEMM/attention kernels use memory_efficiency. None: same as memory_efficiency.")
    optimizer_bandwidth_fraction: Fraction | None = Field(
        None, description="Achieved fraction of peak memory bandwidth of the optimizer step's multi-tensor kernels "
        "(fused Adam, gradient norm, master-to-model copy, gradient-buffer zeroing), measured; None: "
        "memory_efficiency.")
    gemm_stream: tuple[Seconds, Fraction] | None = Field(
        None, description="A memory-bound GEMM (weights streamed: decode) as measured: (fixed seconds, fraction of "
        "peak bandwidth), time = fixed + bytes / (fraction · bandwidth); None: the streaming curve "
        "(memory_efficiency) and kernel_fixed_s.")
    attention_efficiency: Fraction = Field(
        0.55, description="Fused (flash) attention forward: fraction of the matmul peak it reaches.")
    matmul_peak_fraction: dict[str, Fraction] = Field(
        default_factory=dict, description="Maximum achievable matmul FLOP/s (best shape, measured) as a fraction "
        "of each datatype's peak. GEMMs in another datatype than bf16 run at the efficiency curve × "
        "fraction[dtype] / fraction[bf16]; a datatype absent here runs at the curve.")
    attention_curves: list[AttentionCurve] = Field(max_length=MAX_CURVE_POINTS,
        default_factory=list, description="Measured attention-kernel throughput (flash2/cudnn/flash3); a kernel "
        "without curves falls back to attention_efficiency.")
    kernel_launch_s: Seconds = Field(4e-6, description="Floor on any one kernel's time (launch + tail).")
    sm_count: Annotated[int, Field(ge=1)] | None = Field(None, description="Streaming multiprocessors enabled.")
    sm_stream_bytes_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="Memory bandwidth one SM streams when few SMs are busy (its share of the L2's read "
        "bandwidth); None: no per-SM limit is modelled.")
    kernel_fixed_s: Seconds = Field(0.0, description="Time every kernel pays on top of its compute or memory time "
                                    "(launch, first memory round trips, last wave's drain); 0 = the floor alone.")
    tdp_w: Annotated[float, Field(ge=0.0, le=1e5, allow_inf_nan=False)] = Field(0.0, description="Board power.")
    fp8_any_layout: bool = Field(False, description="FP8 GEMMs take every operand layout (Blackwell), so a "
        "per-tensor-scaled FP8 tensor needs no transposed copy for its column-wise use; False: TN only (Hopper).")
    quantize_efficiency: Fraction = Field(1.0, description="Rate of the low-precision quantization (cast) kernels "
        "as a fraction of a streaming kernel's over the same bytes (memory_efficiency), measured.")
    gemm_shape_table: Literal["xla-sm90", "xla-sm100"] | None = Field(None, description="Measured GEMM grid over "
        "(M, N, K) (hardware/gemm_data.py): GEMMs of known shape follow it at matmul_efficiency's top; None: curve.")
    source: str = Field("", description="Datasheet or measurement the numbers come from.")
    scales: KernelScales = Field(
        default_factory=lambda: KernelScales(), exclude=True,
        description="Derived from the system's calibration block (never set by hand, never dumped).",
    )

    @field_validator("peak_flops")
    @classmethod
    def _known_dtypes(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(PEAK_DTYPES))
        if bad:
            raise ValueError(f"unknown datatype(s) {bad}; allowed: {', '.join(PEAK_DTYPES)}")
        if not ({"bf16", "fp16"} & set(v)):
            raise ValueError("needs a bf16 or fp16 peak")
        return v

    @field_validator("matmul_efficiency", "memory_efficiency", "elementwise_efficiency", mode="before")
    @classmethod
    def _short(cls, v: object) -> object:
        if isinstance(v, list | tuple) and len(v) > MAX_CURVE_POINTS:
            raise ValueError(f"has {len(v):,} points; at most {MAX_CURVE_POINTS}")
        return v

    @field_validator("matmul_efficiency", "memory_efficiency", "elementwise_efficiency")
    @classmethod
    def _sorted(cls, v: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("needs at least one (size, fraction) point")
        xs = [x for x, _ in v]
        if xs != sorted(xs) or len(set(xs)) != len(xs):
            raise ValueError("points must be sorted by size, without repeats")
        return v

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for a compute datatype, falling back along fp8→bf16→fp16→fp32 where absent."""
        chain = {
            "fp4": ("fp4", "fp8", "bf16", "fp16"),
            "fp8": ("fp8", "bf16", "fp16"),
            "int8": ("int8", "fp16", "bf16"),
            "bf16": ("bf16", "fp16"),
            "fp16": ("fp16", "bf16"),
            "tf32": ("tf32", "fp32"),
            "fp32": ("fp32",),
        }[dtype]
        for d in chain:
            if d in self.peak_flops:
                return self.peak_flops[d]
        return self.peak_flops.get("fp32", min(self.peak_flops.values()))


class SystemSpec(BaseModel):
    """A node design (GPUs, links, host) from which clusters of any size are built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name, e.g. dgx-h100.")
    description: str = Field("", description="What machine this is.")
    gpu: GpuSpec = Field(description="The GPU in every slot.")
    gpus_per_node: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)] = Field(
        description="GPUs sharing the fast intra-node fabric.")
    gpus_per_tray: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)] | None = Field(
        None, description="GPUs per compute tray (one host, what a scheduler allocates) where a node is a rack-scale "
        "NVLink domain of several trays (NVL72: 4); a job of more than one tray uses whole trays and is split into "
        "equal NVLink domains (hardware.domains). None: the node is the unit.")
    nvlink_domain_gpus: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)] | None = Field(
        None, description="Largest NVLink domain of a tray system (NVL72: 72) once a job is laid out and "
        "gpus_per_node holds the domain it uses; None: gpus_per_node.")
    intra_node: LinkSpec = Field(description="GPU↔GPU inside a node (NVLink/xGMI or PCIe).")
    inter_node: LinkSpec | None = Field(None, description="GPU↔GPU across nodes, per GPU (None: one node only).")
    pcie: LinkSpec = Field(description="Host↔GPU link, per GPU.")
    host_memory_bytes: Bytes = Field(description="CPU DRAM per node.")
    cpu_flops: Flops = Field(1e12, description="CPU fp32 FLOP/s per node, for CPU-side compute.")
    cpu_memory_bandwidth_bytes_per_s: Rate = Field(1e11, description="CPU DRAM bandwidth per node.")
    disk_bytes: Annotated[float, Field(ge=0.0, le=2**60, allow_inf_nan=False)] = Field(0.0,
        description="Local disk capacity per node.")
    disk_read_bytes_per_s: MaybeRate = Field(0.0, description="Disk sequential read bandwidth per node.")
    disk_write_bytes_per_s: MaybeRate = Field(0.0, description="Disk sequential write bandwidth per node.")
    max_nodes: Annotated[int, Field(ge=1, le=MAX_NODES)] | None = Field(None,
        description="Largest cluster of this kind.")
    # --- single-GPU offloading (the `offload` job); None: derived from the fields above -----------
    gpu_sustained_matmul_flops: Flops | None = Field(
        None, description="Sustained fp16/bf16 GEMM rate of this machine's GPU over long runs (power and clock "
        "limits of the host), capping the GPU's efficiency curve; None: no cap."
    )
    cpu_attention_bytes_per_s: Rate | None = Field(
        None, description="fp16 KV-cache bytes per second the host streams through decode attention on the CPU "
        "(fp16→fp32 conversion included); None: 10% of DRAM bandwidth (5 bytes of DRAM traffic per KV byte at "
        "half of peak)."
    )
    host_staging_bytes_per_s: Rate | None = Field(
        None, description="Rate of copying pageable host memory into a pinned buffer before a DMA to the GPU; "
        "None: a quarter of DRAM bandwidth (read + write at half of peak)."
    )
    software: SoftwareSpec = Field(default_factory=SoftwareSpec, description="Software stack defaults.")
    calibration: Calibration = Field(default_factory=Calibration,
                                     description="Fit to measured runs (`shardplan calibrate`); default: none.")
    source: str = Field("", description="Where the numbers come from.")

    @field_validator("disk_read_bytes_per_s", "disk_write_bytes_per_s")
    @classmethod
    def _disk_rate(cls, v: float) -> float:
        if 0 < v < 1e6:
            raise ValueError(f"must be 0 (no disk) or at least 1 MB/s, got {v:.3g}")
        return v

    @model_validator(mode="after")
    def _trays(self) -> Self:
        tray, domain = self.gpus_per_tray, self.nvlink_domain_gpus or self.gpus_per_node
        if tray is not None and (self.gpus_per_node % tray or domain % tray):
            raise ValueError(f"gpus_per_tray ({tray}) must divide gpus_per_node ({self.gpus_per_node}) and the "
                             f"NVLink domain ({domain})")
        if domain < self.gpus_per_node:
            raise ValueError(f"nvlink_domain_gpus ({domain}) must be ≥ gpus_per_node ({self.gpus_per_node})")
        return self

    @model_validator(mode="after")
    def _calibrate_gpu(self) -> Self:
        # The GPU carries the calibration's kernel scales so that the roofline applies them in one place;
        # they are derived here on every validation, so a dumped and reloaded system never applies them twice.
        scales = self.calibration.kernel_scales
        if self.gpu.scales != scales:
            object.__setattr__(self, "gpu", self.gpu.model_copy(update={"scales": scales}))
        return self


class Cluster(BaseModel):
    """N GPUs of one system kind: whole nodes when more than one node is used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: SystemSpec
    num_gpus: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _check(self) -> Self:
        g, n, tray = self.system.gpus_per_node, self.num_gpus, self.system.gpus_per_tray
        if tray and n > tray and n % tray:
            raise ValueError(f"gpus ({n}) must be ≤ {tray} or a multiple of {tray}: a job on {self.system.name} uses "
                             f"whole compute trays of {tray} GPUs")
        if n > g and n % g:
            raise ValueError(f"gpus ({n}) must be ≤ {g} or a multiple of {g} (GPUs per node of {self.system.name})")
        if n > g and self.system.inter_node is None:
            raise ValueError(f"gpus ({n}) exceeds one node of {self.system.name} ({g}), which has no network")
        if self.system.max_nodes and self.num_nodes > self.system.max_nodes:
            raise ValueError(f"gpus ({n}) exceeds {self.system.max_nodes} nodes of {self.system.name}")
        return self

    @property
    def gpu(self) -> GpuSpec:
        return self.system.gpu

    @property
    def gpus_per_node(self) -> int:
        return min(self.system.gpus_per_node, self.num_gpus)

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.system.gpus_per_node))


def with_calibration(system: SystemSpec, calibration: Calibration) -> SystemSpec:
    """``system`` with another calibration block (re-validated, so the GPU's kernel scales follow it)."""
    return SystemSpec.model_validate({**dict(system), "calibration": calibration})
