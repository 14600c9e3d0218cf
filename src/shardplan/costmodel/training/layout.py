"""A training layout (the knobs the planner turns) and a training workload (what the user fixed).

``TrainLayout`` is one layout; ``LayoutArrays`` is many layouts as numpy columns, the form every
cost formula works on (a single layout is a one-row ``LayoutArrays``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardplan.costmodel.training.knobs import (
    DEFAULT_RECOMPUTE_MODULES,
    MAX_MTP_LAYERS,
    RECOMPUTE_CODE,
    RECOMPUTE_OF_CODE,
    Recompute,
    modules_mask,
    modules_of_mask,
)
from shardplan.hardware.spec import AttentionKernel

# fp32 master weights (4 B) plus the moments: Adam m and v in fp32 (8 B; Rajbhandari et al. 2020, K = 12);
# 8-bit Adam m and v (2 B; Dettmers et al. 2022); SGD momentum (4 B); Adafactor's factored second moment
# (~0 B per parameter, no first moment; Shazeer & Stern 2018); Adam with bf16 m and v beside the fp32 master (4 B;
# Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as Megatron-Bridge's
# DeepSeek-V3 recipes run it: recipes/deepseek/deepseek_v3.py@v0.4.0 l.161-164; under bf16 or fp8 delayed scaling
# Transformer Engine's FusedAdam may keep the master as a 16-bit remainder, 2 B less: not priced, an upper bound).
OPTIMIZER_STATE_BYTES = {"adam": 12.0, "adam-8bit": 6.0, "sgd": 8.0, "adafactor": 4.0, "adam-bf16": 8.0}


# Default headroom: 10% of GPU memory left free beyond framework_bytes. Evidence: the PyTorch caching allocator
# held 1.83 GiB reserved-but-unallocated at 75.3 GiB allocated on an H100 (2.4%; vllm-project/compressed-tensors
# PR #587, which then reserves 5%); without expandable segments reserved reached 2.1x allocated in an RL trainer
# (nvidia-cosmos/cosmos-rl PR #388); ZeRO (Rajbhandari et al. 2020, §3.2 "memory fragmentation") reports OOM
# with over 30% of memory free; torchtitan's published Llama 3.1 8B runs peak at 76.8-83.9 GiB on H100s with
# 96 GB HBM (pytorch/torchtitan docs/performance.md, Tables 1-2); vLLM leaves 10% (gpu_memory_utilization=0.9).
DEFAULT_HEADROOM_FRACTION = 0.10


class TrainWorkload(BaseModel):
    """What is being trained and how: fixed by the user, not chosen by the planner."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: Annotated[int, Field(ge=1)] = Field(description="Tokens per sequence s.")
    global_batch: Annotated[int, Field(ge=1)] = Field(description="Sequences per optimizer step B.")
    dtype: str = Field("bf16", description="Compute/activation datatype: bf16, fp16, fp8 (fp8 GEMMs), fp4 (NVFP4 "
                       "GEMMs, bf16 elsewhere), fp32.")
    grad_dtype: str = Field("fp32", description="Gradient accumulation and reduction datatype (Megatron: fp32).")
    grad_reduce_dtype: str | None = Field(
        None, description="Datatype of the gradient reduction (default: grad_dtype; under ZeRO-3 the compute "
        "dtype, as DeepSpeed and FSDP reduce-scatter 16-bit gradients into fp32 shards)."
    )
    optimizer: Literal["adam", "adam-8bit", "sgd", "adafactor", "adam-bf16"] = Field(
        "adam", description="Optimizer whose state is kept per parameter (with an fp32 master copy).")
    optimizer_bytes_per_param: Annotated[float, Field(ge=0)] | None = Field(
        None, description="Override: optimizer state bytes per parameter, the moments alone, for a stack that trains "
        "its 16-bit parameters with no fp32 master (NeMo AutoModel's MoE models); the Adam step then reads and writes "
        "the 16-bit weights. Default: from the optimizer, with an fp32 master."
    )
    attention: AttentionKernel | None = Field(None, description="Attention kernel (default: the system's).")
    overlap_grad_reduce: bool | None = Field(None, description="Overlap DP reduction (default: the system's).")
    dropout: bool | None = Field(
        None, description="Dropout masks stored (default: on for gpt/opt/bloom families, off otherwise)."
    )
    framework_bytes: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Override: memory the process holds besides tensors, per GPU (CUDA context, NCCL "
        "communicator buffers, cuBLAS/Transformer Engine workspaces); default: computed from the layout's "
        "communicators (costmodel.training.memory.framework_memory)."
    )
    memory_headroom_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        DEFAULT_HEADROOM_FRACTION, description="Share of GPU memory a plan leaves free for what the model does "
        "not see: allocator fragmentation and transient spikes (see DEFAULT_HEADROOM_FRACTION)."
    )
    memory_headroom_bytes: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Headroom as a size per GPU; overrides memory_headroom_fraction."
    )
    host_reserve_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.2, description="Share of host DRAM kept free of offloaded tensors (OS, pinned buffers)."
    )
    local_batch: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Sequences per data-parallel rank in one pipeline schedule, when gradient accumulation "
        "runs whole schedules one after another (torchtitan and NeMo AutoModel ``local_batch_size``): a step runs "
        "global_batch/(dp·local_batch) schedules, each with its own fill and drain and its own gradient reduction. "
        "None: one schedule per step (Megatron-LM, NeMo, DeepSpeed)."
    )
    mtp_layers: Annotated[int, Field(ge=0, le=MAX_MTP_LAYERS)] = Field(
        0, description="Multi-token-prediction modules trained beside the model (DeepSeek-V3 §2.2; Megatron-LM "
        "--mtp-num-layers, which Megatron-Bridge's DeepSeek-V3 recipes set to 1), on the last pipeline stage: each "
        "is an embedding lookup, two norms, a 2h→h projection, one transformer layer of the model's last-layer kind "
        "and another pass of the LM head with its loss. 0: none (Megatron-LM's default)."
    )

    @property
    def optimizer_state_bytes(self) -> float:
        """State per parameter: fp32 master copy plus the optimizer's moments, or the override (moments alone)."""
        if self.optimizer_bytes_per_param is not None:
            return self.optimizer_bytes_per_param
        return OPTIMIZER_STATE_BYTES[self.optimizer]

    def headroom_bytes(self, gpu_memory_bytes: float) -> float:
        """Bytes per GPU a plan must leave free (fragmentation, spikes), on top of ``framework_bytes``."""
        if self.memory_headroom_bytes is not None:
            return float(self.memory_headroom_bytes)
        return self.memory_headroom_fraction * float(gpu_memory_bytes)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.dtype not in ("bf16", "fp16", "fp8", "fp4", "fp32"):
            raise ValueError(f"dtype must be one of bf16, fp16, fp8, fp4, fp32 (got {self.dtype})")
        if self.grad_dtype not in ("bf16", "fp16", "fp8", "fp32"):
            raise ValueError(f"grad_dtype must be one of bf16, fp16, fp32 (got {self.grad_dtype})")
        if self.grad_dtype == "fp8":
            raise ValueError("grad_dtype must be bf16, fp16 or fp32")
        if self.grad_reduce_dtype not in (None, "bf16", "fp16", "fp32"):
            raise ValueError(f"grad_reduce_dtype must be bf16, fp16 or fp32 (got {self.grad_reduce_dtype})")
        return self


def pipeline_schedules(gb: np.ndarray, dp: np.ndarray, pp: np.ndarray, local_batch: int | None) -> np.ndarray:
    """Pipeline schedules one step runs: ``gb/(dp·local_batch)`` under PP when gradient accumulation repeats whole
    schedules (torchtitan train.py and AutoModel recipes/llm/benchmark.py call ``schedule.step`` once per
    accumulation step; NVIDIA-NeMo/Automodel@79d0ccf), else one (Megatron-LM runs every microbatch of the step in
    one schedule: schedules.py@d98e8a6)."""
    gb, dp, pp = (np.asarray(x, dtype=float) for x in (gb, dp, pp))
    if local_batch is None:
        return np.ones(np.broadcast(gb, dp, pp).shape)
    return np.where(pp > 1, np.maximum(gb / (dp * local_batch), 1.0), 1.0)


def fill_drain_slots(gb: np.ndarray, dp: np.ndarray, pp: np.ndarray, v: np.ndarray, local_batch: int | None
                     ) -> np.ndarray:
    """Microbatch slots a step spends filling and draining the pipeline: ``(p−1)/v`` per schedule (Narayanan et al.
    2021 §2.2), times ``pipeline_schedules``."""
    p, v = np.asarray(pp, dtype=float), np.asarray(v, dtype=float)
    return pipeline_schedules(gb, dp, pp, local_batch) * (p - 1) / v


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainLayout:
    """One training layout: parallel degrees, microbatching, memory-saving choices."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    microbatch: int = 1
    interleave: int = 1
    recompute: Recompute = Recompute.NONE
    recompute_layers: int | None = None
    """Full recompute of only this many layers per stage (None: all); the rest store everything."""
    sequence_parallel: bool = False
    zero_stage: int = 0
    offload_optimizer: float = 0.0
    offload_weights: float = 0.0
    offload_activations: float = 0.0
    etp: int | None = None
    """Expert tensor parallelism (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960): None = tp (Megatron's
    default ``--expert-tensor-parallel-size``). Expert-data-parallel ranks follow: edp = tp·cp·dp / (etp·ep)."""
    recompute_modules: tuple[str, ...] | None = None
    """Under ``--recompute selective``: the modules recomputed in every layer (``knobs.RECOMPUTE_MODULES``,
    Megatron's ``--recompute-modules``, or one of ``knobs.RECOMPUTE_POLICIES`` alone); None = Megatron's default,
    core_attn."""

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


@dataclass(frozen=True, slots=True)
class LayoutArrays:
    """Many layouts as int/float numpy columns of equal length (one row per layout)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    cp: np.ndarray
    mb: np.ndarray
    v: np.ndarray
    rc: np.ndarray  # recompute code: 0 none, 1 selective, 2 full
    rk: np.ndarray  # fully recomputed layers per stage when rc == 2 (clipped to the stage's layers)
    sp: np.ndarray  # sequence parallel, 0/1
    zero: np.ndarray
    f_opt: np.ndarray  # fraction of optimizer state (and its update) on the CPU
    f_w: np.ndarray  # fraction of weights kept on the CPU and streamed in
    f_act: np.ndarray  # fraction of stored activations kept on the CPU
    gb: np.ndarray  # global batch (sequences per step) of the row
    etp: np.ndarray  # expert tensor parallelism (tp unless folded)
    sel: np.ndarray  # selective recompute modules, a bit mask over knobs.RECOMPUTE_MODULES (rc == 1)

    @property
    def edp(self) -> np.ndarray:
        """Expert-data-parallel ranks: tp·cp·dp / (etp·ep) (at least 1)."""
        return np.maximum(self.tp * self.cp * self.dp / (self.etp * self.ep), 1.0)

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_layouts(cls, layouts: list[TrainLayout], global_batch: int) -> LayoutArrays:
        def col(get, dtype=np.int64) -> np.ndarray:
            return np.array([get(x) for x in layouts], dtype=dtype)

        return cls(
            tp=col(lambda x: x.tp), pp=col(lambda x: x.pp), dp=col(lambda x: x.dp), ep=col(lambda x: x.ep),
            cp=col(lambda x: x.cp), mb=col(lambda x: x.microbatch), v=col(lambda x: x.interleave),
            rc=col(lambda x: RECOMPUTE_CODE[Recompute(x.recompute)]),
            rk=col(lambda x: 10**9 if x.recompute_layers is None else x.recompute_layers),
            sp=col(lambda x: int(x.sequence_parallel)), zero=col(lambda x: x.zero_stage),
            f_opt=col(lambda x: x.offload_optimizer, float), f_w=col(lambda x: x.offload_weights, float),
            f_act=col(lambda x: x.offload_activations, float),
            gb=np.full(len(layouts), global_batch, dtype=np.int64), etp=col(lambda x: x.expert_tp),
            sel=col(lambda x: modules_mask(x.recompute_modules)),
        )

    def row(self, i: int) -> TrainLayout:
        rk = int(self.rk[i])
        return TrainLayout(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), ep=int(self.ep[i]), cp=int(self.cp[i]),
            microbatch=int(self.mb[i]), interleave=int(self.v[i]), recompute=RECOMPUTE_OF_CODE[int(self.rc[i])],
            recompute_layers=None if rk >= 10**9 else rk, sequence_parallel=bool(self.sp[i]),
            zero_stage=int(self.zero[i]), offload_optimizer=float(self.f_opt[i]),
            offload_weights=float(self.f_w[i]), offload_activations=float(self.f_act[i]),
            etp=None if int(self.etp[i]) == int(self.tp[i]) else int(self.etp[i]),
            recompute_modules=None if (mods := modules_of_mask(int(self.sel[i]))) == DEFAULT_RECOMPUTE_MODULES
            else mods,
        )

    def take(self, idx: np.ndarray) -> LayoutArrays:
        return LayoutArrays(*(getattr(self, f.name)[idx] for f in fields(self)))

    def replace(self, **cols: np.ndarray) -> LayoutArrays:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(cols)
        return LayoutArrays(**values)
