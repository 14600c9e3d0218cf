"""Kernel, step and memory measurements on one GPU, for comparison with shardplan's cost model.

Run on the device machine (PyTorch, CUDA): ``python3 benchmarks/gpu/measure.py OUTDIR``. Writes OUTDIR/measure.json
(every timing) and prints a short summary. Each part runs on its own and is skipped when the time budget
(``MEASURE_BUDGET_S``, default 330 s) is spent; a failing part records its error and the next one runs.

Parts (all timings are medians of CUDA-event-timed repeats, after warm-up, with the L2 flushed between repeats by
``triton.testing.do_bench``; inputs are random, never zeros):
  env      GPU, clocks, driver, library versions; an 8192³ bf16 GEMM.
  clocks   SM clock and power sampled by nvidia-smi while bf16 GEMMs run for ~6 s (the clock sustained at the
           power limit).
  gemm     dense GEMMs of the linear layers of Llama-3.1-8B and -70B at TP 1/2/4/8: forward x·Wᵀ, data gradient
           dy·W and weight gradient dyᵀ·x, at 4,096 and 8,192 tokens; decode-sized GEMMs (M = 1…512).
  grouped  routed-expert GEMMs (torch._grouped_mm) of five MoE models at several EP degrees, balanced routing,
           forward and forward+backward; and the same GEMMs as a loop of per-expert matmuls.
  attn     causal SDPA (flash and cuDNN backends), forward and forward+backward, head dim 64/128, seq 1k–32k.
  step     training steps of a Llama-3.1-8B-shaped model (16 layers) in eager PyTorch: step time, per-category
           kernel time from the profiler, static and peak memory, recompute none and full.
  phases   forward and backward apart under recompute none / full / mlp / norm (``phase_parts``), same weights,
           modes alternated repeat by repeat; memory held after the forward; kernel time of each phase.
  titan    torchtitan's Llama block (separate projections, composite RMSNorm, complex rotary) under no AC, full AC
           and its per-op selective AC (``titan_parts``): forward, backward, memory held after the forward.
  fp8grid  per-tensor-scaled FP8 GEMMs (fast and split accumulation) beside bf16 over OpenXLA's (M, N, K) grid
           (``fp8_parts``), and five large shapes for the best-shape rate.
  fp8shapes the same three GEMMs at the shapes of ``gemm`` (forward, data and weight gradient) and per-expert GEMMs
           of five MoE models.
  fp8decode decode-sized GEMMs (M = 1…128) of the same linear layers: bf16, per-tensor and row-wise scaled FP8.
  castchain the small kernels of a current-scaling FP8 quantization (amax, scale, cast), each run back to back from a
           CUDA graph and eagerly: the GPU time per kernel, and the host's.
  moe      four MoE blocks of Qwen3-30B-A3B's shape, forward+backward, with and without the host copy of the
           per-expert token counts: wall time against GPU-busy time (the host time the sync exposes); and the
           host time one eager op costs.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time
import traceback

import torch
from device_common import BF16, DEV, T0, bench, left, rnd, smi
from fp8_parts import part_castchain, part_fp8decode, part_fp8grid, part_fp8shapes
from kernel_parts import part_attn, part_gather, part_gemm, part_grouped, part_membw, part_optim, part_streams
from phase_parts import part_phases, part_phases_compiled
from step_parts import part_compiled, part_mbsweep, part_moe, part_step, part_tp8rank
from titan_parts import part_titan

RESULTS: dict[str, object] = {}


# ---------------------------------------------------------------------------------------------------------- env
def part_env() -> dict:
    p = torch.cuda.get_device_properties(0)
    a, b = rnd(8192, 8192), rnd(8192, 8192)
    t = bench(torch.matmul, a, b, warm_ms=20, rep_ms=200)
    fp8: dict[str, object] = {}
    try:
        for n in (4096, 8192):
            a8 = rnd(n, n).to(torch.float8_e4m3fn)
            b8 = rnd(n, n).to(torch.float8_e4m3fn).t()  # column-major second operand
            one = torch.ones((), device=DEV)
            t8 = bench(functools.partial(torch._scaled_mm, out_dtype=BF16), a8, b8, one, one, warm_ms=20, rep_ms=200)
            fp8[str(n)] = {"s": t8, "tflops": 2 * n**3 / t8 / 1e12}
    except Exception as ex:
        fp8["error"] = repr(ex)[:300]
    return {"fp8": fp8, "name": p.name, "sm_count": p.multi_processor_count, "memory_bytes": p.total_memory,
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "smi": smi("name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,power.max_limit,clocks.sm"),
            "gemm_8192_s": t, "gemm_8192_tflops": 2 * 8192**3 / t / 1e12}


def part_clocks() -> dict:
    a, b = rnd(8192, 8192), rnd(8192, 8192)
    proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu",
                             "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=subprocess.PIPE, text=True)
    end = time.time() + 6.0
    n = 0
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev0.record()
    while time.time() < end:
        for _ in range(20):
            a @ b
        n += 20
        torch.cuda.synchronize()
    ev1.record()
    torch.cuda.synchronize()
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    rows = [r.split(", ") for r in out.strip().splitlines() if r.count(",") >= 4]
    secs = ev0.elapsed_time(ev1) * 1e-3
    return {"reasons_after": smi("clocks_event_reasons.active,clocks.sm,power.draw"), "gemms": n, "seconds": secs,
            "tflops": 2 * 8192**3 * n / secs / 1e12, "samples": rows}


# ---------------------------------------------------------------------------------------------------------- main
def main() -> None:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")
    parts = {"env": part_env, "clocks": part_clocks, "gemm": part_gemm, "attn": part_attn, "grouped": part_grouped,
             "streams": part_streams, "optim": part_optim, "membw": part_membw, "gather": part_gather,
             "step": part_step, "compiled": part_compiled, "mbsweep": part_mbsweep, "tp8rank": part_tp8rank,
             "moe": part_moe, "phases": part_phases, "titan": part_titan,
             "phases_compiled": part_phases_compiled, "fp8grid": part_fp8grid, "fp8shapes": part_fp8shapes,
             "fp8decode": part_fp8decode, "castchain": part_castchain}
    only = os.environ.get("MEASURE_PARTS")
    for name, fn in parts.items():
        if only and name not in only.split(","):
            continue
        if left() < 20:
            RESULTS[name] = {"skipped": "time budget"}
            continue
        t = time.time()
        try:
            RESULTS[name] = fn()
        except Exception:
            RESULTS[name] = {"error": traceback.format_exc()[-1500:]}
        print(f"[{time.time() - T0:6.1f}s] {name} done in {time.time() - t:.1f}s", flush=True)
        with open(os.path.join(out_dir, "measure.json"), "w") as fh:
            json.dump(RESULTS, fh, indent=1, default=str)
    env = RESULTS.get("env", {})
    if isinstance(env, dict) and "gemm_8192_tflops" in env:
        print(f"{env['name']} SMs {env['sm_count']} torch {env['torch']} 8192^3 bf16 {env['gemm_8192_tflops']:.0f} "
              f"TFLOP/s")
    steps = [r for part in ("step", "compiled", "mbsweep", "tp8rank") if isinstance(RESULTS.get(part), list)
             for r in RESULTS[part]]
    for r in steps:
        if "step_s" in r:
            cats = {k: round(v * 1e3, 1) for k, v in r.get("kernel_s_by_category", {}).items()}
            print(f"step L{r['layers']} s{r['seq']} mb{r['microbatch']}x{r['accum']} {r['recompute']} "
                  f"compiled={r['compiled']}: "
                  f"{r['step_s']*1e3:.1f} ms, after fwd {r['after_forward_bytes']/2**30:.2f} GiB, "
                  f"peak {r['peak_bytes']/2**30:.1f} GiB, act {r['activation_peak_bytes']/2**30:.1f} GiB, {cats}")
    moe = RESULTS.get("moe")
    if isinstance(moe, dict):
        print("moe", json.dumps(moe)[:600])
    for k, v in RESULTS.items():
        if isinstance(v, dict) and "error" in v:
            print("ERROR", k, v["error"][-600:])
    print(f"total {time.time() - T0:.1f}s", math.nan if not RESULTS else len(RESULTS))


if __name__ == "__main__":
    main()
