"""The training context: per-row shapes of a microbatch on one GPU, and how backward and recompute derive
from the forward operators.

Layer builders (``layers.py``) emit forward ops; ``backward`` and ``recompute`` turn
them into the other phases with the usual rules: a GEMM's backward is two GEMMs of the same size
(activation and weight gradients), an elementwise kernel's backward moves 1.5× the bytes,
flash attention's backward does 2.5× the forward FLOPs (five matmuls instead of two; Dao 2023), and a
collective in forward has a mirror collective in backward (Megatron's f/g operators).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import FLASH_BWD_EFFICIENCY_RATIO, elementwise_time, kernel_time
from shardplan.costmodel.core.ops import ATTN, COMM, GEMM, MEM, Op
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.hardware.spec import AttentionKernel, GpuSpec, SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES

DROPOUT_FAMILIES = ("gpt", "opt", "bloom")


@dataclass(slots=True)
class Ctx:
    """Everything the formulas need for a batch of layout rows, with derived per-row quantities."""

    model: ModelSpec
    system: SystemSpec
    work: TrainWorkload
    rows: LayoutArrays
    tokens: np.ndarray = field(init=False)  # tokens per GPU per microbatch: b·s/cp
    norm_tokens: np.ndarray = field(init=False)  # tokens an elementwise kernel sees (÷t under SP)
    act_bytes: float = field(init=False)
    mm_dtype: str = field(init=False)
    flash: np.ndarray = field(init=False)  # flash attention per row (context parallel requires it)
    dropout: bool = field(init=False)

    def __post_init__(self) -> None:
        r, w = self.rows, self.work
        self.tokens = (r.mb * w.seq_len / r.cp).astype(float)
        self.norm_tokens = np.where(r.sp == 1, self.tokens / r.tp, self.tokens)
        self.act_bytes = DTYPE_BYTES["bf16"] if w.dtype == "fp8" else DTYPE_BYTES[w.dtype]
        self.mm_dtype = w.dtype
        kernel = w.attention or self.system.software.attention
        self.flash = (r.cp > 1) | (kernel == AttentionKernel.FLASH)
        self.dropout = w.dropout if w.dropout is not None else self.model.family in DROPOUT_FAMILIES

    @property
    def gpu(self) -> GpuSpec:
        return self.system.gpu

    # --- op constructors ------------------------------------------------------------------
    def gemm(self, name: str, m: np.ndarray, k: np.ndarray | float, n: np.ndarray | float) -> list[Op]:
        """A linear layer's forward GEMM (M×K)·(K×N); under fp8 plus its cast kernels (torchao roofline)."""
        e = self.act_bytes
        flops = 2.0 * m * k * n
        wbytes = 1.0 if self.mm_dtype == "fp8" else e
        nbytes = wbytes * (m * k + k * n) + e * m * n
        ops = [Op(name, GEMM, flops, nbytes, kernel_time(self.gpu, flops, nbytes, self.mm_dtype))]
        if self.mm_dtype == "fp8":
            # tensorwise fp8: amax + cast of the input (2+2+1+1 B/elem) and of the weight (2+2+1 B/elem)
            cast = 6.0 * m * k + 5.0 * k * n
            ops.append(Op(f"{name}.fp8_cast", MEM, np.zeros_like(cast), cast, self.mem_time(cast)))
        return ops

    def mem_time(self, nbytes: np.ndarray) -> np.ndarray:
        return elementwise_time(self.gpu, nbytes)

    def mem(self, name: str, nbytes: np.ndarray, *, selective: bool = False) -> Op:
        nbytes = np.asarray(nbytes, dtype=float)
        return Op(name, MEM, np.zeros_like(nbytes), nbytes, self.mem_time(nbytes), selective=selective)

    def bmm(self, name: str, flops: np.ndarray, nbytes: np.ndarray) -> Op:
        """A batched attention matmul of the unfused path (selective recompute reruns it)."""
        return Op(name, GEMM, flops, nbytes, kernel_time(self.gpu, flops, nbytes, self.mm_dtype), selective=True)

    def flash_attn(self, name: str, flops: np.ndarray, nbytes: np.ndarray) -> Op:
        dtype = "bf16" if self.mm_dtype == "fp8" else self.mm_dtype
        t = kernel_time(self.gpu, flops, nbytes, dtype, efficiency=self.gpu.attention_efficiency)
        return Op(name, ATTN, flops, nbytes, t)

    def tp_stride(self) -> np.ndarray:
        return np.ones_like(self.rows.tp)

    def collective(self, name: str, kind: str, nbytes: np.ndarray, dim: str) -> Op:
        """A collective over the TP, CP or EP group of each row (zero when the group has one rank)."""
        r, s = self.rows, self.system
        n, stride = {"tp": (r.tp, 1), "cp": (r.cp, r.tp), "ep": (r.ep, r.tp * r.cp)}[dim]
        stride = np.broadcast_to(np.asarray(stride), np.shape(n))
        fn = {"all_reduce": comm.all_reduce_time, "reduce_scatter": comm.reduce_scatter_time,
              "all_gather": comm.all_gather_time, "all_to_all": comm.all_to_all_time}[kind]
        nbytes = np.asarray(nbytes, dtype=float)
        t = fn(s, nbytes, n, stride)
        if dim == "tp" and s.software.tp_comm_overlap:
            # TE/async-TP split GEMMs into chunks and overlap them with the SP all-gather/reduce-scatter.
            t = np.where(r.sp == 1, t * (1 - s.software.tp_comm_overlap), t)
        return Op(name, COMM, np.zeros_like(nbytes), nbytes, t, dim=dim)


# Megatron-LM overlaps the backward all-reduce of the TP input gradient with the weight-gradient GEMM
# (``--async-tensor-model-parallel-allreduce``, on by default since 2021). NCCL kernels share SMs with
# the GEMM, so overlapped communication still costs this fraction of its time (fitted to Korthikanti et
# al. 2022 Table 4: 22B layer backward 11.9 ms without SP).
ASYNC_TP_CONTENTION = 0.4
# An elementwise kernel's backward reads its saved input and the output gradient and writes the input
# gradient: three tensors where the forward moved two (norms, softmax, GeLU, dropout).
MEM_BWD_TRAFFIC = 1.5


def backward(ctx: Ctx, fwd: list[Op]) -> list[Op]:
    """Backward-pass ops of a layer from its forward ops."""
    out: list[Op] = []
    entry = next((op for op in fwd if op.kind == GEMM), None)
    for op in fwd:
        if op.kind == COMM and op.name.endswith("tp_allreduce") and entry is not None:
            wgrad = entry.time
            t = np.maximum(op.time - wgrad, 0.0) + ASYNC_TP_CONTENTION * np.minimum(op.time, wgrad)
            out.append(Op(f"{op.name}.bwd(async)", COMM, op.flops, op.nbytes, t, dim=op.dim))
            continue
        if op.kind == GEMM:
            out.append(Op(f"{op.name}.dgrad", GEMM, op.flops, op.nbytes, op.time, selective=op.selective))
            out.append(Op(f"{op.name}.wgrad", GEMM, op.flops, op.nbytes, op.time, selective=op.selective))
        elif op.kind == MEM:
            nbytes = MEM_BWD_TRAFFIC * op.nbytes
            out.append(Op(f"{op.name}.bwd", MEM, op.flops, nbytes, ctx.mem_time(nbytes)))
        elif op.kind == ATTN:
            flops = 2.5 * op.flops
            dtype = "bf16" if ctx.mm_dtype == "fp8" else ctx.mm_dtype
            eff = ctx.gpu.attention_efficiency * FLASH_BWD_EFFICIENCY_RATIO
            t = kernel_time(ctx.gpu, flops, 2.0 * op.nbytes, dtype, efficiency=eff)
            out.append(Op(f"{op.name}.bwd", ATTN, flops, 2.0 * op.nbytes, t))
        else:
            out.append(Op(f"{op.name}.bwd", COMM, op.flops, op.nbytes, op.time, dim=op.dim))
    return out


def selective_part(fwd: list[Op]) -> list[Op]:
    """The forward ops selective recompute reruns: core attention of the unfused path."""
    return [op for op in fwd if op.selective]
