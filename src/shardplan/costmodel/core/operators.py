"""Each layer kind's operators, written once for every job: which GEMMs (M, K, N), attention cores, elementwise
kernels and collectives a layer runs on one GPU, for the tokens in flight.

A job (training, serving, offload) is a *pricer*: it says how many tokens pass through the GEMMs and through the
elementwise kernels (÷t under sequence parallelism), what datatypes the operands have, how the TP collectives
run (all-reduce, or reduce-scatter/all-gather under sequence parallelism, or a serving engine's custom
all-reduce) and times each operator with ``core.kernels`` and ``core.comm``. The shapes below are the only place
the FLOPs and bytes of a layer are written:

- GEMM (M×K)·(K×N): ``2·M·K·N`` FLOPs; operands ``a·M·K + w·K·N·experts``, result ``o·M·N`` bytes.
- Attention core: ``2·pairs·heads·(d_qk + d_v)`` FLOPs (QKᵀ and PV over the attended (query, key) pairs).
- Elementwise: ``passes`` tensors of ``elements`` values moved (read or written), plus fixed bytes per element.

Tensor parallelism follows Megatron (Shoeybi et al. 2019): heads, MLP width and vocabulary ÷t; KV heads ÷t but
at least one (vLLM replicates them when t exceeds their number; Megatron requires t | kv heads, so the floor is
inert there). MLA (DeepSeek-V2 §2.1) down-projections are replicated on every TP rank, up-projections split.
The recurrent token mixers (Gated DeltaNet, Mamba-2) are listed in ``core.recurrent`` with the same specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shardplan.costmodel.core.ops import Op
from shardplan.costmodel.core.passes import FUSED
from shardplan.models.spec import ModelSpec

Array = np.ndarray | float


@dataclass(frozen=True, slots=True)
class Gemm:
    """One linear layer (M×K)·(K×N) on one GPU; ``experts`` distinct weight matrices share the M rows evenly."""

    name: str
    m: Array
    k: Array
    n: Array
    experts: Array = 1.0
    high_precision: bool = False  # router and LM head: kept in 16-bit by fp8 recipes and quantised serving
    routed: bool = False  # routed experts (a checkpoint may store them in their own datatype: gpt-oss MXFP4)

    @property
    def flops(self) -> np.ndarray:
        return np.asarray(2.0 * self.m * self.k * self.n, dtype=float)

    def nbytes(self, a: float, w: float, o: float) -> np.ndarray:
        """HBM traffic with ``a``/``w``/``o`` bytes per input, weight and output element."""
        return np.asarray(a * self.m * self.k + w * self.k * self.n * self.experts + o * self.m * self.n, dtype=float)


@dataclass(frozen=True, slots=True)
class Attention:
    """Softmax(QKᵀ)V on one GPU. ``q_tokens`` queries (all sequences) each could attend ``span`` keys; ``pairs``
    (query, key) pairs per head are computed (causal skipping as the kernel executes it); ``kv_tokens`` key/value
    positions are read at ``kv_token_bytes`` each (all KV heads of the GPU); ``heads`` query heads per GPU."""

    name: str
    pairs: Array
    heads: Array
    d_qk: float
    d_v: float
    q_tokens: Array
    span: Array
    kv_tokens: Array
    kv_token_bytes: Array
    window: float | None = None  # a sliding layer's window in keys (its kernel's rate: ``kernels.window_factor``)

    @property
    def flops(self) -> np.ndarray:
        return np.asarray(2.0 * self.pairs * self.heads * (self.d_qk + self.d_v), dtype=float)

    def nbytes(self, e: float) -> np.ndarray:
        """A fused kernel's HBM traffic: Q in and O out (``e`` bytes per element), K and V read once."""
        return np.asarray(e * self.q_tokens * self.heads * (self.d_qk + self.d_v)
                          + self.kv_tokens * self.kv_token_bytes, dtype=float)

    @property
    def scores(self) -> np.ndarray:
        """Elements of the full score matrix an unfused implementation materialises (no causal skipping)."""
        return np.asarray(self.q_tokens * self.heads * self.span, dtype=float)


@dataclass(frozen=True, slots=True)
class Elementwise:
    """A memory-bound kernel moving ``passes`` tensors of ``elements`` values (``extra`` more bytes per element,
    ``fixed`` more bytes in all); ``kind``: its row of ``core.passes`` (a stack's eager kernels may replace it)."""

    name: str
    elements: Array
    passes: float
    extra: float = 0.0
    fixed: Array = 0.0
    kind: str = ""

    def nbytes(self, e: float) -> np.ndarray:
        return np.asarray(self.elements * (self.passes * e + self.extra) + self.fixed, dtype=float)


class Pricer(Protocol):
    """What a job tells the inventory, and how it turns operators into timed ``Op`` records."""

    tp: np.ndarray  # TP degree per row (float)
    etp: np.ndarray  # expert TP degree per row (float; tp unless MoE parallel folding)
    act_bytes: float  # bytes of one activation element
    dropout: bool
    kv_cache: bool  # serving writes new K/V into a paged cache (with rotary embedding, one kernel pair)
    capacity_factor: float  # MoE token copies per routed token (training's capacity; 1 when dropless)
    expert_bias_apart: bool  # routed experts' FC2 biases added outside the GEMM (Megatron-Core TEGroupedMLP)
    glu_clamp_apart: bool  # a clamped GLU's clamps as their own kernels (Megatron-Core; core.passes "glu_clamp")
    expert_fc1_bias_apart: bool  # routed experts' FC1 biases added after the GEMM (NeMo AutoModel)
    expert_act_apart: bool  # routed experts' activation as its own kernel (not in FC1's epilogue: TE fused MLP)
    mla_local_down: bool  # MLA's down projections on the rank's own tokens, latents gathered (``projections``)

    def gemm(self, g: Gemm) -> list[Op]: ...
    def elementwise(self, x: Elementwise, *, selective: bool = False) -> Op: ...
    def bmm(self, name: str, flops: Array, nbytes: Array, *, selective: bool,
            floor_s: Array | None = None, stream_share: float = 1.0, stream_cap: float | None = None) -> Op: ...
    def attention(self, a: Attention) -> list[Op]: ...
    def tp_entry(self, prefix: str, elements: Array) -> list[Op]: ...
    def tp_exit(self, prefix: str, elements: Array) -> list[Op]: ...
    def expert_tp_entry(self, prefix: str, elements: Array) -> list[Op]: ...
    def expert_tp_exit(self, prefix: str, elements: Array) -> list[Op]: ...
    def shared_tp_entry(self, prefix: str, elements: Array) -> list[Op]: ...
    def shared_tp_exit(self, prefix: str, elements: Array) -> list[Op]: ...
    def ep_all_to_all(self, name: str, elements: Array) -> Op: ...
    def moe_exit(self, prefix: str, elements: Array) -> list[Op]: ...
    def kv_cache_write(self, tokens: Array) -> np.ndarray: ...
    def touched_experts(self, routed_tokens: Array) -> np.ndarray: ...


def kv_heads_per_rank(model: ModelSpec, tp: Array) -> np.ndarray:
    """KV heads one TP rank holds: kv/t, at least one (replicated when t exceeds them)."""
    return np.maximum(model.kv_heads / np.asarray(tp, dtype=float), 1.0)


def kv_token_bytes(model: ModelSpec, tp: Array, nbytes: float, *, latent: bool) -> np.ndarray:
    """Bytes of one token's keys and values in one layer on one GPU. MHA/GQA/MQA: ``2·kv_heads_per_rank·d``
    elements. MLA: the compressed latent ``r_kv + d_rope`` shared by all heads and held whole by every TP rank
    when ``latent`` (the KV cache, DeepSeek-V2 §2.1.3), else the decompressed K and V of the GPU's heads."""
    t = np.asarray(tp, dtype=float)
    if model.mla is not None:
        mla = model.mla
        if latent:
            return np.full(np.shape(t), (mla.kv_lora_rank + mla.qk_rope_head_dim) * nbytes, dtype=float)
        return model.num_heads / t * (mla.qk_head_dim + mla.v_head_dim) * nbytes
    return 2.0 * kv_heads_per_rank(model, t) * model.head_size * nbytes


# --- the blocks ---------------------------------------------------------------------------------------------------
def kernel(kind: str, name: str, elements: Array, extra: float = 0.0, fixed: Array = 0.0) -> Elementwise:
    """An elementwise op of ``kind`` with the fused traffic of ``core.passes.FUSED`` (``extra`` bytes more)."""
    row = FUSED[kind]
    return Elementwise(name, elements, row.passes, row.extra + extra, fixed, kind=kind)


def norm(p: Pricer, name: str, tokens: Array, width: float) -> Op:
    """LayerNorm/RMSNorm over ``tokens`` rows of ``width``."""
    return p.elementwise(kernel("norm", name, tokens * width))


def residual(p: Pricer, name: str, tokens: Array, width: float) -> Op:
    """(Bias-dropout-)add; a 1-byte mask with dropout."""
    return p.elementwise(kernel("residual", name, tokens * width, 1.0 if p.dropout else 0.0))


def projections(model: ModelSpec, p: Pricer, T: Array, T_local: Array | None = None) -> tuple[list[Op], float, float]:
    """Q/K/V projections (or MLA's down/up projections with their latent norms), the rotary and KV-cache write
    when the job has a cache; returns the ops and the per-head dims of the attention core.

    With ``T_local`` (``Pricer.mla_local_down``), MLA's down projections are replicated on every TP rank (Megatron-Core
    ``parallel_mode='duplicated'``, multi_latent_attention.py@d98e8a6 l.526-527, 573-574) and run on the rank's own
    ``T_local`` tokens (its sequence-parallel shard; all ``T`` without SP); the column-parallel up projections gather
    their latents under SP (``tp_entry``), and the rotary key is gathered on its own
    (``gather_from_sequence_parallel_region``, l.761-763). Without it the caller gathered the hidden state and every
    projection runs on all ``T`` tokens."""
    m, t, h = model, p.tp, model.hidden_size
    local = T_local is not None
    down = T_local if T_local is not None else T
    ops: list[Op] = []
    if m.mla is not None:
        mla = m.mla
        if mla.q_lora_rank:
            ops += p.gemm(Gemm("attn.q_down", down, h, mla.q_lora_rank))
            ops.append(norm(p, "attn.q_norm", down, mla.q_lora_rank))
            ops += p.tp_entry("attn.q_up", T * mla.q_lora_rank) if local else []
            ops += p.gemm(Gemm("attn.q_up", T, mla.q_lora_rank, m.num_heads * mla.qk_head_dim / t))
        else:
            ops += p.tp_entry("attn.q", T * h) if local else []
            ops += p.gemm(Gemm("attn.q", T, h, m.num_heads * mla.qk_head_dim / t))
        ops += p.gemm(Gemm("attn.kv_down", down, h, mla.kv_lora_rank + mla.qk_rope_head_dim))
        ops.append(norm(p, "attn.kv_norm", down, mla.kv_lora_rank))
        if local:
            ops += p.tp_entry("attn.k_pe", T * mla.qk_rope_head_dim)
            ops += p.tp_entry("attn.kv_up", T * mla.kv_lora_rank)
        # W_UK/W_UV: applied to the latent of new tokens, or absorbed into q and o in decode; the same weights
        # are read and the same FLOPs per token are spent either way (DeepSeek-V2 App. C).
        ops += p.gemm(Gemm("attn.kv_up", T, mla.kv_lora_rank, m.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim)
                           / t))
        ops += rotary(m, p, T, m.num_heads / t + 1, mla.qk_rope_head_dim)
        return ops, mla.qk_head_dim, mla.v_head_dim
    d, kvr = m.head_size, kv_heads_per_rank(m, t)
    q_cols = m.num_heads / t * (2 if m.attn_output_gate else 1)  # Qwen3-Next: the output gate rides on q_proj
    ops += p.gemm(Gemm("attn.qkv", T, h, (q_cols + 2 * kvr) * d))
    ops += rotary(m, p, T, m.num_heads / t + kvr, d)
    return ops, d, d


def rotary(model: ModelSpec, p: Pricer, T: Array, heads: Array, rot_dim: float) -> list[Op]:
    """Rotary embedding of the query and key heads (one fused kernel reading and writing them: Megatron's
    ``apply_rope_fusion``, vLLM's ``rotary_embedding``); a serving engine writes the new keys and values into its
    paged cache in the same pass (``reshape_and_cache``). Nothing for learned or ALiBi positions without a cache."""
    rope = model.position == "rope"
    if not rope and not p.kv_cache:
        return []
    name = "attn.rope_cache_write" if p.kv_cache else "attn.rope"
    elements = T * heads * rot_dim if rope else 0.0 * T
    return [p.elementwise(kernel("rope", name, elements, fixed=p.kv_cache_write(T) if p.kv_cache else 0.0))]


def attention_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array, core: Attention) -> list[Op]:
    """Norm, projections, the attention core (``core`` with the job's pair count), output projection, TP
    collectives and the residual add."""
    m, h = model, model.hidden_size
    local = m.mla is not None and p.mla_local_down
    ops = [norm(p, "attn.norm", T_elem, h), *([] if local else p.tp_entry("attn", T * h))]
    proj, _, d_v = projections(m, p, T, T_elem if local else None)
    ops += proj
    ops += attention_extras(m, p, T)
    ops += p.attention(core)
    if m.attn_output_gate:  # sigmoid(gate) · attention output
        ops.append(p.elementwise(Elementwise("attn.output_gate", T * m.num_heads / p.tp * d_v, 3)))
    ops += p.gemm(Gemm("attn.out", T, m.num_heads * d_v / p.tp, h))
    ops += p.tp_exit("attn", T * h)
    ops.append(residual(p, "attn.residual", T_elem, h))
    return ops


def attention_dims(model: ModelSpec, *, absorbed: bool = False) -> tuple[float, float]:
    """Per-head (d_qk, d_v) of the attention core; MLA decode in absorbed form attends over the latent
    (``r_kv + d_rope`` for scores, ``r_kv`` for values: DeepSeek-V2 App. C)."""
    if model.mla is None:
        return model.head_size, model.head_size
    mla = model.mla
    if absorbed:
        return mla.kv_lora_rank + mla.qk_rope_head_dim, mla.kv_lora_rank
    return mla.qk_head_dim, mla.v_head_dim


def ffn(model: ModelSpec, p: Pricer, prefix: str, T: Array, width: Array, *, experts: Array = 1.0,
        routed: bool = False) -> list[Op]:
    """FC1 (gated: gate and up) → activation (act(gate)·up) → FC2 over ``width`` columns per GPU."""
    g, h = (2 if model.mlp.gated else 1), model.hidden_size
    clamp = routed and model.activation_clamp is not None and model.mlp.gated and p.glu_clamp_apart  # TEGroupedMLP
    return [*p.gemm(Gemm(f"{prefix}.fc1", T, h, g * width, experts, routed=routed)),
            *([p.elementwise(kernel("glu_clamp", f"{prefix}.clamp", T * width))] if clamp else []),
            *([p.elementwise(kernel("gated_act" if model.mlp.gated else "act", f"{prefix}.act", T * width))]
              if p.expert_act_apart or not routed else []),
            *p.gemm(Gemm(f"{prefix}.fc2", T, width, h, experts, routed=routed))]


def mlp_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array) -> list[Op]:
    """Dense MLP block: norm, TP entry, FFN split over TP, TP exit, residual."""
    h = model.hidden_size
    return [norm(p, "mlp.norm", T_elem, h), *p.tp_entry("mlp", T * h),
            *ffn(model, p, "mlp", T, model.ffn_hidden_size / p.tp), *p.tp_exit("mlp", T * h),
            residual(p, "mlp.residual", T_elem, h)]


def moe_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array) -> list[Op]:
    """MoE block: router, top-k, permute, EP dispatch, the experts the tokens reach (grouped GEMMs, TP-split),
    combine, unpermute, shared experts, residual."""
    m, h = model, model.hidden_size
    assert m.moe is not None
    moe = m.moe
    k = moe.experts_per_token * p.capacity_factor
    routed = T_elem * k  # token copies leaving this GPU
    ops = [norm(p, "moe.norm", T_elem, h),
           *p.gemm(Gemm("moe.router", T_elem, h, moe.num_experts, high_precision=True)),
           # top-k over fp32 router logits: read them, write fp32 probabilities
           p.elementwise(Elementwise("moe.topk", T_elem * moe.num_experts, 0.0, 8.0)),
           p.elementwise(Elementwise("moe.permute", routed * h, 2)),
           p.ep_all_to_all("moe.ep_dispatch", routed * h),
           *p.expert_tp_entry("moe.experts", routed * h)]
    # the experts' ETP group gathers etp of the attention TP group's tp token shares (etp = tp: all T tokens)
    T_exp = T * k * p.etp / p.tp
    ops += ffn(m, p, "moe.experts", T_exp, moe.expert_ffn_hidden_size / p.etp, experts=p.touched_experts(T_exp),
               routed=True)
    if m.mlp_bias and p.expert_fc1_bias_apart:
        g = 2 if m.mlp.gated else 1
        at = next(i for i, op in enumerate(ops) if op.name == "moe.experts.fc1") + 1
        ops.insert(at, p.elementwise(kernel("expert_fc1_bias", "moe.experts.fc1_bias",
                                            T_exp * g * moe.expert_ffn_hidden_size / p.etp)))
    if m.mlp_bias and p.expert_bias_apart:
        ops.append(p.elementwise(kernel("expert_bias", "moe.experts.fc2_bias", T_exp * h)))
    ops += [*p.expert_tp_exit("moe.experts", routed * h), p.ep_all_to_all("moe.ep_combine", routed * h),
            p.elementwise(Elementwise("moe.unpermute", routed * h, 2))]
    if moe.num_shared_experts:
        ops += p.shared_tp_entry("moe.shared", T * h)
        ops += ffn(m, p, "moe.shared", T, moe.num_shared_experts * moe.shared_ffn / p.tp)
        ops += p.shared_tp_exit("moe.shared", T * h)
    ops += p.moe_exit("moe", T * h)
    ops.append(residual(p, "moe.residual", T_elem, h))
    return ops


def embedding_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array) -> list[Op]:
    """Vocab-parallel embedding lookup and its TP reduction, learned positions, embedding norm, dropout."""
    m, h = model, model.hidden_size
    ops = [p.elementwise(Elementwise("embed.lookup", T * h, 2)), *p.tp_exit("embed", T * h)]
    if m.position == "learned":
        ops.append(p.elementwise(Elementwise("embed.positions", T_elem * h, 3)))
    if m.embedding_norm:
        ops.append(norm(p, "embed.norm", T_elem, h))
    if p.dropout:
        ops.append(p.elementwise(Elementwise("embed.dropout", T_elem * h, 2, 1.0)))
    return ops


def head_block(model: ModelSpec, p: Pricer, rows: Array, rows_elem: Array) -> list[Op]:
    """Final norm and the vocab-parallel LM head over ``rows`` positions (the job adds its loss or sampler)."""
    h = model.hidden_size
    return [norm(p, "head.norm", rows_elem, h), *p.tp_entry("head", rows * h),
            *p.gemm(Gemm("head.logits", rows, h, model.vocab_size / p.tp, high_precision=True))]



def unfused_attention(p: Pricer, a: Attention, *, mask_passes: float, selective: bool) -> list[Op]:
    """Attention without a fused kernel: QKᵀ as a batched matmul into the full score matrix, softmax (plus
    ``mask_passes`` for a separate masking kernel; 0 when masking is fused into the softmax, as Megatron's
    FusedScaleMaskSoftmax), dropout of the probabilities when the job has dropout, then scores·V. Each matmul
    moves the scores and half of the fused kernel's Q, K, V and O traffic."""
    e, s = p.act_bytes, a.scores
    io = a.nbytes(e) / 2
    ops = [p.bmm(f"{a.name}.scores", 2.0 * s * a.d_qk, e * s + io, selective=selective),
           p.elementwise(Elementwise(f"{a.name}.softmax", s, 2 + mask_passes), selective=selective)]
    if p.dropout:
        ops.append(p.elementwise(Elementwise(f"{a.name}.dropout", s, 2, 1.0), selective=selective))
    ops.append(p.bmm(f"{a.name}.context", 2.0 * s * a.d_v, e * s + io, selective=selective))
    return ops


# --- windowed attention and recurrent mixers (layer kinds S, C, L, M) ---------------------------------------------
def window_pairs(s: Array, window: float | None = None, chunk: float | None = None) -> np.ndarray:
    """Causal (query, key) pairs of one sequence of ``s`` tokens, keys including the query itself.

    Full: Σ_{i=1..s} i = s(s+1)/2. Sliding window w (HF/vLLM: a query sees the last w positions, itself included):
    Σ min(w, i) = w(w+1)/2 + (s − w)·w once s > w. Chunked local attention of chunk c (Llama 4: a query sees the
    earlier positions of its own chunk): ⌊s/c⌋·c(c+1)/2 + r(r+1)/2 with r = s mod c.
    """
    s = np.asarray(s, dtype=float)
    if chunk is not None:
        full, r = np.floor(s / chunk), np.mod(s, chunk)
        return full * chunk * (chunk + 1) / 2 + r * (r + 1) / 2
    if window is not None:
        return np.where(s <= window, s * (s + 1) / 2, window * (window + 1) / 2 + (s - window) * window)
    return s * (s + 1) / 2


def mixer_span(model: ModelSpec, mixer: str, s: Array) -> np.ndarray:
    """Keys a query of a ``s``-token context can reach in a layer of ``mixer``: s, min(s, window), min(s, chunk)."""
    s = np.asarray(s, dtype=float)
    if mixer == "sliding" and model.sliding_window:
        return np.minimum(s, model.sliding_window)
    if mixer == "chunked" and model.attention_chunk_size:
        return np.minimum(s, model.attention_chunk_size)
    return s


def mixer_pairs(model: ModelSpec, mixer: str, s: Array) -> np.ndarray:
    """``window_pairs`` for a layer of ``mixer`` (attention, sliding or chunked)."""
    if mixer == "sliding":
        return window_pairs(s, window=model.sliding_window)
    if mixer == "chunked":
        return window_pairs(s, chunk=model.attention_chunk_size)
    return window_pairs(s)


def attention_extras(model: ModelSpec, p: Pricer, T: Array) -> list[Op]:
    """qk-norm over every query and key head (an RMSNorm pass, Qwen3/Gemma 3/OLMo 2) and attention sinks (gpt-oss:
    one learned logit per head joins each softmax row: one more score per query row, read with the row)."""
    m, t = model, p.tp
    ops: list[Op] = []
    if m.qk_norm:
        ops.append(norm(p, "attn.qk_norm", T * (m.num_heads / t + kv_heads_per_rank(m, t)), m.head_size))
    if m.attention_sinks:
        ops.append(p.elementwise(Elementwise("attn.sinks", T * m.num_heads / t, 1.0)))
    return ops
