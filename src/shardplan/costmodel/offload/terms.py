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

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core.kernels import elementwise_time, gemm_time, kernel_time, outside_recipe
from shardplan.costmodel.core.operators import Attention, Elementwise, Gemm, unfused_attention
from shardplan.costmodel.core.ops import COMM, GEMM, MEM, Op
from shardplan.costmodel.core.routing import distinct_experts
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
    d_qk, d_v = inv.attention_dims(m)
    kv_token = float(inv.kv_token_bytes(m, 1.0, dtype_bytes, latent=True))  # the cache holds MLA's latent
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


@dataclass(frozen=True, slots=True)
class FlexGenPricer:
    """Prices the shared operator inventory as FlexGen's PyTorch backend runs it on one GPU: no tensor
    parallelism, 16-bit operands, eager elementwise kernels, unfused attention with a separate masking pass
    (pytorch_backend.py ``mha``: ``where`` then ``softmax`` over the stored scores), GEMMs no faster than the
    machine's sustained rate."""

    model: ModelSpec
    system: SystemSpec
    dtype: str
    act_bytes: float = 2.0
    tp: float = 1.0
    etp: float = 1.0
    dropout: bool = False
    kv_cache: bool = False  # the cache traffic is priced by the transfer lanes, not as a kernel
    capacity_factor: float = 1.0
    expert_bias_apart: bool = False  # FlexGen-style engines: the bias in the expert GEMM
    glu_clamp_apart: bool = False  # one activation kernel clamps in place
    expert_fc1_bias_apart: bool = False  # the bias in the expert GEMM
    expert_act_apart: bool = True  # the activation its own kernel
    mla_local_down: bool = False  # one GPU: every projection on all tokens

    def gemm(self, g: Gemm) -> list[Op]:
        e = self.act_bytes
        nbytes = g.nbytes(e, e, e)
        t = gemm_time(self.system.gpu, g.flops, nbytes, self.dtype, experts=g.experts,
                      sustained_flops=self.system.gpu_sustained_matmul_flops, m=g.m, n=g.n, k=g.k)
        return [Op(g.name, GEMM, g.flops, nbytes, t)]

    def elementwise(self, x: Elementwise, *, selective: bool = False) -> Op:
        nbytes = x.nbytes(self.act_bytes)
        return Op(x.name, MEM, np.zeros_like(nbytes), nbytes, elementwise_time(self.system.gpu, nbytes))

    def bmm(self, name: str, flops: np.ndarray, nbytes: np.ndarray, *, selective: bool,
            floor_s: np.ndarray | None = None, stream_share: float = 1.0, stream_cap: float | None = None) -> Op:
        t = kernel_time(self.system.gpu, flops, nbytes, outside_recipe(self.dtype), stream_share=stream_share,
                        stream_cap=stream_cap)
        return Op(name, GEMM, flops, nbytes, t if floor_s is None else np.maximum(t, floor_s))

    def attention(self, a: Attention) -> list[Op]:
        return unfused_attention(self, a, mask_passes=2, selective=False)

    def _none(self, prefix: str, elements: object) -> list[Op]:
        return []

    tp_entry = tp_exit = shared_tp_entry = shared_tp_exit = expert_tp_entry = expert_tp_exit = moe_exit = _none

    def ep_all_to_all(self, name: str, elements: object) -> Op:
        z = np.zeros(1)
        return Op(name, COMM, z, z, z, dim="ep")

    def kv_cache_write(self, tokens: object) -> np.ndarray:
        return np.zeros(1)

    def touched_experts(self, routed_tokens: np.ndarray) -> np.ndarray:
        moe = self.model.moe
        assert moe is not None
        return distinct_experts(moe.num_experts, moe.experts_per_token, routed_tokens / moe.experts_per_token)


def _time(ops: list[Op]) -> np.ndarray:
    return sum((op.time for op in ops), start=np.zeros(1))


def attention_core(p: FlexGenPricer, g: LayerGeometry, b: np.ndarray, t: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Attention of ``b`` sequences, ``t`` new tokens each over a span of ``s`` positions (the full score matrix:
    FlexGen masks rather than skips)."""
    a = Attention("attn.core", pairs=b * t * s, heads=g.heads, d_qk=g.d_qk, d_v=g.d_v, q_tokens=b * t, span=s,
                  kv_tokens=b * s, kv_token_bytes=g.kv_token_bytes)
    return _time(p.attention(a))


def attention_gemms(p: FlexGenPricer, tokens: np.ndarray) -> np.ndarray:
    """The attention sublayer without its core: norm, projections, output projection, residual."""
    m, h = p.model, p.model.hidden_size
    ops = [inv.norm(p, "attn.norm", tokens, h), *inv.projections(m, p, tokens)[0]]
    ops += p.gemm(Gemm("attn.out", tokens, m.num_heads * inv.attention_dims(m)[1], h))
    ops.append(inv.residual(p, "attn.residual", tokens, h))
    return _time(ops)


def mlp_time(p: FlexGenPricer, g: LayerGeometry, tokens: np.ndarray) -> np.ndarray:
    """MLP sublayer for ``tokens`` tokens, dense or MoE averaged over the layers, plus the LM head's share
    (FlexGen computes logits for every prompt position)."""
    m = p.model
    t = (1 - g.moe_fraction) * _time(inv.mlp_block(m, p, tokens, tokens))
    if g.moe_fraction:
        t = t + g.moe_fraction * _time(inv.moe_block(m, p, tokens, tokens))
    head = _time(p.gemm(Gemm("head.logits", tokens, m.hidden_size, m.vocab_size))) / g.layers
    return t + head


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
