"""How a GEMM's (M, N) shape fills the GPU: tile and wave quantisation over the SM count.

A GEMM's output is cut into CTA tiles of ``Tm×Tn`` (padded at the edges: tile quantisation) and the tiles run in
waves of one tile per SM; the last wave runs as long as a full one however few tiles it holds (wave quantisation).
NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001, Feb 2023) §3.1-3.2. The useful fraction of
the SM-tile slots a GEMM occupies is ``M·N / (⌈tiles / SMs⌉ · SMs · Tm·Tn)``; cuBLAS's heuristics pick a tile per
shape, so a GEMM gets the best of the documented large tiles (§2.3: 256×128 and 128×256 are the most efficient,
then 128×128). K does not enter: every tile steps through the same K.

A grouped expert GEMM (one persistent kernel over the GPU's local experts, e.g. Transformer Engine / Megatron
``GroupedMLP``, vLLM ``fused_moe``) sums the tiles of its experts into one wave schedule: each expert's
``M/experts`` rows are tiled on their own (tile quantisation per expert), the waves are shared. Transformer Engine's
``GroupedLinear`` (Megatron-Core's default MoE path on Hopper) instead issues one cuBLAS GEMM per expert over a few
streams (``nvte_multi_stream_cublas_gemm``), so by default (``GROUPED_SHARES_WAVES = False``) each expert GEMM keeps
its own waves, as the FLOPs curve (read at one expert's FLOPs) already assumes.

``shape_factor`` turns this into a correction of the FLOPs-keyed efficiency curve, which was fitted to GEMMs of many
shapes: the curve is read as the efficiency of a GEMM of those FLOPs at the *expected* fill of its output size
(``M·N`` outputs whose last wave is, on average over tile counts, as full as chance makes it), and the factor is
this GEMM's fill over that expectation. A GEMM whose last wave is mostly empty, or whose M or N is far from a tile
multiple, is slower than the curve; one whose tiles fill whole waves is faster; averaged over shapes the curve
holds, and its FLOPs dependence (small GEMMs under-fill the GPU on average) is kept.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from shardplan.hardware.gemm_data import GEMM_TABLE_BATCHES, GEMM_TABLE_DIMS, GEMM_TABLE_MAMF, GEMM_TABLES
from shardplan.hardware.spec import GpuSpec

# CTA output tiles (M × N) of cuBLAS's large-GEMM kernels, NVIDIA DU-09799-001 §2.3 "Typical Tile Dimensions In
# cuBLAS And Performance" (256×128 and 128×256 most efficient, 128×128 next; smaller tiles trade efficiency for
# parallelism and are not taken: no relative efficiency for them is published there).
GEMM_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))
# One persistent grouped kernel (experts share waves) rather than one GEMM per expert. Off: Megatron-Core on Hopper
# runs TE's per-expert GEMMs, and with sharing on the H100 MoE records of ``shardplan validate`` (already predicted
# too fast) moved 5-9 points further from measurement.
GROUPED_SHARES_WAVES = False


def slot_fill(sm_count: int, m: np.ndarray | float, n: np.ndarray | float,
              experts: np.ndarray | float = 1.0) -> np.ndarray:
    """Useful fraction of the (SM × wave) tile slots a GEMM of ``m`` rows (all experts together) and ``n``
    columns occupies, best over ``GEMM_TILES``: tile quantisation × wave quantisation."""
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    e = np.maximum(np.asarray(experts, dtype=float), 1.0)
    rows = np.maximum(m / e, 1.0)
    best = np.zeros(np.broadcast(m, n, e).shape)
    for tm, tn in GEMM_TILES:
        tiles = np.ceil(e * np.ceil(rows / tm) * np.ceil(n / tn))
        slots = np.ceil(tiles / sm_count) * sm_count * tm * tn
        best = np.maximum(best, e * rows * n / slots)
    return best


def expected_fill(waves: np.ndarray | float) -> np.ndarray:
    """Mean slot fill ``x / ⌈x⌉`` of GEMMs whose tile count, in waves, lies within half a wave of ``waves``: the
    fill a GEMM of about that size has when its exact shape is not known (below half a wave, ``waves`` itself: one
    partial wave, fill = tiles / SMs)."""
    w = np.maximum(np.asarray(waves, dtype=float), 0.0)
    a, b = np.maximum(w - 0.5, 0.0), w + 0.5
    k = np.maximum(np.ceil(a), 1.0)  # the window starts in wave k: x ∈ (k-1, k] runs at fill x / k
    one = (b * b - a * a) / (2.0 * k)  # the window inside wave k only
    two = (k * k - a * a) / (2.0 * k) + (b * b - k * k) / (2.0 * (k + 1.0))  # it spills into wave k + 1
    return np.where(w < 0.5, w, np.where(b <= k, one, two))


def reference_fill(sm_count: int, m: np.ndarray | float, n: np.ndarray | float) -> np.ndarray:
    """Slot fill the efficiency curve stands for at this GEMM's size: the expected fill (``expected_fill``) of
    ``m·n`` outputs in the smallest tile of ``GEMM_TILES`` (the most waves, cuBLAS's best case), the exact tile count
    unknown and no edge padding: the curve is fitted to GEMMs of many shapes, so it holds their mean fill."""
    tm, tn = GEMM_TILES[-1]
    cells = np.maximum(np.asarray(m, dtype=float), 1.0) * np.maximum(np.asarray(n, dtype=float), 1.0)
    return expected_fill(cells / (tm * tn * sm_count))


def shape_factor(sm_count: int | None, m: np.ndarray | float | None, n: np.ndarray | float | None,
                 experts: np.ndarray | float = 1.0) -> np.ndarray | float:
    """This GEMM's slot fill over the expected fill of its size (1 where the GPU's SM count or the shape is
    unknown): the wave-count luck and edge padding of this exact shape, neutral on average over shapes. ``m`` is
    the rows of all ``experts`` together."""
    if sm_count is None or m is None or n is None:
        return 1.0
    e = np.maximum(np.asarray(experts, dtype=float), 1.0)
    rows = np.asarray(m, dtype=float) / e
    if GROUPED_SHARES_WAVES:
        return slot_fill(sm_count, m, n, e) / reference_fill(sm_count, m, n)
    return slot_fill(sm_count, rows, n) / reference_fill(sm_count, rows, n)


# --- measured GEMM grids (hardware/gemm_data.py) -------------------------------------------------------------------
_DIMS = np.asarray(GEMM_TABLE_DIMS, dtype=float)
_BATCHES = np.asarray(GEMM_TABLE_BATCHES, dtype=float)


@cache
def _grid(name: str) -> np.ndarray:
    """TFLOP/s of table ``name`` as an array [batch, M, N, K] over the table's grid, each cell's kernel time made
    non-decreasing in K (a few measured cells run a longer K faster, e.g. H100 256×256: 31.9 TFLOP/s at K = 2048,
    90.9 at 4096 — another kernel; more work never takes less time, so such a cell keeps the shorter K's time)."""
    t = GEMM_TABLES[name]
    rate = np.asarray([[[t[b][(m, n)] for n in GEMM_TABLE_DIMS] for m in GEMM_TABLE_DIMS] for b in GEMM_TABLE_BATCHES],
                      dtype=float)
    work = _BATCHES[:, None, None, None] * _DIMS[None, :, None, None] * _DIMS[None, None, :, None] * _DIMS
    time = np.maximum.accumulate(work / rate, axis=-1)
    return work / time


def _cell(x: np.ndarray, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower grid index and the weight of the upper one, linear in log2 along ``axis`` (``x`` inside its range)."""
    u = np.log2(x) - np.log2(axis[0])
    i = np.clip(np.floor(u), 0, len(axis) - 2).astype(int)
    return i, np.clip(u - i, 0.0, 1.0)


# Each GPU family's grid for a datatype measured apart from its bf16 grid (hardware/gemm_data.py): Blackwell's fp8
# from OpenXLA (per-tensor and block-scaled FP8 alike); Hopper's fp8 from an H200, with fast accumulation (Transformer
# Engine's forward GEMM) and split accumulation (its data- and weight-gradient GEMMs; gemm_data_fp8.py).
DTYPE_GRIDS: dict[tuple[str, str], tuple[str, str]] = {
    ("xla-sm100", "fp8"): ("xla-sm100-fp8", "xla-sm100-fp8"),
    ("xla-sm90", "fp8"): ("h200-fp8-fast", "h200-fp8-split"),
}


# Grids built as a bf16 grid's cells times a gain measured over bf16 at each cell (gemm_data_fp8.py), and that bf16
# grid: on every GPU that reads one, the datatype's rate is the bf16 grid's times the measured gain.
GAIN_GRIDS: dict[str, str] = {"h200-fp8-fast": "xla-sm90", "h200-fp8-split": "xla-sm90"}


def dtype_grid(name: str, dtype: str, *, split_accumulate: bool = False) -> str:
    """The measured grid a ``dtype`` GEMM reads on a GPU whose bf16 grid is ``name``: that datatype's own grid where
    one was measured (``DTYPE_GRIDS``; ``split_accumulate``: the gradient GEMMs' accumulation mode, which only
    Hopper's fp8 grids tell apart), else the bf16 grid, read as a fraction of the datatype's own best-shape rate."""
    own = DTYPE_GRIDS.get((name, dtype))
    return name if own is None else own[int(split_accumulate)]


def table_fraction(name: str, m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float) -> np.ndarray:
    """Fraction of the best-shape matmul rate (``GEMM_TABLE_MAMF``) an (M×K)·(K×N) GEMM reaches in the measured
    grid ``name``, never above 1.

    Inside the grid: linear in log2 of M, N (and of the batch) between measured points. Along K a kernel's time is
    a fixed prologue/epilogue plus a main loop proportional to K (most of the grid's cells are straight lines in K
    within a few percent; a sixth deviate, by up to a quarter), so time is interpolated linearly in K between grid
    points and extended along the last segment beyond K = 4096, never faster per unit K than the best-shape rate;
    below K = 256 the time stays that of K = 256. An output larger than 4096×4096 runs more
    tiles: read as the grid's batched rows (b = M·N / (4096·4096) independent 4096² outputs, up to 4). Below 256
    rows or columns the math runs at the 256 row's rate (kernels with smaller tiles; such GEMMs are bound by their
    weight read, which the memory roofline prices)."""
    m, n, k = (np.fmax(x, 1.0) for x in np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (m, n, k))))
    shape = m.shape
    # A table of many layouts repeats a few GEMM shapes: read each distinct (M, N, K) once.
    m, n, k = m.ravel(), n.ravel(), k.ravel()
    order = np.lexsort((k, n, m))
    ms, ns, ks = m[order], n[order], k[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = (np.diff(ms) != 0) | (np.diff(ns) != 0) | (np.diff(ks) != 0)
    out = np.empty(order.size)
    out[order] = _read_cached(name, ms[first], ns[first], ks[first])[np.cumsum(first) - 1]
    return out.reshape(shape)


# Fractions already read, by (table, M, N, K): the planner prices the same few GEMM shapes in every pass over its
# tables, and a vectorised read of a few shapes costs ~40 array operations. Calls with more distinct shapes than
# ``_CACHE_CALL_MAX`` read directly (the dictionary is slower there); the cache is emptied when it would pass
# ``_CACHE_MAX`` entries.
_CACHE: dict[tuple[str, float, float, float], float] = {}
_CACHE_MAX = 1 << 16
_CACHE_CALL_MAX = 256


def _read_cached(name: str, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``_read`` of distinct shapes, through ``_CACHE`` (the same floats: each shape's read is elementwise)."""
    if m.size > _CACHE_CALL_MAX:
        return _read(name, m, n, k)
    keys = [(name, a, b, c) for a, b, c in zip(m.tolist(), n.tolist(), k.tolist(), strict=True)]
    vals = [_CACHE.get(key) for key in keys]
    missing = [i for i, v in enumerate(vals) if v is None]
    if missing:
        idx = np.asarray(missing)
        if len(_CACHE) + len(missing) > _CACHE_MAX:
            _CACHE.clear()
        for i, v in zip(missing, _read(name, m[idx], n[idx], k[idx]).tolist(), strict=True):
            vals[i] = _CACHE[keys[i]] = v
    return np.asarray(vals, dtype=float)


def _read(name: str, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``table_fraction`` for 1-D arrays of shapes."""
    lo, hi = _DIMS[0], _DIMS[-1]
    mc, nc = np.clip(m, lo, hi), np.clip(n, lo, hi)
    b = np.clip(np.maximum(m, lo) * np.maximum(n, lo) / (mc * nc), _BATCHES[0], _BATCHES[-1])
    (ib, wb), (im, wm), (jn, wn) = _cell(b, _BATCHES), _cell(mc, _DIMS), _cell(nc, _DIMS)
    seg = np.clip(np.searchsorted(_DIMS, k) - 1, 0, len(_DIMS) - 2)
    k_eff = np.maximum(k, lo)
    k0, k1 = _DIMS[seg], _DIMS[seg + 1]
    grid, best = _grid(name), GEMM_TABLE_MAMF[name]
    rate = np.zeros(m.shape)
    for db in (0, 1):
        for dm in (0, 1):
            for dn in (0, 1):
                i, j, q = ib + db, im + dm, jn + dn
                work = 2.0 * _BATCHES[i] * _DIMS[j] * _DIMS[q]  # FLOPs per unit K
                t0 = work * k0 / grid[i, j, q, seg]  # kernel time (TFLOP units) at the grid K's either side
                t1 = work * k1 / grid[i, j, q, seg + 1]
                slope = (t1 - t0) / (k1 - k0)
                t_k = np.where(k_eff <= k1, t0 + (k_eff - k0) * slope,
                               t1 + (k_eff - k1) * np.maximum(slope, work / best))
                w = (wb if db else 1 - wb) * (wm if dm else 1 - wm) * (wn if dn else 1 - wn)
                rate = rate + w * work * k_eff / t_k
    return np.clip(rate * (k / k_eff) / best, 1e-6, 1.0)


def dtype_gemm_ratio(gpu: GpuSpec, dtype: str) -> float:
    """How a datatype's best achievable GEMM fraction of its own peak compares with bf16's (measured per GPU:
    H100 fp8 0.709 vs bf16 0.803 → 0.88); 1 where either is unmeasured."""
    frac = gpu.matmul_peak_fraction
    if dtype in frac and "bf16" in frac and dtype != "bf16":
        return frac[dtype] / frac["bf16"]
    return 1.0


def grid_fraction(gpu: GpuSpec, dtype: str, m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float, *,
                  split_accumulate: bool = False) -> np.ndarray:
    """A GEMM's fraction of the plateau from the GPU's measured grid for ``dtype`` (``dtype_grid``;
    ``split_accumulate``: a gradient GEMM under an fp8 recipe). A grid of measured gains over bf16 (``GAIN_GRIDS``)
    prices the datatype at the bf16 grid's rate times that gain on every GPU that reads it, in place of the GPU's own
    best-shape ratio (``dtype_gemm_ratio``, which ``kernels.compute_time`` applies): the H200 the Hopper fp8 gains were
    measured on keeps them although its catalog fp8 fraction (0.734) is not the H100's (0.709)."""
    grid = dtype_grid(gpu.gemm_shape_table, dtype, split_accumulate=split_accumulate)
    frac = table_fraction(grid, m, n, k)
    base = GAIN_GRIDS.get(grid)
    if base is None:
        return frac
    gain_ratio = GEMM_TABLE_MAMF[grid] * gpu.peak("bf16") / (GEMM_TABLE_MAMF[base] * gpu.peak(dtype))
    return frac * gain_ratio / dtype_gemm_ratio(gpu, dtype)
