"""Serving planner speed, on demand (not part of the test suite).

    .venv/bin/python benchmarks/bench_infer.py            # all cases, a markdown table on stdout

For each case: ``plan_inference`` wall time in-process (after imports; best of 3 runs), its CP-SAT status,
the (layout, batch) rows costed and the rows admissible, and the chosen plan. Targets (the inference
issue): ``infer`` ≤ 1 s for up to 64 GPUs, ``--pareto`` ≤ 5 s.
"""

from __future__ import annotations

import time

from shardplan.costmodel.serving.cost import InferWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.serving.explain import InferObjective
from shardplan.planner.serving.solve import InferRequest, plan_inference

CASES = [
    # name, model, system, GPUs, prompt, gen, extra request fields
    ("Llama-3.1-70B, 8 H100, throughput", "llama-3.1-70b", "dgx-h100", 8, 2048, 256, {}),
    ("Llama-3.1-70B, 8 H100, --max-batch", "llama-3.1-70b", "dgx-h100", 8, 2048, 256, {"max_batch": True}),
    ("Llama-3.1-70B, 8 H100, latency", "llama-3.1-70b", "dgx-h100", 8, 2048, 256,
     {"objective": InferObjective.LATENCY}),
    ("Llama-3.1-8B, 64 H100, TPOT ≤ 20 ms", "llama-3.1-8b", "dgx-h100", 64, 1024, 256, {"max_tpot_s": 0.02}),
    ("Llama-3.1-405B, 64 H100", "llama-3.1-405b", "dgx-h100", 64, 4096, 512, {}),
    ("DeepSeek-V3, 16 H200, TPOT ≤ 50 ms, TTFT ≤ 2 s", "deepseek-v3", "hgx-h200", 16, 4096, 512,
     {"max_tpot_s": 0.05, "max_ttft_s": 2.0}),
    ("DeepSeek-V3, 64 H200", "deepseek-v3", "hgx-h200", 64, 4096, 512, {}),
    ("Mixtral-8x22B, 64 H100", "mixtral-8x22b", "dgx-h100", 64, 2048, 512, {}),
    ("Llama-3.1-70B, 8 H100, --pareto", "llama-3.1-70b", "dgx-h100", 8, 2048, 256, {"pareto": True}),
    ("Llama-3.1-8B, 64 H100, --pareto", "llama-3.1-8b", "dgx-h100", 64, 1024, 256, {"pareto": True}),
    ("DeepSeek-V3, 64 H200, --pareto", "deepseek-v3", "hgx-h200", 64, 4096, 512, {"pareto": True}),
]


def main() -> None:
    print("| case | wall s | CP-SAT | rows | admissible | plan | tokens/s | TPOT ms | frontier |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for name, model, system, gpus, prompt, gen, extra in CASES:
        req = InferRequest(model=get_model(model), system=get_system(system), num_gpus=gpus,
                           workload=InferWorkload(prompt_len=prompt, gen_len=gen), **extra)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            plan = plan_inference(req)
            best = min(best, time.perf_counter() - t0)
        s = plan.solver
        if plan.plan is None:
            layout, tps, tpot = "infeasible", "-", "-"
        else:
            p = plan.plan
            layout = f"TP={p.tp} PP={p.pp} EP={p.ep} ×{p.replicas} batch {p.batch_size}"
            tps, tpot = f"{plan.metrics.tokens_per_s:,.0f}", f"{plan.metrics.tpot_s * 1e3:.1f}"
        print(f"| {name} | {best:.2f} | {s.status} | {s.candidates:,} | {s.feasible:,} | {layout} | {tps} | {tpot} "
              f"| {len(plan.pareto) or '-'} |")


if __name__ == "__main__":
    main()
