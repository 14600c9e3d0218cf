"""Training planner and cost-model speed, on demand (not part of the test suite).

    .venv/bin/python benchmarks/bench_train.py            # all cases, a markdown table on stdout

For each case of the training-planner issue: the planner's wall time (in-process, after imports, median of
``RUNS``; the load average is printed before and after), its
CP-SAT status, the candidate count, and a side-by-side with a brute-force enumerator that evaluates
every costed layout one at a time through ``estimate_training`` (timed on a sample of 200 layouts,
extrapolated), which is how a per-layout search such as Calculon's works. Then the cost model's own
speed: one evaluation of a 126-layer model, and the vectorised table builder's layouts per second.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.space import enumerate_layouts
from shardplan.costmodel.training.step import train_cost
from shardplan.costmodel.training.table import build_train_table
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.request import TrainRequest, space_request
from shardplan.planner.training.solve import plan_training

RUNS = 5  # timed runs per case; the median is reported

CASES = [
    # name, model, system, GPUs, global batch (None: choose ≤ max), seq, max batch
    ("GPT-3 175B, 1024 A100", "gpt3-175b", "dgx-a100-80gb", 1024, 1536, 2048, None),
    ("Turing-530B, 5128 A100, batch ≤ 2520", "turing-530b", "dgx-a100-80gb", 5128, None, 2048, 2520),
    ("Llama-3.1-70B, 256 H100", "llama-3.1-70b", "dgx-h100", 256, 1024, 8192, None),
    ("Llama-3.1-405B, 16384 H100", "llama-3.1-405b", "dgx-h100", 16384, 2048, 8192, None),
    ("DeepSeek-V3, 2048 H800 (EP)", "deepseek-v3", "dgx-h800", 2048, 4096, 4096, None),
    ("Qwen3-235B-A22B, 256 H100 (EP)", "qwen3-235b-a22b", "dgx-h100", 256, 2048, 4096, None),
    ("gpt-oss-120b, 64 H100 (EP, sliding layers)", "gpt-oss-120b", "dgx-h100", 64, 512, 4096, None),
    ("1T dense, 65536 A100", "gpt-1008b", "dgx-a100-80gb", 65536, 8192, 2048, None),
    ("1T dense, 131072 A100", "gpt-1008b", "dgx-a100-80gb", 131072, 16384, 2048, None),
]


def _request(model: str, system: str, gpus: int, batch: int | None, seq: int, max_batch: int | None) -> TrainRequest:
    return TrainRequest(model=get_model(model), system=get_system(system), num_gpus=gpus,
                        workload=TrainWorkload(seq_len=seq, global_batch=batch or max_batch or 1),
                        max_global_batch=max_batch, fixed_global_batch=batch is not None)


def bench_planner() -> list[str]:
    lines = ["| case | status | planner wall | table | CP-SAT | layouts | costed | brute force (est.) | ratio |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, *args in CASES:
        req = _request(*args)
        plan_training(req)  # warm caches (numpy, ortools import)
        walls = []
        for _ in range(RUNS):
            t = time.perf_counter()
            plan = plan_training(req)
            walls.append(time.perf_counter() - t)
        wall = statistics.median(walls)
        s = plan.solver
        # brute force: one estimate_training call per costed layout, timed on a sample
        space = enumerate_layouts(req.model, req.workload, space_request(req))
        table = build_train_table(req.model, req.system, req.workload, space.rows)
        rng = np.random.default_rng(0)
        sample = rng.choice(len(table), size=min(200, len(table)), replace=False)
        t = time.perf_counter()
        for i in sample:
            w = req.workload.model_copy(update={"global_batch": int(table.rows.gb[i])})
            estimate_training(req.model, req.system, req.num_gpus, w, table.rows.row(int(i)))
        per = (time.perf_counter() - t) / len(sample)
        brute = per * len(table)
        lines.append(f"| {name} | {s.status} | {wall:.3f} s | {s.build_s:.3f} s | {s.solve_s:.3f} s | "
                     f"{s.candidates:,} | {s.evaluated:,} | {brute:.1f} s | {brute / wall:.0f}× |")
    return lines


def bench_cost_model() -> list[str]:
    model, system = get_model("llama-3.1-405b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=8192, global_batch=2048)
    lay = TrainLayout(tp=8, pp=16, dp=128, interleave=7, recompute=Recompute.FULL, sequence_parallel=True,
                      zero_stage=1)
    estimate_training(model, system, 16384, work, lay)
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        estimate_training(model, system, 16384, work, lay)
    one = (time.perf_counter() - t) / n
    rows = LayoutArrays.from_layouts([lay] * 200_000, 2048)
    t = time.perf_counter()
    train_cost(model, system, work, rows)
    rate = len(rows) / (time.perf_counter() - t)
    return [f"- one `estimate_training` of Llama-3.1-405B (126 layers): {one * 1e3:.2f} ms",
            f"- vectorised `train_cost`: {rate:,.0f} layouts/s (200,000 rows in one call)"]


if __name__ == "__main__":
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("\n".join(bench_planner()))
    print(f"load average after the planner cases: {os.getloadavg()[0]:.2f}")
    print()
    print("\n".join(bench_cost_model()))
