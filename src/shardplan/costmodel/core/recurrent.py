"""The operators of the recurrent token mixers, with the specs of ``core.operators``: Gated DeltaNet linear attention
('L' layers) and Mamba-2 state-space layers ('M' layers), chunkwise in training and prefill, one recurrent step per
token in decode."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardplan.costmodel.core.operators import Array, Elementwise, Gemm, Pricer, norm, residual
from shardplan.costmodel.core.ops import GemmGrads, Op
from shardplan.models.spec import ModelSpec

# Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, arXiv 2412.06464 §3.3) in the chunkwise form of DeltaNet
# (Yang et al. 2024, arXiv 2406.06484 §3.2–3.3, the WY representation): the chunk length of the flash-linear-attention
# kernels (fla/ops/gated_delta_rule/chunk.py, chunk_size 64).
GDN_CHUNK = 64
# FLA's chunked Gated DeltaNet forward (flash-linear-attention ``chunk_gated_delta_rule``: cumsum, KKᵀ and its
# triangular solve, W/U, the chunk-to-chunk state recurrence ``chunk_gated_delta_rule_fwd_h``, the output), measured
# on B200 at d_k = d_v = 128 (FLA 0.4.2, Triton 3.5.1): Qwen3.5 shapes, h_v = 8, one sequence of 2,048/4,096/8,192
# tokens 0.213/0.215/0.338 ms, 1,024×8 0.214, 2,048×4 0.208, two sequences summing to 8,192 0.239–0.308; h_v = 16,
# 1×8,192 0.424 (flashinfer-ai/flashinfer PR #3001, "FLA/Triton" column); h_v = 48, 1×8,192 1.116, 1×16,384 2.017,
# 8×1,024 1.021, 8×2,048 1.819, 16×1,024 1.812 ms (vllm-project/vllm PR #43273, "FLA" column, SM100). The kernels run
# at ~3% of the tensor peak (~70 TFLOP/s at h_v = 48 on the FLOPs of ``gdn_core_flops``): the serial recurrence over a
# sequence's chunks (its grid is sequences × heads × value blocks: vllm PR #25393, "grid size is 32" for Qwen3-Next)
# or the per-token work, whichever is longer, plus the chain's fixed time. Read off those times: 1.9 µs per chunk
# step (1×8,192 − 1×4,096 at h_v = 8, 64 chunks apart), 2.4 ns per token and value head (median over the h_v = 16
# and 48 runs after the fixed time), 93 µs fixed (1×8,192 at h_v = 8 less its 128 chunk steps); the fifteen times
# within −28…+20% (tests/costmodel/test_gdn_kernel_time.py). No other GPU's time is published: every GPU takes the
# B200's (latency- and issue-bound kernels, not tensor-bound). Backward: twice the forward, as every GEMM-like op.
GDN_FLA_FIXED_S = 93e-6
GDN_FLA_CHUNK_S = 1.9e-6
GDN_FLA_TOKEN_HEAD_S = 2.4e-9  # per token and value head at d_k = d_v = 128 (scaled by d_k·d_v)


# The chunked Mamba-2 SSD's Triton kernels move the traffic of ``ssd_chunked_traffic`` at two bounds, both read off
# one measurement: vLLM's copies of mamba_ssm's ``_mamba_chunk_scan_combined_fwd`` kernels on one H100,
# granite-4.0-h-small's shape (128 heads of 64, one group, state 128; chunk 256 inferred: the PR's second table names
# it the mamba config, and at chunk 128 the same runs would read 1.5-1.8x), one sequence of 4,096 / 8,192 /
# 16,384 / 32,768 / 65,536 / 131,072 / 262,144 tokens at 1.206 / 1.262 / 1.292 / 1.180 / 1.107 / 1.070 / 1.082 × 10⁷
# tokens/s (vllm-project/vllm PR #27299, 2025-10-25, microbenchmark "Original" column): 1.12–1.35 TB/s of that traffic,
# median 1.236 (about 100 TFLOP/s of its FLOPs), 2.23–2.69× the streaming time ``kernels.memory_time`` gives it, median
# 2.44. Below 4,096 tokens the measured time stops falling (0.29-0.30 ms at 1,024 and 2,048 tokens: host and launch
# time, not priced).
# - ``SSD_TRITON_STREAM_SHARE``: on a GPU of lower memory bandwidth the kernels keep that share of its streaming rate;
# - ``SSD_TRITON_BYTES_PER_S``: on one of higher bandwidth they do not pass the H100's rate, as the Gated DeltaNet
#   kernels of the same Triton lineage (above) run at one time on every GPU (FLA's forward, h_v = 8, one sequence of
#   65,536 / 32,768 / 16,384 tokens: 1.954 / 0.997 / 0.508 ms on an H100, flashinfer PR #3866; 2.065 / 1.048 / 0.531 ms
#   on a B300, PR #4078: within 6%, the B300 the slower): the H200 (the H100's die) gains nothing from its HBM, and
#   Blackwell's 148 SMs against 132 are not credited. An argument, not a measurement of this kernel: this bound was
#   added after the share alone missed the ratios that follow (stack unknown, ratios only). A pure Mamba-2 model's
#   published training throughput (state-spaces/mamba issue #904: 102.5 / 239.2 / 360.4 TFLOP/s on A100 / H200 /
#   GB200) priced so reads H200/A100 2.26× and GB200/H200 1.46× against 2.33× and 1.51× measured; with the share
#   alone 2.52× and 1.85×, with the H100 rate alone 2.03× and 1.46×.
# Backward (mamba_ssm's ``_bwd`` kernels, the same family) is not measured: it takes both bounds
# (tests/costmodel/test_ssd_kernel_rate.py).
SSD_TRITON_STREAM_SHARE = 1.0 / 2.44
SSD_TRITON_BYTES_PER_S = 1.236e12


def gdn_core_flops(model: ModelSpec, tokens: Array, heads: Array, *, recurrent: bool) -> np.ndarray:
    """FLOPs of the Gated DeltaNet core for ``tokens`` tokens over ``heads`` value heads (d_k keys, d_v values).

    Chunkwise (training, prefill), per chunk of C tokens and head, counting each matmul 2·M·K·N: KKᵀ (2C²d_k), the
    triangular solve of (I + tril(βKKᵀ))⁻¹ (C³/3 multiply-adds: 2C³/3), W = T·βK (2C²d_k), U = T·βV (2C²d_v),
    U − W·S (2C·d_k·d_v), QKᵀ (2C²d_k), its product with the new values (2C²d_v), Q·S (2C·d_k·d_v) and the state
    update Kᵀ(U − WS) (2C·d_k·d_v): per token C·(6d_k + 4d_v) + 2C²/3 + 6·d_k·d_v.
    Recurrent (decode), per token and head: Sᵀk, the rank-one update and Sᵀq: 6·d_k·d_v.
    """
    la = model.linear_attention
    assert la is not None
    dk, dv = la.key_head_dim, la.value_head_dim
    per = 6.0 * dk * dv
    if not recurrent:
        per = per + GDN_CHUNK * (6.0 * dk + 4.0 * dv) + 2.0 * GDN_CHUNK**2 / 3
    return np.asarray(tokens * heads * per, dtype=float)


def gdn_chunked_time(model: ModelSpec, tokens: Array, heads: Array, seqs: Array) -> np.ndarray:
    """FLA's chunked Gated DeltaNet forward over ``tokens`` tokens in ``seqs`` sequences with ``heads`` value heads
    per GPU (``GDN_FLA_*``): the fixed time plus the longer of the chunk recurrence (chunks per sequence) and the
    per-token work."""
    la = model.linear_attention
    assert la is not None
    tokens = np.asarray(tokens, dtype=float)
    chunks = tokens / np.maximum(np.asarray(seqs, dtype=float), 1.0) / GDN_CHUNK
    work = tokens * np.asarray(heads, dtype=float) * la.key_head_dim * la.value_head_dim / 128.0**2
    return GDN_FLA_FIXED_S + np.maximum(chunks * GDN_FLA_CHUNK_S, work * GDN_FLA_TOKEN_HEAD_S)


def ssd_core_flops(model: ModelSpec, tokens: Array, heads: Array, groups: Array, *, recurrent: bool) -> np.ndarray:
    """FLOPs of the Mamba-2 SSD core (Dao & Gu 2024, arXiv 2405.21060 §6, the four steps of the block
    decomposition) for ``tokens`` tokens over ``heads`` heads (P = head_dim, N = d_state, Q = chunk):
    intra-chunk C·Bᵀ per group (2Q·N per token) and its masked product with X per head (2Q·P), chunk states Bᵀ·X
    (2N·P per head), outputs from the carried states C·S (2N·P per head); the inter-chunk scan is O(N·P/Q).
    Recurrent (decode), per token and head: decay and B·x update of the N×P state and the C read-out: 6·N·P.
    """
    s = model.mamba
    assert s is not None
    P_, N, Q = s.head_dim, s.d_state, s.chunk_size
    if recurrent:
        return np.asarray(tokens * heads * 6.0 * N * P_, dtype=float)
    return np.asarray(tokens * (heads * (2.0 * Q * P_ + 4.0 * N * P_) + groups * 2.0 * Q * N), dtype=float)


def ssd_chunked_traffic(model: ModelSpec, tokens: Array, heads: Array, groups: Array, seqs: Array,
                        e: float) -> tuple[np.ndarray, np.ndarray]:
    """HBM bytes of the chunked Mamba-2 SSD (state-spaces/mamba@d757aef ``mamba_ssm/ops/triton/ssd_combined.py``,
    ``_mamba_chunk_scan_combined_fwd``/``_bwd``, z applied by the separate gated norm as Megatron's MambaMixer does),
    forward and backward, each kernel reading and writing its tensors once. With x, dout, dx, out T·H·P·e bytes
    (X), B, C and their gradients T·G·N·e (Bc), CB and dCB fp32 T·G·Q·4 (CB), the chunk states fp32 and e-byte
    copies (S32, S16: chunks·H·P·N·4 and ·e) and dt, dA_cumsum fp32 (D4 = T·H·4):
    forward — chunk_cumsum (dt in, dt and dA_cumsum out), chunk_state (B, x, dt, dA_cumsum in; states fp32 out),
    state_passing (fp32 in, C.dtype out), bmm_chunk (C, B in; CB fp32 out), chunk_scan (CB, x, dt, dA_cumsum, C,
    states in; out): T·H·e + 6·D4 + 4·Bc + 3·X + 2·CB + 2·S32 + 2·S16;
    backward — the first four recomputed (state passing to fp32), then bwd_dstates, state_passing_bwd (states and
    dstates fp32 in, both e-byte out), bwd_dx, bwd_db, bwd_dC, bwd_dcb, two bmm_chunk_bwd, ddAcs_stable and
    chunk_cumsum_bwd: T·H·e + 21·D4 + 15·Bc + 11·X + 6·CB + 6·S32 + 5·S16."""
    s = model.mamba
    assert s is not None
    P_, N, Q = s.head_dim, s.d_state, s.chunk_size
    chunks = np.maximum(tokens / Q, seqs)
    X, Bc, CB = tokens * heads * P_ * e, tokens * groups * N * e, tokens * groups * Q * 4.0
    S32, S16 = chunks * heads * P_ * N * 4.0, chunks * heads * P_ * N * e
    D4, dt = tokens * heads * 4.0, tokens * heads * e
    fwd = dt + 6 * D4 + 4 * Bc + 3 * X + 2 * CB + 2 * S32 + 2 * S16
    bwd = dt + 21 * D4 + 15 * Bc + 11 * X + 6 * CB + 6 * S32 + 5 * S16
    return np.asarray(fwd, dtype=float), np.asarray(bwd, dtype=float)


def linear_attention_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array, *, seqs: Array,
                           recurrent: bool, state_bytes: float) -> list[Op]:
    """A Gated DeltaNet layer (transformers Qwen3NextGatedDeltaNet): norm, in_proj_qkvz and in_proj_ba (split
    over TP by heads), the causal depthwise conv over q, k, v, the core (chunkwise or one recurrent step over
    ``seqs`` sequences whose d_k×d_v states are read and written at ``state_bytes`` per element), the gated
    RMSNorm with z, out_proj, TP exit, residual."""
    la = model.linear_attention
    assert la is not None
    m, t, h, e = model, p.tp, model.hidden_size, p.act_bytes
    kd, vd, hv = la.key_dim / t, la.value_dim / t, la.num_value_heads / t
    conv = 2 * kd + vd
    ops = [norm(p, "lin.norm", T_elem, h), *p.tp_entry("lin", T * h),
           *p.gemm(Gemm("lin.in_qkvz", T, h, 2 * kd + 2 * vd)), *p.gemm(Gemm("lin.in_ba", T, h, 2 * hv)),
           p.elementwise(Elementwise("lin.conv", T * conv, 2,
                                     fixed=seqs * conv * (la.conv_kernel - 1) * 2 * state_bytes))]
    flops = gdn_core_flops(m, T, hv, recurrent=recurrent)
    states = hv * la.key_head_dim * la.value_head_dim * state_bytes
    # q, k, v, gates in; o out; the state read and written once per sequence (recurrent) or per chunk (chunkwise)
    passes = 2.0 * seqs if recurrent else 2.0 * np.maximum(T / GDN_CHUNK, seqs)
    floor = None if recurrent else gdn_chunked_time(m, T, hv, seqs)  # FLA's measured chunked kernels
    ops.append(p.bmm("lin.core", flops, e * T * (conv + vd + 2 * hv) + passes * states, selective=False,
                     floor_s=floor))
    ops += [p.elementwise(Elementwise("lin.gated_norm", T * vd, 3)), *p.gemm(Gemm("lin.out", T, vd, h)),
            *p.tp_exit("lin", T * h), residual(p, "lin.residual", T_elem, h)]
    return ops


def mamba2_block(model: ModelSpec, p: Pricer, T: Array, T_elem: Array, *, seqs: Array, recurrent: bool,
                 state_bytes: float) -> list[Op]:
    """A Mamba-2 layer (transformers Mamba2Mixer; Megatron's MambaMixer splits heads and groups over TP): norm,
    in_proj h → (z, x, B, C, dt), the causal depthwise conv over x, B, C, the SSD core (chunked or one
    recurrent step over ``seqs`` sequences' N×P states), gated RMSNorm with z, out_proj, TP exit, residual."""
    s = model.mamba
    assert s is not None
    t, h, e = p.tp, model.hidden_size, p.act_bytes
    inner, conv, heads, groups = s.inner / t, s.conv_dim / t, s.num_heads / t, s.n_groups / t
    ops = [norm(p, "ssm.norm", T_elem, h), *p.tp_entry("ssm", T * h),
           *p.gemm(Gemm("ssm.in_proj", T, h, inner + conv + heads)),
           p.elementwise(Elementwise("ssm.conv", T * conv, 2,
                                     fixed=seqs * conv * (s.conv_kernel - 1) * 2 * state_bytes))]
    flops = ssd_core_flops(model, T, heads, groups, recurrent=recurrent)
    if recurrent:  # one step: x, B, C, dt in, y out, each sequence's N×P states read and written once
        states = heads * s.head_dim * s.d_state * state_bytes
        ops.append(p.bmm("ssm.core", flops, e * T * (conv + heads + inner) + 2.0 * seqs * states, selective=False))
    else:  # the chunked kernels' own traffic, forward and (training) backward: its dx, dB, dC, ddt, no weights
        fwd_bytes, bwd_bytes = ssd_chunked_traffic(model, T, heads, groups, seqs, e)
        rate = {"stream_share": SSD_TRITON_STREAM_SHARE, "stream_cap": SSD_TRITON_BYTES_PER_S}
        core = p.bmm("ssm.core", flops, fwd_bytes, selective=False, **rate)
        bwd = p.bmm("ssm.core.bwd", 2.0 * flops, bwd_bytes, selective=False, **rate)
        zero = np.zeros_like(bwd.time)
        ops.append(replace(core, grads=GemmGrads(bwd.time, bwd.nbytes, zero, zero)))
    ops += [p.elementwise(Elementwise("ssm.gated_norm", T * inner, 3)), *p.gemm(Gemm("ssm.out", T, inner, h)),
            *p.tp_exit("ssm", T * h), residual(p, "ssm.residual", T_elem, h)]
    return ops
