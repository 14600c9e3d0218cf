"""Kernels of one transformer layer during serving, on one GPU, for one step of many layouts at once.

A *step* is one forward pass of a replica: a prefill chunk (many prompt tokens) or a decode step (one
new token for each sequence of a micro-batch). Per GPU, with tensor parallelism ``t`` (Megatron
sharding, Shoeybi et al. 2019): attention heads ÷t, MLP width ÷t, vocabulary ÷t; KV heads ÷t but at
least one (vLLM replicates KV heads when t exceeds them). Weights are read once per step (every GEMM
streams its weight matrix from HBM whatever the number of tokens), decode attention reads the KV
cache of every sequence, and each layer ends with a TP all-reduce of the step's activations.

Every function works on numpy columns (one entry per layout row) and returns ``Op`` records
(``ops.Op``: FLOPs, HBM bytes or message bytes, seconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import kernel_time
from shardplan.costmodel.core.ops import COMM, GEMM, MEM, Op
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES

ATTN = "attn"
ACT_BYTES = 2.0  # activations stay 16-bit in every datatype mode (fp8 GEMMs quantise their inputs on the fly)
LOGIT_BYTES = 4.0  # vLLM upcasts logits to fp32 before sampling
# Weight-only int4/int8 (GPTQ/AWQ): one 16-bit scale per group of weights along the input dimension.
QUANT_SCALE_BYTES = 2.0


def weight_bytes_per_param(dtype: str, group_size: int) -> float:
    """Bytes per quantised linear-layer weight: the datatype plus group-wise scales for int8/int4."""
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


@dataclass(slots=True)
class InferCtx:
    """Model, system and the layout columns; the datatypes of weights, KV cache and GEMMs."""

    model: ModelSpec
    system: SystemSpec
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    weight_dtype: str
    kv_dtype: str
    gemm_dtype: str  # fp8 GEMMs for fp8 weights (W8A8); otherwise the 16-bit activation datatype
    quant_group_size: int = 128

    @property
    def wbytes(self) -> float:
        return weight_bytes_per_param(self.weight_dtype, self.quant_group_size)

    @property
    def t(self) -> np.ndarray:
        return self.tp.astype(float)

    # --- op constructors ------------------------------------------------------------------------------
    def gemm(self, name: str, m: np.ndarray, k: float | np.ndarray, n: float | np.ndarray, *,
             wbytes: float | None = None) -> Op:
        """(m×k)·(k×n) with a weight matrix of k·n elements streamed once (roofline, torchao style)."""
        wb = self.wbytes if wbytes is None else wbytes
        flops = 2.0 * m * k * n
        nbytes = wb * k * n + ACT_BYTES * (m * k + m * n)
        dtype = self.gemm_dtype if wbytes is None else "bf16"
        return Op(name, GEMM, flops, nbytes, kernel_time(self.system.gpu, flops, nbytes, dtype))

    def mem(self, name: str, nbytes: np.ndarray) -> Op:
        nbytes = np.asarray(nbytes, dtype=float) + np.zeros_like(self.t)
        return Op(name, MEM, np.zeros_like(nbytes), nbytes, kernel_time(self.system.gpu, 0.0, nbytes, "bf16"))

    def tp_all_reduce(self, name: str, nbytes: np.ndarray) -> Op:
        nbytes = np.asarray(nbytes, dtype=float) + np.zeros_like(self.t)
        return Op(name, COMM, np.zeros_like(nbytes), nbytes, tp_all_reduce_time(self.system, nbytes, self.tp),
                  dim="tp")

    def ep_all_to_all(self, name: str, nbytes: np.ndarray) -> Op:
        """All-to-all over the EP group; replicas are outermost in rank order (TP, PP, replicas)."""
        nbytes = np.asarray(nbytes, dtype=float) + np.zeros_like(self.t)
        t = comm.all_to_all_time(self.system, nbytes, self.ep, self.tp * self.pp)
        return Op(name, COMM, np.zeros_like(nbytes), nbytes, t, dim="ep")


def tp_all_reduce_time(system: SystemSpec, nbytes: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """TP all-reduce as serving engines run it.

    Inside a node, vLLM's custom all-reduce (csrc/custom_all_reduce.cuh) reads peers' buffers directly
    over NVLink/xGMI: one-shot (one latency, each GPU pulls (n−1)·S) for small messages, two-shot
    (reduce-scatter + all-gather: two latencies, 2(n−1)/n·S) for larger ones; the faster applies. Across
    nodes NCCL's hierarchical ring (``comm.all_reduce_time``).
    """
    n = np.asarray(tp, dtype=float)
    s = np.asarray(nbytes, dtype=float)
    link = system.intra_node
    bw, lat = link.effective_bytes_per_s, link.latency_s
    one_shot = lat + (n - 1) * s / bw
    two_shot = 2 * lat + 2 * (n - 1) / n * s / bw
    ring = comm.all_reduce_time(system, s, tp, np.ones_like(tp))
    in_node = n <= system.gpus_per_node
    t = np.where(in_node, np.minimum(one_shot, two_shot), ring)
    return np.where(n > 1, t, 0.0)


def kv_heads_per_rank(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """KV heads one TP rank stores: kv/t, replicated up to one head when t exceeds them (vLLM)."""
    return np.maximum(model.kv_heads / np.asarray(tp, dtype=float), 1.0)


def kv_layer_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: np.ndarray) -> np.ndarray:
    """KV-cache bytes one layer stores per token on one GPU.

    MHA/GQA/MQA: K and V, ``2·kv_heads_per_rank·head_dim`` elements. MLA (DeepSeek-V2 §2.1.3): the
    compressed latent ``kv_lora_rank + qk_rope_head_dim`` elements, shared by all heads and held whole by
    every TP rank.
    """
    b = DTYPE_BYTES[kv_dtype]
    if model.mla is not None:
        return np.full(np.shape(tp), (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * b, dtype=float)
    return 2.0 * kv_heads_per_rank(model, tp) * model.head_size * b


def _attention_core(c: InferCtx, s: Step) -> Op:
    """Fused attention over the KV cache: FLOPs of QKᵀ and PV per attended pair, KV bytes per position read.

    MLA decode uses the absorbed form (DeepSeek-V2 App. C): scores and values over the latent
    (``2·r_kv + d_rope`` per pair and head); MLA prefill decompresses K/V (``d_qk + d_v`` per pair).
    """
    m = c.model
    heads = m.num_heads / c.t
    if m.mla is not None:
        mla = m.mla
        per_pair = 2 * mla.kv_lora_rank + mla.qk_rope_head_dim if s.phase == "decode" else mla.qk_head_dim \
            + mla.v_head_dim
        qo = heads * (mla.qk_head_dim + mla.v_head_dim)
    else:
        per_pair = 2 * m.head_size
        qo = heads * 2 * m.head_size
    flops = 2.0 * s.pairs * heads * per_pair
    kv = kv_layer_bytes_per_token(m, c.kv_dtype, c.tp)
    nbytes = s.kv_read * kv + ACT_BYTES * s.tokens * qo
    t = kernel_time(c.system.gpu, flops, nbytes, "bf16", efficiency=c.system.gpu.attention_efficiency)
    return Op("attn.core", ATTN, flops, nbytes, t)


def attention_ops(c: InferCtx, s: Step) -> list[Op]:
    """Norm, QKV (or MLA projections), rotary + KV-cache write, fused attention, output, all-reduce."""
    m, T, t = c.model, s.tokens, c.t
    h = m.hidden_size
    kv_write = T * kv_layer_bytes_per_token(m, c.kv_dtype, c.tp)
    ops = [c.mem("attn.norm", 2 * ACT_BYTES * T * h)]
    if m.mla is not None:
        mla = m.mla
        # Down-projections are replicated on every TP rank; up-projections are split by heads.
        if mla.q_lora_rank:
            ops.append(c.gemm("attn.q_down", T, h, mla.q_lora_rank))
            ops.append(c.gemm("attn.q_up", T, mla.q_lora_rank, m.num_heads * mla.qk_head_dim / t))
        else:
            ops.append(c.gemm("attn.q", T, h, m.num_heads * mla.qk_head_dim / t))
        ops.append(c.gemm("attn.kv_down", T, h, mla.kv_lora_rank + mla.qk_rope_head_dim))
        # W_UK/W_UV: applied to the latent of new tokens (prefill) or absorbed into q and o (decode);
        # the same weights are read and the same FLOPs per token are spent either way.
        ops.append(c.gemm("attn.kv_up", T, mla.kv_lora_rank, m.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim) / t))
        rope = T * (m.num_heads / t + 1) * mla.qk_rope_head_dim * 2 * ACT_BYTES
        ops.append(c.mem("attn.rope_cache_write", rope + kv_write))
        ops.append(_attention_core(c, s))
        ops.append(c.gemm("attn.out", T, m.num_heads * mla.v_head_dim / t, h))
    else:
        d = m.head_size
        kvr = kv_heads_per_rank(m, c.tp)
        ops.append(c.gemm("attn.qkv", T, h, (m.num_heads / t + 2 * kvr) * d))
        ops.append(c.mem("attn.rope_cache_write", T * (m.num_heads / t + kvr) * d * 2 * ACT_BYTES + kv_write))
        ops.append(_attention_core(c, s))
        ops.append(c.gemm("attn.out", T, m.num_heads * d / t, h))
    ops.append(c.tp_all_reduce("attn.tp_allreduce", ACT_BYTES * T * h))
    ops.append(c.mem("attn.residual", 3 * ACT_BYTES * T * h))
    return ops


def _mlp(c: InferCtx, prefix: str, T: np.ndarray, ffn: float) -> list[Op]:
    """Gate/up (or fc1) → activation → down (or fc2), split over TP."""
    g = 2 if c.model.mlp.gated else 1
    width = ffn / c.t
    h = c.model.hidden_size
    return [c.gemm(f"{prefix}.fc1", T, h, g * width), c.mem(f"{prefix}.act", ACT_BYTES * T * width * (g + 1)),
            c.gemm(f"{prefix}.fc2", T, width, h)]


def mlp_ops(c: InferCtx, s: Step) -> list[Op]:
    """Dense MLP block."""
    h, T = c.model.hidden_size, s.tokens
    ops = [c.mem("mlp.norm", 2 * ACT_BYTES * T * h), *_mlp(c, "mlp", T, c.model.ffn_hidden_size)]
    return [*ops, c.tp_all_reduce("mlp.tp_allreduce", ACT_BYTES * T * h), c.mem("mlp.residual", 3 * ACT_BYTES * T * h)]


def distinct_experts(num_experts: int, top_k: int, tokens: np.ndarray) -> np.ndarray:
    """Expected distinct experts a batch of ``tokens`` routes to: E·(1 − (1 − k/E)^tokens).

    Each token picks k of E experts; uniform routing makes an expert idle for one token with
    probability 1 − k/E, independently across tokens (the load-balancing loss targets uniform use).
    """
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** np.asarray(tokens, dtype=float))


def moe_ops(c: InferCtx, s: Step) -> list[Op]:
    """MoE block: router, EP dispatch, expert GEMMs over the experts touched, combine, shared experts.

    Experts are spread over the ``ep`` replicas of an EP group (E/ep each) and split over TP. The group
    routes ``ep·T`` tokens per step; this GPU's experts receive T·k token copies on average and read the
    weights of the distinct local experts hit, ``distinct(ep·T)/ep``.
    """
    m, T = c.model, s.tokens
    assert m.moe is not None
    moe, h = m.moe, m.hidden_size
    g = 2 if m.mlp.gated else 1
    ep = c.ep.astype(float)
    routed = T * moe.experts_per_token
    active = np.maximum(distinct_experts(moe.num_experts, moe.experts_per_token, ep * T) / ep, 1e-9)
    f = moe.expert_ffn_hidden_size / c.t
    ops = [c.mem("moe.norm", 2 * ACT_BYTES * T * h),
           c.gemm("moe.router", T, h, moe.num_experts, wbytes=ACT_BYTES),
           c.mem("moe.topk_permute", T * moe.num_experts * 4.0 + 2 * ACT_BYTES * routed * h)]
    a2a = c.ep_all_to_all("moe.ep_dispatch", ACT_BYTES * routed * h)
    a2a_time = np.where(ep > 1, a2a.time, 0.0)
    ops.append(Op(a2a.name, COMM, a2a.flops, a2a.nbytes, a2a_time, dim="ep"))
    for name, k_dim, n_dim in (("moe.experts.fc1", h, g * f), ("moe.experts.fc2", f, h)):
        flops = 2.0 * routed * k_dim * n_dim
        nbytes = active * c.wbytes * k_dim * n_dim + ACT_BYTES * routed * (k_dim + n_dim)
        # Grouped GEMM: each active expert runs a GEMM of its share of the tokens.
        t = active * kernel_time(c.system.gpu, flops / active, nbytes / active, c.gemm_dtype)
        ops.append(Op(name, GEMM, flops, nbytes, t))
    ops.append(c.mem("moe.experts.act", ACT_BYTES * routed * f * (g + 1)))
    ops.append(Op("moe.ep_combine", COMM, a2a.flops, a2a.nbytes, a2a_time, dim="ep"))
    if moe.num_shared_experts:
        ops += _mlp(c, "moe.shared", T, moe.num_shared_experts * moe.shared_ffn)
    ops.append(c.tp_all_reduce("moe.tp_allreduce", ACT_BYTES * T * h))
    ops.append(c.mem("moe.residual", 3 * ACT_BYTES * T * h))
    return ops


def embedding_ops(c: InferCtx, s: Step) -> list[Op]:
    """Vocab-parallel embedding lookup: gather rows, all-reduce the partial embeddings (t > 1)."""
    h, T = c.model.hidden_size, s.tokens
    ops = [c.mem("embed.lookup", 2 * ACT_BYTES * T * h)]
    if c.model.position == "learned":
        ops.append(c.mem("embed.positions", 3 * ACT_BYTES * T * h))
    return [*ops, c.tp_all_reduce("embed.tp_allreduce", ACT_BYTES * T * h)]


def head_ops(c: InferCtx, s: Step) -> list[Op]:
    """Final norm, LM head for the sampled positions only, logits all-gather, fp32 sampling."""
    m, R = c.model, s.logit_rows
    vocab = m.vocab_size / c.t
    ops = [c.mem("head.norm", 2 * ACT_BYTES * R * m.hidden_size),
           c.gemm("head.logits", R, m.hidden_size, vocab, wbytes=ACT_BYTES)]
    nbytes = ACT_BYTES * R * m.vocab_size + np.zeros_like(c.t)
    gather = np.where(c.tp > 1, comm.all_gather_time(c.system, nbytes, c.tp, np.ones_like(c.tp)), 0.0)
    ops.append(Op("head.tp_gather", COMM, np.zeros_like(gather), nbytes, gather, dim="tp"))
    # Sampler: fp32 upcast, softmax and log-softmax, top-k/top-p: ~4 passes over fp32 logits.
    ops.append(c.mem("head.sample", 4 * LOGIT_BYTES * R * m.vocab_size))
    return ops


BUILDERS = {"attention": attention_ops, "mlp": mlp_ops, "moe": moe_ops, "embedding": embedding_ops,
            "head": head_ops}

