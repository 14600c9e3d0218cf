"""Per-layer time and memory terms of FlexGen's overlapped block schedule, linear in the placement.

Schedule (Sheng et al. 2023 §4.1, Alg. 1; FMInference/FlexGen flex_opt.py ``generation_loop_overlap_*``):
for each phase (prefill, then every decode step), for each layer, for each of its two sublayers
(attention, MLP), the runtime iterates over the K GPU batches of the block. Iteration k launches the
asynchronous loads of GPU batch k+1 (its KV cache and hidden states) and, when k = 0, of the *next
sublayer's weights* (one load serves all K batches); it computes batch k and stores batch k−1; then it
synchronises. So an iteration lasts as long as its busiest resource:

    iteration = max(compute, PCIe host→GPU, PCIe GPU→host, disk read, disk write)
    compute   = host work on the runtime's main thread + GPU kernels (the host work — CPU attention, copying
                pageable memory into pinned buffers — blocks the thread that launches the GPU kernels)
    sublayer  = first iteration (with the weight load) + (K − 1) × steady iteration

Each lane is ``const + Σ coef[class, tier] · fraction[class, tier]``: a linear form in the nine placement
fractions. ``OffloadTable`` holds these forms for many knob rows (batch, K, CPU attention, compression);
``evaluate`` takes the max and the sums. Memory per tier is linear in the same fractions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.kernels import elementwise_time, kernel_time
from shardplan.costmodel.offload.policy import Knobs, OffloadWorkload
from shardplan.hardware.spec import SystemSpec
from shardplan.models.params import (
    attention_out_params,
    attention_qkv_params,
    layer_norms_params,
    mlp_params,
    param_breakdown,
    router_params,
)
from shardplan.models.spec import ModelSpec

LANES = ("compute", "pcie_h2d", "pcie_d2h", "disk_read", "disk_write")
COMPUTE, H2D, D2H, DREAD, DWRITE = range(5)
SUBLAYERS = ("attention", "mlp")
MEMORY = ("gpu_prefill", "gpu_decode", "cpu", "disk")

# FlexGen's 4-bit group-wise quantisation (compression.py, num_bits=4, group_size=64): per group of 64 fp16
# values, 32 bytes of packed nibbles plus a fp16 minimum and scale → 36 B instead of 128 B.
COMPRESSED_RATIO = (64 * 0.5 + 2 * 2) / (64 * 2)
# GPU traffic to decompress one value (compression.py ``decompress``): two nibble extractions (read 0.5 B,
# write 0.5 B each), two strided stores into the fp16 output (read 0.5 B, write a full 4-B sector pair →
# 2 B each), then divide and add in place (read 2 B + write 2 B each): 15 B per value.
DECOMPRESS_BYTES_PER_VALUE = 15.0
# Compressing one new value (``compress``): min and max reductions (2 B read each), subtract, scale, clamp
# and round in fp16 (4 B each), cast to uint8 (3 B), shift and pack (1.5 B): 25.5 B per value.
COMPRESS_BYTES_PER_VALUE = 25.5
# CPU attention over a compressed cache decompresses into the fp32 workspace (31 B of DRAM traffic per value:
# nibbles 2 B, strided fp32 stores 9 B, divide and add 16 B, matmul reads 4 B) where the fp16 path moves 10 B
# (fp16→fp32 copy 6 B, matmul reads 4 B): 3.1× the time per KV value.
CPU_DECOMPRESS_SLOWDOWN = 31.0 / 10.0
# Elementwise traffic around the GEMMs, in hidden-size vectors per token: the attention sublayer reads and
# writes its LayerNorm (2) and its residual add reads two inputs and writes one (3); the MLP the same.
ATTN_ELEMENTWISE_VECTORS = 5
MLP_ELEMENTWISE_VECTORS = 5


@dataclass(frozen=True, slots=True)
class LayerGeometry:
    """Sizes of one average layer (embedding and LM head spread evenly over the layers)."""

    layers: int
    hidden: int
    heads: int
    d_qk: int
    d_v: int
    qkv_width: float  # output columns of the QKV projection(s): qkv params / hidden
    ffn: int
    gated: bool
    vocab: int
    elem_bytes: float
    attn_weight_bytes: float  # attention sublayer weights (with its norm)
    mlp_weight_bytes: float  # MLP sublayer weights (with its norm), dense/MoE averaged over layers
    extra_weight_bytes: float  # embeddings, LM head and final norm, per layer
    kv_token_bytes: float  # K and V (or the MLA latent) of one token in one layer
    moe_fraction: float  # share of layers whose MLP is a mixture of experts
    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int  # total width of always-active shared experts (0: none)


def layer_geometry(m: ModelSpec, dtype_bytes: float) -> LayerGeometry:
    """Per-layer sizes from the model's parameter breakdown (``models.params``)."""
    L, h = m.num_layers, m.hidden_size
    norms = layer_norms_params(m)
    attn = attention_qkv_params(m) + attention_out_params(m) + norms / 2
    dense_mlp = mlp_params(m, m.ffn_hidden_size)
    moe_mlp = 0.0
    experts = top_k = expert_ffn = shared = 0
    if m.moe is not None and m.num_moe_layers:
        mo = m.moe
        experts, top_k, expert_ffn = mo.num_experts, mo.experts_per_token, mo.expert_ffn_hidden_size
        shared = mo.num_shared_experts * mo.shared_ffn
        moe_mlp = router_params(m) + experts * mlp_params(m, expert_ffn) + mo.num_shared_experts * mlp_params(
            m, mo.shared_ffn)
    mlp = (m.num_dense_layers * dense_mlp + m.num_moe_layers * moe_mlp) / L + norms / 2
    breakdown = param_breakdown(m)
    extra = sum(v for k, v in breakdown.items() if k.startswith(("embedding", "lm_head", "final_norm")))
    if m.mla is not None:  # DeepSeek-V2 §2.1: the cache holds the compressed latent and the shared rope key
        kv_token = (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * dtype_bytes
        d_qk, d_v = m.mla.qk_head_dim, m.mla.v_head_dim
    else:
        kv_token = 2 * m.kv_heads * m.head_size * dtype_bytes
        d_qk = d_v = m.head_size
    return LayerGeometry(
        layers=L, hidden=h, heads=m.num_heads, d_qk=d_qk, d_v=d_v, qkv_width=attention_qkv_params(m) / h,
        ffn=m.ffn_hidden_size, gated=m.mlp.gated, vocab=m.vocab_size, elem_bytes=dtype_bytes,
        attn_weight_bytes=attn * dtype_bytes, mlp_weight_bytes=mlp * dtype_bytes,
        extra_weight_bytes=extra * dtype_bytes / L, kv_token_bytes=kv_token,
        moe_fraction=m.num_moe_layers / L, experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared,
    )


@dataclass(frozen=True, slots=True)
class Phases:
    """Prefill and decode segments: tokens per sequence, attention span, cached positions read, steps."""

    names: list[str]
    tokens: np.ndarray  # t: tokens computed per sequence in one step (P in prefill, 1 in decode)
    span: np.ndarray  # s: positions attended (the KV length)
    cached: np.ndarray  # positions read from the KV cache (0 in prefill)
    steps: np.ndarray  # how many steps of this kind


def phases(work: OffloadWorkload) -> Phases:
    """Prefill plus up to ``work.segments`` equal decode segments, each costed at its mean KV length.

    Decode step i (1 ≤ i < G) attends P + i positions, P + i − 1 of them read from the cache (the newest is
    computed in the step); every term is linear in the length, so a segment costs its step count times a step
    at the mean length as long as the binding resource does not change inside it.
    """
    P, G = work.prompt_len, work.gen_len
    names, tokens, span, cached, steps = ["prefill"], [P], [P], [0.0], [1]
    n = G - 1
    k = min(work.segments, n)
    for j, chunk in enumerate(np.array_split(np.arange(1, n + 1), k) if n else []):
        names.append(f"decode[{j + 1}/{k}]" if k > 1 else "decode")
        i = float(chunk.mean())
        tokens.append(1)
        span.append(P + i)
        cached.append(P + i - 1)
        steps.append(len(chunk))
    return Phases(names, np.array(tokens, float), np.array(span), np.array(cached), np.array(steps, float))


def gemm_time(system: SystemSpec, m: np.ndarray, k: float, n: float, dtype: str) -> np.ndarray:
    """One linear layer (M×K)·(K×N): roofline time, no faster than the machine's sustained GEMM rate."""
    e = 2.0  # fp16/bf16 operands
    flops = 2.0 * m * k * n
    t = kernel_time(system.gpu, flops, e * (m * k + k * n + m * n), dtype)
    if system.gpu_sustained_matmul_flops:
        t = np.maximum(t, flops / system.gpu_sustained_matmul_flops)
    return t


def attention_core(system: SystemSpec, g: LayerGeometry, b: np.ndarray, t: np.ndarray, s: np.ndarray,
                    dtype: str) -> np.ndarray:
    """FlexGen's unfused attention (pytorch_backend.py ``mha``/``mha_gen``): QKᵀ as a batched matmul, a masked
    softmax over the stored scores (``where`` and ``softmax`` each read and write them), then scores·V."""
    scores = b * g.heads * t * s
    e = g.elem_bytes
    kv_bytes = b * s * g.kv_token_bytes  # K and V read by the two matmuls
    q_bytes = e * b * t * g.heads * (g.d_qk + g.d_v)
    qk = kernel_time(system.gpu, 2.0 * scores * g.d_qk, e * scores + q_bytes / 2 + kv_bytes / 2, dtype)
    softmax = elementwise_time(system.gpu, 4 * e * scores)
    pv = kernel_time(system.gpu, 2.0 * scores * g.d_v, e * scores + q_bytes / 2 + kv_bytes / 2, dtype)
    return qk + softmax + pv


def attention_gemms(system: SystemSpec, g: LayerGeometry, tokens: np.ndarray, dtype: str) -> np.ndarray:
    """QKV and output projections plus the sublayer's norm and residual (elementwise) for ``tokens`` tokens."""
    proj = (gemm_time(system, tokens, g.hidden, g.qkv_width, dtype)
            + gemm_time(system, tokens, g.heads * g.d_v, g.hidden, dtype))
    return proj + elementwise_time(system.gpu, ATTN_ELEMENTWISE_VECTORS * g.elem_bytes * tokens * g.hidden)


def mlp_time(system: SystemSpec, g: LayerGeometry, tokens: np.ndarray, dtype: str) -> np.ndarray:
    """MLP sublayer for ``tokens`` tokens: dense, or MoE (router, the experts the tokens reach, shared experts)
    averaged over layers; plus the LM head's share (FlexGen computes logits for every prompt position)."""
    h, e = g.hidden, g.elem_bytes
    up = 2 if g.gated else 1

    def ffn(m: np.ndarray, f: float) -> np.ndarray:  # up (and gate) GEMM, activation, down GEMM
        return (gemm_time(system, m, h, up * f, dtype) + elementwise_time(system.gpu, e * m * f * (up + 1))
                + gemm_time(system, m, f, h, dtype))

    t = (1 - g.moe_fraction) * ffn(tokens, g.ffn)
    if g.moe_fraction:
        # Expected experts reached by `tokens` tokens routed top-k among E: E·(1 − (1 − k/E)^tokens).
        reached = g.experts * (1 - (1 - g.top_k / g.experts) ** tokens)
        per_expert = tokens * g.top_k / reached
        moe = gemm_time(system, tokens, h, g.experts, dtype) + reached * ffn(per_expert, g.expert_ffn)
        if g.shared_ffn:
            moe = moe + ffn(tokens, g.shared_ffn)
        t = t + g.moe_fraction * moe
    head = gemm_time(system, tokens, h, g.vocab, dtype) / g.layers
    return t + head + elementwise_time(system.gpu, MLP_ELEMENTWISE_VECTORS * e * tokens * h)


def cpu_attention_rate(system: SystemSpec) -> float:
    """KV bytes/s through CPU attention: the preset's figure, else DRAM bandwidth × 0.5 achievable / 5 bytes of
    traffic per fp16 KV byte (fp16→fp32 copy reads 2 B and writes 4 B per value, the matmuls read 4 B)."""
    return system.cpu_attention_bytes_per_s or system.cpu_memory_bandwidth_bytes_per_s * 0.5 / 5


def staging_rate(system: SystemSpec) -> float:
    """Bytes/s copying pageable memory into a pinned buffer: the preset's figure, else DRAM bandwidth × 0.5
    achievable / 2 (each byte is read and written)."""
    return system.host_staging_bytes_per_s or system.cpu_memory_bandwidth_bytes_per_s * 0.5 / 2


@dataclass(frozen=True, slots=True)
class OffloadTable:
    """Linear forms of every lane and memory tier, for R knob rows and the phases of one workload.

    ``lane_const[r, p, s, i, l] + Σ lane_coef[r, p, s, i, l, c, t]·x[c, t]`` is lane l's busy time (seconds) in
    one iteration (i = 0 first, 1 steady) of sublayer s in phase p; ``gpu_*`` is the GPU's part of the compute
    lane. ``weight[r, p, i]`` counts such iterations over the run. Memory: ``mem_const[r, j] + Σ mem_coef·x``
    bytes against ``capacity[j]`` for j in ``MEMORY``.
    """

    knobs: Knobs
    phases: Phases
    geometry: LayerGeometry
    lane_const: np.ndarray
    lane_coef: np.ndarray
    gpu_const: np.ndarray
    gpu_coef: np.ndarray
    weight: np.ndarray
    mem_const: np.ndarray
    mem_coef: np.ndarray
    capacity: np.ndarray

    def __len__(self) -> int:
        return len(self.knobs)

    def take(self, idx: np.ndarray) -> OffloadTable:
        return OffloadTable(self.knobs.take(idx), self.phases, self.geometry, self.lane_const[idx],
                            self.lane_coef[idx], self.gpu_const[idx], self.gpu_coef[idx], self.weight[idx],
                            self.mem_const[idx], self.mem_coef[idx], self.capacity)
