"""``build_offload_table``: the linear lane and memory forms of ``offload_terms`` for many knob rows.

Byte counts per GPU batch of b sequences in a phase with t new tokens per sequence, s attended positions and
c cached positions read (``offload_terms.phases``); e = bytes per value; r_w, r_kv = 1 or the 4-bit ratio:

    weights of a sublayer      W_s·r_w            loaded once per sublayer in its first iteration (the next one's)
    KV read (decode)           b·c·kv_token·r_kv   per GPU batch, from CPU/disk
    KV written                 b·t·kv_token·r_kv   per GPU batch (the prompt's in prefill, one token in decode)
    hidden states              b·t·h·e            in and out of every sublayer when not on the GPU

Rates: PCIe (pinned DMA) ``pcie.effective_bytes_per_s`` each way, disk read/write, CPU attention and pageable
staging (``offload_terms``). A fraction on disk also crosses PCIe (disk → pinned relay → GPU), except KV
read by CPU attention, which stays on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.kernels import elementwise_time
from shardplan.costmodel.offload.policy import (
    ACT,
    CPU,
    DISK,
    GPU,
    KV,
    Capacities,
    Knobs,
    OffloadWorkload,
    W,
)
from shardplan.costmodel.offload.terms import (
    COMPRESS_BYTES_PER_VALUE,
    COMPRESSED_RATIO,
    COMPUTE,
    CPU_DECOMPRESS_SLOWDOWN,
    D2H,
    DECOMPRESS_BYTES_PER_VALUE,
    DREAD,
    DWRITE,
    H2D,
    LANES,
    MEMORY,
    LayerGeometry,
    OffloadTable,
    Phases,
    attention_core,
    attention_gemms,
    cpu_attention_rate,
    layer_geometry,
    mlp_time,
    phases,
    staging_rate,
)
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES

MIN_RATE = 1e6  # bytes/s standing in for a missing disk (its capacity is 0, so nothing is placed there)


def _decompress(system: SystemSpec, values: np.ndarray) -> np.ndarray:
    """Dequantising ``values`` 4-bit values to fp16 on the GPU (memory-bound elementwise kernels)."""
    return elementwise_time(system.gpu, DECOMPRESS_BYTES_PER_VALUE * values)


def _compress(system: SystemSpec, values: np.ndarray) -> np.ndarray:
    """Quantising ``values`` new fp16 values to 4 bits on the GPU."""
    return elementwise_time(system.gpu, COMPRESS_BYTES_PER_VALUE * values)


def _prefill_workspace(g: LayerGeometry, b: np.ndarray, P: int) -> np.ndarray:
    """Peak GPU intermediates of one GPU batch in prefill (fp16): attention keeps the input, its norm, Q/K/V and
    two score tensors (masked scores and softmax, b·heads·P² each); the MLP the input, its norm and the
    intermediate (and its activation); the LM head the input and the logits (b·P·V, all positions)."""
    e, h = g.elem_bytes, g.hidden
    up = 2 if g.gated else 1
    ffn = (1 - g.moe_fraction) * g.ffn + g.moe_fraction * (g.top_k * g.expert_ffn + g.shared_ffn)
    attn = 2 * b * P * h + b * P * g.qkv_width + 2 * b * g.heads * P * P
    mlp = 2 * b * P * h + b * P * ffn * (up + 1)
    head = b * P * h + b * P * g.vocab
    return e * np.maximum(np.maximum(attn, mlp), head) + b * P * g.kv_token_bytes


def _decode_workspace(g: LayerGeometry, b: np.ndarray, span: float) -> np.ndarray:
    """GPU intermediates of one GPU batch in a decode step (one token per sequence)."""
    up = 2 if g.gated else 1
    ffn = (1 - g.moe_fraction) * g.ffn + g.moe_fraction * (g.top_k * g.expert_ffn + g.shared_ffn)
    return g.elem_bytes * b * (2 * g.hidden + g.qkv_width + 2 * g.heads * span + ffn * (up + 1) + g.vocab)


@dataclass(frozen=True, slots=True)
class _Rows:
    """Knobs and phase sizes broadcast to (rows, phases), and the machine's rates."""

    b: np.ndarray  # sequences per GPU batch
    K: np.ndarray  # GPU batches per block
    ca: np.ndarray  # CPU attention (0/1)
    cw: np.ndarray  # compressed weights (0/1)
    ck: np.ndarray  # compressed KV cache (0/1)
    rw: np.ndarray  # bytes per weight byte: 1 or the 4-bit ratio
    rk: np.ndarray  # bytes per KV byte
    unpinned: np.ndarray  # CPU weights in pageable memory (0/1)
    t: np.ndarray  # new tokens per sequence in one step
    s: np.ndarray  # attended positions
    c: np.ndarray  # cached positions read
    decode: np.ndarray  # 1 in decode phases, 0 in prefill (R, P)
    link: float  # PCIe pinned DMA, each direction
    dread: float
    dwrite: float

    @classmethod
    def of(cls, system: SystemSpec, knobs: Knobs, ph: Phases) -> _Rows:
        col = (slice(None), None)
        b = knobs.gpu_batch[col].astype(float)
        return cls(
            b=b, K=knobs.num_batches[col].astype(float), ca=knobs.cpu_attention[col].astype(float),
            cw=knobs.compress_weights[col].astype(float), ck=knobs.compress_kv[col].astype(float),
            rw=np.where(knobs.compress_weights, COMPRESSED_RATIO, 1.0)[col],
            rk=np.where(knobs.compress_kv, COMPRESSED_RATIO, 1.0)[col],
            unpinned=(~knobs.pin_weights)[col].astype(float), t=ph.tokens[None, :], s=ph.span[None, :],
            c=ph.cached[None, :], decode=(ph.cached > 0)[None, :].astype(float) + 0 * b,
            link=system.pcie.effective_bytes_per_s, dread=max(system.disk_read_bytes_per_s, MIN_RATE),
            dwrite=max(system.disk_write_bytes_per_s, MIN_RATE))


def _gpu_terms(system: SystemSpec, g: LayerGeometry, x: _Rows, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """GPU kernel time of one GPU batch per (row, phase, sublayer, iteration): constant and per-fraction parts.

    Prefill attention always runs on the GPU; in decode the GPU attends the GPU-resident KV and, without CPU
    attention, the streamed-in rest, so that share of the attention kernels is linear in the KV placement.
    Compressed weights are decompressed for every GPU batch (FlexGen ``mha_gen``/``mlp`` call ``decompress``).
    """
    e = g.elem_bytes
    tok = x.b * x.t
    one = np.ones_like(tok)
    core = attention_core(system, g, x.b, x.t, x.s, dtype) + x.ck * x.decode * _decompress(
        system, x.b * x.s * g.kv_token_bytes / e)
    attn = (attention_gemms(system, g, tok, dtype) + core * (1 - x.decode)
            + x.cw * _decompress(system, one * g.attn_weight_bytes / e)
            + x.ck * _compress(system, tok * g.kv_token_bytes / e))
    mlp = mlp_time(system, g, tok, dtype) + x.cw * _decompress(system, one * (g.mlp_weight_bytes
                                                                            + g.extra_weight_bytes) / e)
    const = np.zeros((*tok.shape, 2, 2))
    coef = np.zeros((*tok.shape, 2, 2, 3, 3))
    const[:, :, 0, :] = attn[:, :, None]
    const[:, :, 1, :] = mlp[:, :, None]
    kv = np.stack([core * x.decode, core * x.decode * (1 - x.ca), core * x.decode * (1 - x.ca)], axis=-1)
    coef[:, :, 0, :, KV, :] = kv[:, :, None, :]
    return const, coef


def _host_terms(system: SystemSpec, g: LayerGeometry, x: _Rows, w_next: tuple[float, float]) -> np.ndarray:
    """Main-thread host time per fraction: CPU attention over the CPU/disk cache (decode), copying the pageable
    compressed CPU cache into pinned memory (compression.py allocates it unpinned), and staging unpinned CPU
    weights of the next sublayer (first iteration)."""
    kv_read = x.b * x.c * g.kv_token_bytes  # fp16 bytes of cached K/V one GPU batch reads in a decode step
    cpu_attn = x.ca * kv_read / cpu_attention_rate(system) * np.where(x.ck > 0, CPU_DECOMPRESS_SLOWDOWN, 1.0)
    staged_kv = (1 - x.ca) * x.ck * kv_read * x.rk / staging_rate(system)
    host = np.zeros((*kv_read.shape, 2, 2, 3, 3))
    host[:, :, 0, :, KV, CPU] = (cpu_attn + staged_kv)[:, :, None]
    host[:, :, 0, :, KV, DISK] = cpu_attn[:, :, None]
    for sub in range(2):
        host[:, :, sub, 0, W, CPU] = x.unpinned * w_next[sub] * x.rw / staging_rate(system)
    return host


def _transfer_terms(g: LayerGeometry, x: _Rows, w_next: tuple[float, float], const: np.ndarray,
                    coef: np.ndarray) -> None:
    """Fill the PCIe and disk lanes (module docstring: bytes per GPU batch and per sublayer's weights)."""
    e = g.elem_bytes
    tok = x.b * x.t
    act = tok * g.hidden * e  # hidden states of one GPU batch, in or out of one sublayer
    kv_in = x.b * x.c * g.kv_token_bytes * x.rk
    kv_out = tok * g.kv_token_bytes * x.rk
    for sub in range(2):
        for tier in (CPU, DISK):
            coef[:, :, sub, :, H2D, ACT, tier] = (act / x.link)[:, :, None]
            coef[:, :, sub, :, D2H, ACT, tier] = (act / x.link)[:, :, None]
        coef[:, :, sub, :, DREAD, ACT, DISK] = (act / x.dread)[:, :, None]
        coef[:, :, sub, :, DWRITE, ACT, DISK] = (act / x.dwrite)[:, :, None]
        # first iteration: the next sublayer's weights (disk → pinned relay → GPU crosses both)
        w = w_next[sub] * x.rw[:, 0, None]
        coef[:, :, sub, 0, H2D, W, CPU] += w / x.link
        coef[:, :, sub, 0, H2D, W, DISK] += w / x.link
        coef[:, :, sub, 0, DREAD, W, DISK] += w / x.dread
    attn = (slice(None), slice(None), 0, slice(None))
    coef[(*attn, H2D, KV, CPU)] = ((1 - x.ca) * kv_in / x.link)[:, :, None]
    coef[(*attn, H2D, KV, DISK)] = ((1 - x.ca) * kv_in / x.link)[:, :, None]
    coef[(*attn, D2H, KV, CPU)] = (kv_out / x.link)[:, :, None]
    coef[(*attn, D2H, KV, DISK)] = (kv_out / x.link)[:, :, None]
    coef[(*attn, DREAD, KV, DISK)] = (kv_in / x.dread)[:, :, None]
    coef[(*attn, DWRITE, KV, DISK)] = (kv_out / x.dwrite)[:, :, None]
    # CPU attention ships q and the new K/V to the host and the attention output back (decode only).
    const[(*attn, D2H)] = (x.ca * x.decode * x.b * g.qkv_width * e / x.link)[:, :, None]
    const[(*attn, H2D)] = (x.ca * x.decode * x.b * g.heads * g.d_v * e / x.link)[:, :, None]


def build_offload_table(model: ModelSpec, system: SystemSpec, work: OffloadWorkload, knobs: Knobs,
                        caps: Capacities) -> OffloadTable:
    """Lane and memory linear forms of every knob row (vectorised over rows and phases)."""
    g = layer_geometry(model, DTYPE_BYTES[work.dtype])
    ph = phases(work)
    x = _Rows.of(system, knobs, ph)
    w_next = (g.mlp_weight_bytes + g.extra_weight_bytes, g.attn_weight_bytes)  # loaded by (attention, MLP)
    gconst, gcoef = _gpu_terms(system, g, x, work.dtype)
    const = np.zeros((*gconst.shape, len(LANES)))
    coef = np.zeros((*gconst.shape, len(LANES), 3, 3))
    const[..., COMPUTE] = gconst  # the compute lane: host work, then the GPU kernels it launches
    coef[..., COMPUTE, :, :] = gcoef + _host_terms(system, g, x, w_next)
    _transfer_terms(g, x, w_next, const, coef)
    # iteration counts: first + (K − 1) steady, per step, per layer
    weight = np.zeros((len(knobs), len(ph.names), 2))
    weight[:, :, 0] = g.layers * ph.steps[None, :]
    weight[:, :, 1] = g.layers * ph.steps[None, :] * (x.K - 1)
    mem_const, mem_coef = _memory(g, work, knobs, x.b[:, 0], x.rw[:, 0], x.rk[:, 0])
    return OffloadTable(knobs=knobs, phases=ph, geometry=g, lane_const=const, lane_coef=coef, gpu_const=gconst,
                        gpu_coef=gcoef, weight=weight, mem_const=mem_const, mem_coef=mem_coef,
                        capacity=caps.as_array())


def _memory(g: LayerGeometry, work: OffloadWorkload, knobs: Knobs, b: np.ndarray, rw: np.ndarray,
            rk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Memory per tier as linear forms (``MEMORY`` order): resident shares plus working buffers.

    GPU: resident weights/KV/hidden states, two sublayer-weight buffers for the streamed share (current and
    prefetched), two GPU batches of streamed KV (GPU attention), load/store buffers for streamed hidden states,
    the fp16 copy of a compressed sublayer, and the phase's intermediates. CPU: its shares plus the fp32 KV
    workspace of CPU attention (FlexGen ``init_attention_compute_workspace``). Disk: its shares.
    """
    R = len(knobs)
    P, G, L, h, e = work.prompt_len, work.gen_len, g.layers, g.hidden, g.elem_bytes
    N = knobs.block.astype(float)
    ca = knobs.cpu_attention.astype(float)
    smax = P + G - 1  # positions the cache is allocated for
    w_total = L * (g.attn_weight_bytes + g.mlp_weight_bytes + g.extra_weight_bytes) * rw
    w_sub = max(g.attn_weight_bytes, g.mlp_weight_bytes + g.extra_weight_bytes)
    kv_total = N * smax * g.kv_token_bytes * L * rk
    act_prefill, act_decode = N * P * h * e, N * h * e
    const = np.zeros((R, len(MEMORY)))
    coef = np.zeros((R, len(MEMORY), 3, 3))
    for j, (act_home, act_buf) in enumerate(((act_prefill, 2 * b * P * h * e), (act_decode, 2 * b * h * e))):
        coef[:, j, W, GPU] = w_total
        coef[:, j, W, CPU] = coef[:, j, W, DISK] = 2 * w_sub * rw
        coef[:, j, KV, GPU] = kv_total
        coef[:, j, ACT, GPU] = act_home
        coef[:, j, ACT, CPU] = coef[:, j, ACT, DISK] = act_buf
    coef[:, 1, KV, CPU] = coef[:, 1, KV, DISK] = (1 - ca) * 2 * b * smax * g.kv_token_bytes * rk
    fp16_sub = knobs.compress_weights * w_sub
    const[:, 0] = _prefill_workspace(g, b, P) + fp16_sub
    const[:, 1] = _decode_workspace(g, b, smax) + fp16_sub + knobs.compress_kv * b * smax * g.kv_token_bytes
    coef[:, 2, W, CPU] = w_total
    coef[:, 2, KV, CPU] = kv_total
    coef[:, 2, ACT, CPU] = act_prefill
    const[:, 2] = ca * b * smax * g.kv_token_bytes * 2  # fp32 K and V of one GPU batch
    coef[:, 3, W, DISK] = w_total
    coef[:, 3, KV, DISK] = kv_total
    coef[:, 3, ACT, DISK] = act_prefill
    return const, coef
