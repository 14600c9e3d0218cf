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
    ops.append(p.bmm("lin.core", flops, e * T * (conv + vd + 2 * hv) + passes * states, selective=False))
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
        core = p.bmm("ssm.core", flops, fwd_bytes, selective=False)
        bwd = p.bmm("ssm.core.bwd", 2.0 * flops, bwd_bytes, selective=False)
        zero = np.zeros_like(bwd.time)
        ops.append(replace(core, grads=GemmGrads(bwd.time, bwd.nbytes, zero, zero)))
    ops += [p.elementwise(Elementwise("ssm.gated_norm", T * inner, 3)), *p.gemm(Gemm("ssm.out", T, inner, h)),
            *p.tp_exit("ssm", T * h), residual(p, "ssm.residual", T_elem, h)]
    return ops
