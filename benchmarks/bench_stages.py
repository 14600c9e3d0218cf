"""Per-stage planning (issue 14): gain over ``--uniform-stages`` and solve time, on demand (not a test).

    .venv/bin/python benchmarks/bench_stages.py            # all cases, a markdown table on stdout

For each published case, ``plan_training`` twice with the pipeline depth pinned: with ``uniform_stages=True``
(today's even split) and with the per-stage search (the default). Reported: both step times (each the cost
model's evaluation of the returned plan), the gain, the chosen split and recompute counts, how the global
layouts were accounted for (solved per stage / bounded out / no pipeline), the per-stage search time and the
whole planning time (median of 5 runs, in-process after imports; the load average is printed), and the
statuses. Targets (the issue): ≤ 1 s up to 1,024 GPUs, ≤ 5 s for the large cases.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.solve import TrainRequest, plan_training

RUNS = 5  # timed runs per case; the median is reported

CASES: list[tuple[str, str, str, int, int, int, dict[str, Any]]] = [
    # name, model, system, GPUs, global batch, sequence, pins
    # Llama 3 paper (arXiv 2407.21783 §3.3.2): 16K H100, TP8 PP16, batch 2048 × 8192 (first/last stages lighter).
    ("Llama-3.1-405B, 16,384 H100, PP16", "llama-3.1-405b", "dgx-h100", 16384, 2048, 8192, {"pp": 16}),
    ("  memory-tight: seq 16,384", "llama-3.1-405b", "dgx-h100", 16384, 1024, 16384, {"pp": 16}),
    ("Llama-3.1-405B, 16,384 H100, all layouts", "llama-3.1-405b", "dgx-h100", 16384, 2048, 8192, {}),
    # Narayanan et al. 2021 Table 1: GPT-3 175B on 1,024 A100, batch 1536 × 2048.
    ("GPT-3 175B, 1,024 A100, PP8", "gpt3-175b", "dgx-a100-80gb", 1024, 1536, 2048, {"pp": 8}),
    ("GPT-3 175B, 1,024 A100, PP16", "gpt3-175b", "dgx-a100-80gb", 1024, 1536, 2048, {"pp": 16}),
    ("  memory-tight: 40 GB A100, PP8", "gpt3-175b", "dgx-a100-40gb", 1024, 1536, 2048, {"pp": 8}),
    # Smith et al. 2022 (MT-NLG): 2,240 A100 (280 DGX), TP8 PP35, batch 1920 × 2048.
    ("Turing-530B, 2,240 A100, PP35", "turing-530b", "dgx-a100-80gb", 2240, 1920, 2048, {"pp": 35}),
    ("  memory-tight: 560 A100", "turing-530b", "dgx-a100-80gb", 560, 1920, 2048, {"pp": 35}),
    # DeepSeek-V3 report (arXiv 2412.19437 §3.2): 2,048 H800, PP16, EP64, batch 15360 × 4096.
    ("DeepSeek-V3, 2,048 H800, PP16 EP64", "deepseek-v3", "dgx-h800", 2048, 15360, 4096, {"pp": 16, "ep": 64}),
    ("  memory-tight: 1,024 H800", "deepseek-v3", "dgx-h800", 1024, 15360, 4096, {"pp": 16, "ep": 64}),
    # The issue's largest case: a 1T dense GPT (Narayanan et al. 2021 Table 1's 1T shape) on 131,072 H100.
    ("1T dense GPT, 131,072 H100, all layouts", "gpt-1008b", "dgx-h100", 131072, 16384, 4096, {}),
]


def _runs(values: list[int]) -> str:
    out: list[str] = []
    for v in values:
        if out and out[-1].split("×")[0] == str(v):
            head, _, count = out[-1].partition("×")
            out[-1] = f"{head}×{int(count or 1) + 1}"
        else:
            out.append(str(v))
    return " ".join(out)


def _request(model: str, system: str, gpus: int, batch: int, seq: int, pins: dict[str, Any], *,
             uniform: bool) -> TrainRequest:
    return TrainRequest(model=get_model(model), system=get_system(system), num_gpus=gpus,
                        workload=TrainWorkload(seq_len=seq, global_batch=batch), uniform_stages=uniform, **pins)


def main() -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| case | uniform step s | per-stage step s | gain | layout | stage layers | recompute per stage | "
          "solved / bounded / no PP | per-stage s | plan s | status |")
    print("|---|---:|---:|---:|---|---|---|---|---:|---:|---|")
    for name, model, system, gpus, batch, seq, pins in CASES:
        uni = plan_training(_request(model, system, gpus, batch, seq, pins, uniform=True))
        times, stage_times, plan = [], [], None
        for _ in range(RUNS):
            t0 = time.perf_counter()
            plan = plan_training(_request(model, system, gpus, batch, seq, pins, uniform=False))
            times.append(time.perf_counter() - t0)
            stage_times.append(plan.solver.stage_search.solve_s if plan.solver.stage_search else 0.0)
        assert plan is not None
        if plan.plan is None or uni.plan is None or plan.metrics is None or uni.metrics is None:
            print(f"| {name} | {uni.status} | {plan.status} | | | | | | | | {plan.reason or ''} |")
            continue
        p, s = plan.plan, plan.solver.stage_search
        assert s is not None
        gain = 100 * (uni.metrics.step_time_s / plan.metrics.step_time_s - 1)
        layout = (f"TP{p.tp} PP{p.pp} DP{p.dp}" + (f" EP{p.ep}" if p.ep > 1 else "") + f" mb{p.microbatch_size}"
                  + (f" v{p.interleave}" if p.interleave > 1 else "") + f" {p.recompute} ZeRO{p.zero_stage}")
        rc = _runs(p.stage_recompute_layers) if p.stage_recompute_layers else "-"
        print(f"| {name} | {uni.metrics.step_time_s:.4g} | {plan.metrics.step_time_s:.4g} | {gain:+.1f}% | {layout} | "
              f"{_runs(p.stage_layers or [])} | {rc} | {s.solved} / {s.bounded} / {s.single_stage} | "
              f"{statistics.median(stage_times):.2f} | {statistics.median(times):.2f} | "
              f"{plan.status} |")


if __name__ == "__main__":
    main()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
