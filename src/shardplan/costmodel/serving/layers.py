"""Kernels of one transformer layer during serving, on one GPU, for one step of many layouts at once.

A *step* is one forward pass of a replica: a prefill chunk (many prompt tokens) or a decode step (one
new token for each sequence of a micro-batch). Per GPU, with tensor parallelism ``t`` (Megatron
sharding, Shoeybi et al. 2019): attention heads ÷t, MLP width ÷t, vocabulary ÷t; KV heads ÷t but at
least one (vLLM replicates KV heads when t exceeds them). Weights are read once per step (every GEMM
streams its weight matrix from HBM whatever the number of tokens), decode attention reads the KV
cache of every sequence, and each layer ends with a TP all-reduce of the step's activations.

The operators come from the shared inventory (``core.operators``); ``InferCtx`` prices them for an engine:
linear weights in their (possibly quantised) datatype, 16-bit router and LM head, elementwise kernels at
streaming bandwidth (fused or captured in CUDA graphs), one TP all-reduce per block (the engines' custom
all-reduce inside a node). What only serving has is here: the step (``Step``), the KV-cache write, logits for
the sampled positions only and the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core import recurrent as rec
from shardplan.costmodel.core.kernels import (
    attention_time,
    compute_time,
    gemm_time,
    grid_fraction,
    interp_efficiency,
    kernel_time,
    memory_time,
    with_launch,
)
from shardplan.costmodel.core.operators import (
    Attention,
    Elementwise,
    Gemm,
    kv_heads_per_rank,
)
from shardplan.costmodel.core.ops import ATTN, COMM, GEMM, MEM, Op
from shardplan.costmodel.core.routing import distinct_experts, ep_imbalance
from shardplan.costmodel.serving.collectives import ep_all_to_all_time, tp_all_reduce_time
from shardplan.hardware.spec import GpuSpec, SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES

ACT_BYTES = 2.0  # activations stay 16-bit in every datatype mode (fp8 GEMMs quantise their inputs on the fly)
LOGIT_BYTES = 4.0  # vLLM upcasts logits to fp32 before sampling
# Rows of one tensor-core MMA: Hopper's wgmma.mma_async has M = 64 in every shape (PTX ISA 8.0, "Matrix shape":
# .m64nNk16 for f16/bf16, .m64nNk32 for e4m3/e5m2); Ampere's warp-level mma.sync m16n8k16 is tiled into the 64-row
# CTA tiles of cuBLAS/CUTLASS's smallest GEMM kernels. A decode GEMM of M rows does ⌈M/64⌉·64 rows of work.
MMA_TILE_M = 64
# Weight-only int4/int8 (GPTQ/AWQ): one 16-bit scale per group of weights along the input dimension.
QUANT_SCALE_BYTES = 2.0


# Block-scaled 4-bit floats: E2M1 values with one scale per block. MXFP4 (OCP Microscaling Formats (MX) v1.0 §5,
# Table 1): one E8M0 (1-byte) scale per 32 values = 4.25 bits. NVFP4 (NVIDIA, "Introducing NVFP4", Blackwell
# technical blog, 2025): one FP8 E4M3 scale per 16 values = 4.5 bits (plus one fp32 scale per tensor).
FP4_BLOCKS = {"mxfp4": (32, 1.0), "nvfp4": (16, 1.0)}


def weight_bytes_per_param(dtype: str, group_size: int) -> float:
    """Bytes per quantised linear-layer weight: the datatype plus group-wise scales for int8/int4, block scales for
    MXFP4/NVFP4 (0.53125 and 0.5625 bytes)."""
    if dtype in FP4_BLOCKS:
        block, scale = FP4_BLOCKS[dtype]
        return DTYPE_BYTES["fp4"] + scale / block
    scales = QUANT_SCALE_BYTES / group_size if dtype in ("int8", "int4") else 0.0
    return DTYPE_BYTES[dtype] + scales


@dataclass(frozen=True, slots=True)
class Step:
    """What one step of one replica processes, per row (all counts per replica, not per GPU)."""

    phase: str  # "prefill" or "decode"
    tokens: np.ndarray  # tokens through the GEMMs (prefill chunk size, or decode micro-batch)
    pairs: np.ndarray  # (query, key) pairs attended per head (causal prefill: Σ q·(q+1)/2; decode: b·context)
    kv_read: np.ndarray  # KV-cache token positions read by attention
    logit_rows: np.ndarray  # positions whose logits are computed (one per sequence finishing the step)
    context: np.ndarray | float | None = None  # tokens per sequence: the prompt (prefill), the context (decode)

    def windowed(self, model: ModelSpec, mixer: str) -> tuple[np.ndarray, np.ndarray]:
        """(pairs, KV positions read) of a sliding or chunked layer: prefill scales the causal pairs by
        mixer_pairs/full pairs of the prompt; decode reads min(context, window) (or the chunk) per sequence."""
        if self.context is None or mixer == "attention":
            return self.pairs, self.kv_read
        if self.phase == "decode":
            ratio = inv.mixer_span(model, mixer, self.context) / np.asarray(self.context, dtype=float)
            return self.pairs * ratio, self.kv_read * ratio
        ratio = inv.mixer_pairs(model, mixer, self.context) / inv.window_pairs(self.context)
        return self.pairs * ratio, self.kv_read


@dataclass(slots=True)
class InferCtx:
    """Model, system and the layout columns; the datatypes of weights, KV cache and GEMMs. Prices the operator
    inventory (``core.operators.Pricer``) for a serving engine."""

    model: ModelSpec
    system: SystemSpec
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    weight_dtype: str
    kv_dtype: str
    gemm_dtype: str  # fp8 GEMMs for fp8 weights (W8A8); otherwise the 16-bit activation datatype
    quant_group_size: int = 128
    act_bytes: float = ACT_BYTES
    dropout: bool = False
    kv_cache: bool = True
    capacity_factor: float = 1.0  # engines route dropless
    expert_bias_apart: bool = False  # the fused-MoE kernels add expert biases in their epilogue
    glu_clamp_apart: bool = False  # the fused-MoE activation kernels clamp in place
    expert_fc1_bias_apart: bool = False  # the bias in the expert GEMM
    expert_act_apart: bool = True  # the activation its own kernel (vLLM's fused_moe: act_and_mul between the GEMMs)
    mla_local_down: bool = False  # no sequence parallelism: every projection on all tokens
    expert_weight_dtype: str | None = None  # routed experts' datatype when the checkpoint stores them apart
    decode_split_kv: bool = True  # decode attention splits a sequence's KV over blocks (``unsplit_decode_time``)

    def gemm_dtype_for(self, weight_dtype: str) -> str:
        """FP4 weights run FP4 GEMMs where the GPU has an fp4 peak (Blackwell), else they are dequantised to 16-bit
        (weight-only, as on Hopper); other weights run ``gemm_dtype``."""
        if weight_dtype in FP4_BLOCKS:
            return "fp4" if "fp4" in self.system.gpu.peak_flops else "bf16"
        return self.gemm_dtype

    @property
    def wbytes(self) -> float:
        return weight_bytes_per_param(self.weight_dtype, self.quant_group_size)

    @property
    def etp(self) -> np.ndarray:
        """Experts split over the engine's TP group (vLLM without expert parallelism)."""
        return self.t

    @property
    def t(self) -> np.ndarray:
        return self.tp.astype(float)

    def _col(self, x: np.ndarray | float) -> np.ndarray:
        return np.asarray(x, dtype=float) + np.zeros_like(self.t)

    # --- pricing the operator inventory -------------------------------------------------------------------------
    def gemm(self, g: Gemm) -> list[Op]:
        """Each weight matrix streamed once per step; router and LM head stay 16-bit (vLLM keeps them unquantised);
        routed experts in their own datatype (gpt-oss: MXFP4) run as one fused grouped GEMM (``fused_moe_time``)."""
        wdt = self.expert_weight_dtype if g.routed and self.expert_weight_dtype else self.weight_dtype
        wb = weight_bytes_per_param(wdt, self.quant_group_size)
        wb, dtype = (ACT_BYTES, "bf16") if g.high_precision else (wb, self.gemm_dtype_for(wdt))
        nbytes = self._col(g.nbytes(ACT_BYTES, wb, ACT_BYTES))
        flops = self._col(g.flops)
        if g.name.startswith("moe.experts"):
            t = fused_moe_time(self.system.gpu, flops, nbytes, dtype, experts=self._col(g.experts),
                               imbalance=ep_imbalance(self.ep, self._col(g.m)),
                               shape=(self._col(g.m), self._col(g.n), self._col(g.k)))
            return [Op(g.name, GEMM, flops, nbytes, t)]
        # The tensor cores run whole M tiles: a dense GEMM of M rows computes ⌈M/64⌉·64 (``MMA_TILE_M``).
        m = self._col(g.m)
        dense = np.asarray(g.experts, dtype=float) == 1.0
        rows = np.where(dense & (m > 0), np.ceil(m / MMA_TILE_M) * MMA_TILE_M, m)
        padded = flops * np.where(m > 0, rows / np.maximum(m, 1e-9), 1.0)
        return [Op(g.name, GEMM, flops, nbytes, gemm_time(self.system.gpu, padded, nbytes, dtype, experts=g.experts,
                                                          m=rows, n=self._col(g.n), k=self._col(g.k)))]

    def elementwise(self, x: Elementwise, *, selective: bool = False) -> Op:
        nbytes = self._col(x.nbytes(ACT_BYTES))
        return Op(x.name, MEM, np.zeros_like(nbytes), nbytes, kernel_time(self.system.gpu, 0.0, nbytes, "bf16"))

    def bmm(self, name: str, flops: np.ndarray, nbytes: np.ndarray, *, selective: bool,
            floor_s: np.ndarray | None = None, stream_share: float = 1.0, stream_cap: float | None = None) -> Op:
        t = kernel_time(self.system.gpu, self._col(flops), self._col(nbytes), "bf16", stream_share=stream_share,
                        stream_cap=stream_cap)
        return Op(name, GEMM, self._col(flops), self._col(nbytes),
                  t if floor_s is None else np.maximum(t, self._col(floor_s)))

    def attention(self, a: Attention) -> list[Op]:
        """A fused paged-attention kernel over the KV cache (FlashAttention / FlashInfer)."""
        flops, nbytes = self._col(a.flops), self._col(a.nbytes(ACT_BYTES))
        return [Op(a.name, ATTN, flops, nbytes, attention_time(self.system.gpu, flops, nbytes, "bf16"))]

    def tp_entry(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return []

    def tp_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        nbytes = self._col(ACT_BYTES * elements)
        return [Op(f"{prefix}.tp_allreduce", COMM, np.zeros_like(nbytes), nbytes,
                   tp_all_reduce_time(self.system, nbytes, self.tp), dim="tp")]

    def shared_tp_entry(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return []

    def shared_tp_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return []  # summed with the routed experts' output, one all-reduce for the block (``moe_exit``)

    expert_tp_entry = shared_tp_entry
    expert_tp_exit = shared_tp_exit

    def moe_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return self.tp_exit(prefix, elements)

    def ep_all_to_all(self, name: str, elements: np.ndarray | float) -> Op:
        """All-to-all over the EP group; replicas are outermost in rank order (TP, PP, replicas)."""
        nbytes = self._col(ACT_BYTES * elements)
        t = ep_all_to_all_time(self.system, nbytes, self.ep, self.tp * self.pp)
        return Op(name, COMM, np.zeros_like(nbytes), nbytes, np.where(self.ep > 1, t, 0.0), dim="ep")

    def kv_cache_write(self, tokens: np.ndarray | float) -> np.ndarray:
        return tokens * kv_layer_bytes_per_token(self.model, self.kv_dtype, self.tp)

    def touched_experts(self, routed_tokens: np.ndarray | float) -> np.ndarray:
        """Distinct local experts a step reaches: the EP group routes ep·T tokens, E/ep experts per GPU."""
        moe = self.model.moe
        assert moe is not None
        ep = self.ep.astype(float)
        tokens = ep * np.asarray(routed_tokens, dtype=float) / moe.experts_per_token
        return np.maximum(distinct_experts(moe.num_experts, moe.experts_per_token, tokens) / ep, 1e-9)


def fused_moe_time(gpu: GpuSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str, *, experts: np.ndarray,
                   imbalance: np.ndarray, shape: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                   ) -> np.ndarray:
    """A fused grouped expert GEMM (vLLM ``fused_moe`` Triton kernel, SGLang/TRT-LLM grouped GEMMs): one launch
    streams every touched expert's weights once, so the bytes move at the efficiency of the whole transfer, while
    the math runs at the efficiency of one expert's share (its M is the tokens routed to that expert: on a GPU with
    a measured GEMM grid, that shape's rate from ``shape`` = (rows of all experts, N, K)); the busiest EP rank's
    extra tokens (``imbalance``) scale the math."""
    experts = np.maximum(experts, 1e-9)
    if gpu.gemm_shape_table is not None and shape is not None:
        m, n, k = shape
        t_c = compute_time(gpu, flops * imbalance, dtype,
                           of_plateau=grid_fraction(gpu, dtype, np.maximum(m / experts, 1.0), n, k))
        return with_launch(gpu, np.maximum(t_c, memory_time(gpu, nbytes)))
    t_c = compute_time(gpu, flops * imbalance, dtype, efficiency=interp_efficiency(gpu.matmul_efficiency,
                                                                                  flops / experts))
    return with_launch(gpu, np.maximum(t_c, memory_time(gpu, nbytes)))


def kv_layer_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: np.ndarray) -> np.ndarray:
    """KV-cache bytes one layer stores per token on one GPU (MLA: the compressed latent; ``core.operators``)."""
    return inv.kv_token_bytes(model, tp, DTYPE_BYTES[kv_dtype], latent=True)


def core_attention(c: InferCtx, s: Step, mixer: str = "attention") -> Attention:
    """The step's attention core: the pairs the step attends, the KV positions it reads (bounded by the window of
    a sliding layer, the chunk of a chunked one). MLA decode runs in the absorbed form (scores and values over the
    latent, DeepSeek-V2 App. C); MLA prefill decompresses K/V."""
    d_qk, d_v = inv.attention_dims(c.model, absorbed=s.phase == "decode")
    pairs, kv_read = s.windowed(c.model, mixer)
    return Attention("attn.core", pairs=pairs, heads=c.model.num_heads / c.t, d_qk=d_qk, d_v=d_v,
                     q_tokens=s.tokens, span=kv_read, kv_tokens=kv_read,
                     kv_token_bytes=kv_layer_bytes_per_token(c.model, c.kv_dtype, c.tp))


def unsplit_decode_time(c: InferCtx, a: Attention, seqs: np.ndarray) -> np.ndarray:
    """A decode attention kernel without split-KV: one thread block per (sequence, query head) — FasterTransformer /
    TensorRT-LLM masked MHA, ``dim3 grid(num_heads, batch)`` — streams that sequence's K and V of its head alone.
    With fewer blocks than SMs each block runs on its own SM at ``sm_stream_bytes_per_s``; more blocks run in waves
    of ``sm_count``. TensorRT-LLM's ``--multi_block_mode`` (default off in its 2023-24 build scripts, e.g.
    examples/gptj/build.py: "It is beneficial when batch×num_heads cannot fully utilize GPU") splits it instead.
    0 where the GPU states no per-SM rate."""
    gpu = c.system.gpu
    if gpu.sm_stream_bytes_per_s is None or gpu.sm_count is None:
        return np.zeros_like(c.t)
    kv_heads = kv_heads_per_rank(c.model, c.tp) if c.model.mla is None else np.ones_like(c.t)  # MLA: one latent
    per_block = c._col(a.kv_tokens * a.kv_token_bytes) / np.maximum(c._col(seqs) * kv_heads, 1e-9)
    waves = np.ceil(c._col(seqs) * c._col(a.heads) / gpu.sm_count)
    return waves * per_block / gpu.sm_stream_bytes_per_s + gpu.kernel_fixed_s


def attention_ops(c: InferCtx, s: Step, mixer: str = "attention") -> list[Op]:
    core = core_attention(c, s, mixer)
    ops = inv.attention_block(c.model, c, s.tokens, s.tokens, core)
    if s.phase != "decode" or c.decode_split_kv:
        return ops
    floor = unsplit_decode_time(c, core, s.tokens)
    return [Op(o.name, o.kind, o.flops, o.nbytes, np.maximum(o.time, floor), o.dim, o.selective)
            if o.name == core.name else o for o in ops]


def sliding_ops(c: InferCtx, s: Step) -> list[Op]:
    return attention_ops(c, s, "sliding")


def chunked_ops(c: InferCtx, s: Step) -> list[Op]:
    return attention_ops(c, s, "chunked")


def linear_ops(c: InferCtx, s: Step) -> list[Op]:
    """Gated DeltaNet: chunkwise over the prompt in prefill, one recurrent step per sequence in decode; the
    16-bit states of the step's sequences read and written (vLLM keeps them in the model datatype)."""
    return rec.linear_attention_block(c.model, c, s.tokens, s.tokens, seqs=s.logit_rows,
                                      recurrent=s.phase == "decode", state_bytes=ACT_BYTES)


def mamba_ops(c: InferCtx, s: Step) -> list[Op]:
    """Mamba-2: SSD chunks in prefill, the recurrent update in decode (16-bit conv and SSM states)."""
    return rec.mamba2_block(c.model, c, s.tokens, s.tokens, seqs=s.logit_rows, recurrent=s.phase == "decode",
                            state_bytes=ACT_BYTES)


def mlp_ops(c: InferCtx, s: Step) -> list[Op]:
    return inv.mlp_block(c.model, c, s.tokens, s.tokens)


def moe_ops(c: InferCtx, s: Step) -> list[Op]:
    return inv.moe_block(c.model, c, s.tokens, s.tokens)


def embedding_ops(c: InferCtx, s: Step) -> list[Op]:
    return inv.embedding_block(c.model, c, s.tokens, s.tokens)


def head_ops(c: InferCtx, s: Step) -> list[Op]:
    """LM head for the sampled positions only, the logits all-gathered over TP, fp32 sampling."""
    m, R = c.model, s.logit_rows
    ops = inv.head_block(m, c, R, R)
    nbytes = c._col(ACT_BYTES * R * m.vocab_size)
    gather = np.where(c.tp > 1, comm.all_gather_time(c.system, nbytes, c.tp, np.ones_like(c.tp)), 0.0)
    ops.append(Op("head.tp_gather", COMM, np.zeros_like(gather), nbytes, gather, dim="tp"))
    # Sampler: fp32 upcast, softmax and log-softmax, top-k/top-p: ~4 passes over fp32 logits.
    ops.append(c.elementwise(Elementwise("head.sample", R * m.vocab_size, 0.0, 4 * LOGIT_BYTES)))
    return ops


BUILDERS = {"attention": attention_ops, "sliding": sliding_ops, "chunked": chunked_ops, "linear": linear_ops,
            "mamba": mamba_ops, "mlp": mlp_ops, "moe": moe_ops, "embedding": embedding_ops,
            "head": head_ops}
__all__ = ["ATTN", "BUILDERS", "InferCtx", "Step", "distinct_experts", "ep_imbalance", "kv_heads_per_rank",
           "kv_layer_bytes_per_token", "tp_all_reduce_time", "weight_bytes_per_param"]
