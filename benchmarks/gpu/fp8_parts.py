"""FP8 GEMM parts of ``measure.py``: per-tensor-scaled FP8 GEMMs (``torch._scaled_mm``: cuBLASLt, the library
Transformer Engine's Hopper GEMMs call) over OpenXLA's (M, N, K) grid and over the linear layers and expert GEMMs
the cost model prices, each beside the bf16 GEMM of the same shape.

Every GEMM is TN, the only FP8 layout Hopper's tensor cores take: A is M×K row-major, B is N×K row-major passed
transposed. Two FP8 accumulation modes, as Transformer Engine sets them (TransformerEngine@d0067d0
``transformer_engine/pytorch/module/base.py`` l.83-85 and ``common/recipe/__init__.py`` l.307-309): the forward
GEMM with fast accumulation (``use_split_accumulator=False``), the data- and weight-gradient GEMMs with split
accumulation (``True``, i.e. ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` = 0, ``common/gemm/cublaslt_gemm.cu`` l.478;
``torch._scaled_mm(use_fast_accum=False)`` sets the same attribute). All operands are e4m3 (TE's HYBRID format
takes e5m2 for gradients; the tensor-core rate is the same).
"""

from __future__ import annotations

import functools
import importlib.util

import torch
from device_common import BF16, DEV, bench, left, rnd
from kernel_parts import MOE, linear_shapes

E4M3 = torch.float8_e4m3fn
GRID = (256, 512, 1024, 2048, 4096)  # OpenXLA's matmul_interpolator grid (hardware/gemm_data.py)
WARM_MS, REP_MS = 5, 25


def operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 A (M×K) and B (N×K), and their e4m3 copies."""
    a, b = rnd(m, k), rnd(n, k)
    return a, b, a.to(E4M3), b.to(E4M3)


def timings(m: int, n: int, k: int, out_fp32: bool = False) -> dict[str, float]:
    """Median seconds of the bf16 GEMM and the FP8 GEMM with fast and with split accumulation, timed one
    after the other so the three share the GPU's thermal state."""
    a, b, a8, b8 = operands(m, n, k)
    one = torch.ones((), device=DEV)
    out = torch.float32 if out_fp32 else BF16
    mm8 = functools.partial(torch._scaled_mm, a8, b8.t(), one, one, out_dtype=out)
    return {"bf16_s": bench(lambda: a @ b.t(), warm_ms=WARM_MS, rep_ms=REP_MS),
            "fp8_fast_s": bench(lambda: mm8(use_fast_accum=True), warm_ms=WARM_MS, rep_ms=REP_MS),
            "fp8_split_s": bench(lambda: mm8(use_fast_accum=False), warm_ms=WARM_MS, rep_ms=REP_MS)}


def grid_cells() -> list[tuple[int, int, int, int]]:
    """(b, M, N, K) of the grid the cost model reads: b = 1 at every cell; b = 2 and 4 (an output b times 4096² in
    area, measured as one GEMM b times longer along the 4096 side) on the M = 4096 row and the N = 4096 column, the
    only cells with b > 1 a query reaches (``gemm_shape.table_fraction`` reads b > 1 only for M or N above 4096)."""
    cells = [(1, m, n, k) for m in GRID for n in GRID for k in GRID]
    for b in (2, 4):
        cells += [(b, m, n, k) for m in GRID for n in GRID for k in GRID if m == 4096 or n == 4096]
    return cells


def part_fp8grid() -> dict:
    out: dict[str, object] = {"libs": {x: importlib.util.find_spec(x) is not None for x in
                                       ("transformer_engine", "mamba_ssm", "flash_attn", "causal_conv1d", "torchao")}}
    best = []
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (12288, 12288, 12288), (16384, 8192, 8192),
                    (8192, 16384, 16384)):
        best.append({"m": m, "n": n, "k": k, **timings(m, n, k)})
    out["best"] = best
    rows = []
    for b, m, n, k in grid_cells():
        if left() < 30:
            out["stopped"] = "time budget"
            break
        mm, nn = (m * b, n) if m == 4096 else (m, n * b)
        rows.append({"b": b, "m": m, "n": n, "k": k, "gemm_m": mm, "gemm_n": nn, **timings(mm, nn, k)})
    out["cells"] = rows
    return out


def part_fp8shapes() -> list[dict]:
    """The dense shapes of ``part_gemm`` (Llama-3.1-8B/-70B linear layers at TP 1-8, 4,096 and 8,192 tokens: forward,
    data gradient, weight gradient with an fp32 output as Megatron accumulates into ``main_grad``), and per-expert
    GEMMs of five MoE models at 256-2,048 rows per expert (Transformer Engine's per-expert cuBLAS GEMMs on Hopper)."""
    rows = []
    for name, k, n in linear_shapes():
        for m in (4096, 8192):
            if left() < 20:
                return rows
            rows.append({"name": name, "pass": "fwd", "m": m, "n": n, "k": k, **timings(m, n, k)})
            rows.append({"name": name, "pass": "dgrad", "m": m, "n": k, "k": n, **timings(m, k, n)})
            rows.append({"name": name, "pass": "wgrad", "m": n, "n": k, "k": m, **timings(n, k, m, out_fp32=True)})
    for model, (h, f, _, _) in MOE.items():
        for fc, (k, n) in (("fc1", (h, 2 * f)), ("fc2", (f, h))):
            for per in (256, 512, 1024, 2048):
                if left() < 20:
                    return rows
                rows.append({"name": f"{model}.{fc}", "pass": "expert_fwd", "m": per, "n": n, "k": k,
                             **timings(per, n, k)})
    return rows


def decode_row(name: str, m: int, n: int, k: int, w: torch.Tensor, w8: torch.Tensor) -> dict:
    """One decode GEMM (``m`` rows against the N×K weight): bf16, per-tensor FP8 (cuBLASLt), row-wise FP8 (CUTLASS)."""
    one = torch.ones((), device=DEV)
    x = rnd(m, k)
    x8, sx, sw = x.to(E4M3), torch.ones((m, 1), device=DEV), torch.ones((1, n), device=DEV)
    row: dict[str, object] = {"name": name, "m": m, "n": n, "k": k,
                              "bf16_s": bench(lambda: x @ w.t(), warm_ms=WARM_MS, rep_ms=REP_MS)}
    for key, sa, sb in (("fp8_tensor_s", one, one), ("fp8_rowwise_s", sx, sw)):
        try:
            row[key] = bench(lambda a=sa, b=sb: torch._scaled_mm(x8, w8.t(), a, b, out_dtype=BF16, use_fast_accum=True),
                             warm_ms=WARM_MS, rep_ms=REP_MS)
        except Exception as ex:
            row[key.replace("_s", "_error")] = repr(ex)[:200]
    return row


def part_fp8decode() -> list[dict]:
    """Decode-sized GEMMs (M = 1…128 rows against a layer's whole weight) of the Llama-3.1-8B and -70B linear layers at
    TP 1-8: bf16, FP8 with a per-tensor scale (cuBLASLt) and FP8 with row-wise scales (torch's CUTLASS kernel), the
    weight-streaming regime serving prices."""
    rows = []
    for name, k, n in linear_shapes():
        w = rnd(n, k)
        w8 = w.to(E4M3)
        for m in (1, 8, 32, 128):
            if left() < 15:
                return rows
            rows.append(decode_row(name, m, n, k, w, w8))
    return rows


def chain_time(fn, reps: int = 20) -> tuple[float, float]:
    """Seconds per call of ``fn`` run ``reps`` times back to back: replayed from a CUDA graph (the GPU's own time
    per call, with the host out of the way) and issued eagerly (what the host's launches allow); medians of 5."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    out = []
    for launch in (g.replay, lambda: [fn() for _ in range(reps)]):
        times = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record()
            launch()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) * 1e-3 / reps)
        out.append(sorted(times)[2])
    return out[0], out[1]


def part_castchain() -> list[dict]:
    """The kernels of one current-scaling FP8 quantization, as Transformer Engine runs it per expert in a grouped
    linear layer (amax, scale from amax, cast): each primitive back to back, for expert inputs of 128-4,096 rows of
    2,048 (Qwen3-30B-A3B's hidden size)."""
    rows = []
    inf = float("inf")
    for r in (128, 256, 512, 1024, 2048, 4096):
        if left() < 15:
            return rows
        x = rnd(r, 2048)
        amax = torch.linalg.vector_norm(x, inf)
        scale, fp8_max = torch.empty_like(amax), torch.full_like(amax, 448.0)
        y = torch.empty(r, 2048, device=DEV, dtype=E4M3)
        yt = torch.empty(2048, r, device=DEV, dtype=E4M3)
        prims = {"amax": lambda x=x, a=amax: torch.linalg.vector_norm(x, inf, out=a),
                 "scale": lambda a=amax, s=scale, c=fp8_max: torch.div(c, a, out=s),
                 "cast": lambda x=x, y=y: y.copy_(x),
                 "cast_transpose": lambda x=x, yt=yt: yt.copy_(x.t())}
        row: dict[str, object] = {"rows": r, "cols": 2048}
        for name, fn in prims.items():
            try:
                row[f"{name}_graph_s"], row[f"{name}_eager_s"] = chain_time(fn)
            except Exception as ex:
                row[f"{name}_error"] = repr(ex)[:200]
        rows.append(row)
    return rows
