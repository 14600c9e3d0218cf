"""Serving planner speed, on demand (not part of the test suite).

    .venv/bin/python benchmarks/bench_infer.py            # all cases, a markdown table on stdout

For each case: ``plan_inference`` wall time in-process (after imports; median of 3 runs), its CP-SAT status,
the (layout, batch) rows costed and the rows admissible, and the chosen plan; then ``plan_disaggregated``.
Workloads take the vLLM engine's defaults on the GPU, as the CLI does (continuous batching at saturation).
Targets: ``infer`` ≤ 1 s for up to 64 GPUs, ``--pareto`` ≤ 5 s, ``--disaggregate`` ≤ 5 s.
"""

from __future__ import annotations

import statistics
import time

from shardplan.costmodel.serving.cost import InferWorkload
from shardplan.costmodel.serving.engines import engine_defaults
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.serving.disagg import plan_disaggregated
from shardplan.planner.serving.knobs import InferObjective
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
    ("Llama-3.1-8B, 131,072 H100, 1+1", "llama-3.1-8b", "dgx-h100", 131072, 1, 1, {}),
    ("Falcon-40B, 131,072 H100", "falcon-40b", "dgx-h100", 131072, 2048, 256, {}),
]
DISAGG = [
    ("Llama-3.1-70B, 8 H100, TTFT ≤ 1 s, TPOT ≤ 50 ms", "llama-3.1-70b", "dgx-h100", 8, 2048, 256,
     {"max_ttft_s": 1.0, "max_tpot_s": 0.05}),
    ("Llama-3.1-8B, 16 H100", "llama-3.1-8b", "dgx-h100", 16, 2048, 256, {}),
    ("Llama-3.1-70B, 64 H100, TPOT ≤ 40 ms", "llama-3.1-70b", "dgx-h100", 64, 4096, 512, {"max_tpot_s": 0.04}),
    ("Qwen3-30B-A3B, 8 H200", "qwen3-30b-a3b", "hgx-h200", 8, 1024, 1024, {}),
    ("DeepSeek-V3, 16 H200, TTFT ≤ 2 s, TPOT ≤ 50 ms", "deepseek-v3", "hgx-h200", 16, 4096, 512,
     {"max_ttft_s": 2.0, "max_tpot_s": 0.05}),
    ("DeepSeek-V3, 64 H200, TPOT ≤ 50 ms", "deepseek-v3", "hgx-h200", 64, 4096, 512, {"max_tpot_s": 0.05}),
    ("Mixtral-8x22B, 64 H100", "mixtral-8x22b", "dgx-h100", 64, 2048, 512, {}),
    ("Qwen3-235B-A22B, 72 GB200, TPOT ≤ 30 ms", "qwen3-235b-a22b", "gb200-nvl72", 72, 1024, 256, {"max_tpot_s": 0.03}),
]


def _request(model: str, system: str, gpus: int, prompt: int, gen: int, extra: dict) -> InferRequest:
    sysm = get_system(system)
    d = engine_defaults("vllm", sysm.gpu)
    work = InferWorkload(prompt_len=prompt, gen_len=gen, max_num_batched_tokens=d.max_num_batched_tokens,
                         max_num_seqs=d.max_num_seqs)
    return InferRequest(model=get_model(model), system=sysm, num_gpus=gpus, workload=work, **extra)


def _median_wall(fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(3):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    print("| case | wall s | CP-SAT | rows | admissible | plan | tokens/s | TPOT ms | frontier |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for name, model, system, gpus, prompt, gen, extra in CASES:
        req = _request(model, system, gpus, prompt, gen, extra)
        wall, plan = _median_wall(lambda req=req: plan_inference(req))
        s = plan.solver
        if plan.plan is None:
            layout, tps, tpot = "infeasible", "-", "-"
        else:
            p = plan.plan
            layout = f"TP={p.tp} PP={p.pp} EP={p.ep} ×{p.replicas} batch {p.batch_size}"
            tps, tpot = f"{plan.metrics.tokens_per_s:,.0f}", f"{plan.metrics.tpot_s * 1e3:.1f}"
        print(f"| {name} | {wall:.2f} | {s.status} | {s.candidates:,} | {s.feasible:,} | {layout} | {tps} | {tpot} "
              f"| {len(plan.pareto) or '-'} |")
    print()
    print("| --disaggregate case | wall s | prefill workers | decode workers | GPUs used | tokens/s per GPU "
          "| aggregated per GPU | winner |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    for name, model, system, gpus, prompt, gen, extra in DISAGG:
        req = _request(model, system, gpus, prompt, gen, extra)
        wall, res = _median_wall(lambda req=req: plan_disaggregated(req))
        agg = f"{res.aggregated.tokens_per_s_per_gpu:,.1f}" if res.aggregated else "-"
        if res.plan is None:
            print(f"| {name} | {wall:.2f} | infeasible | | | | {agg} | aggregated |")
            continue
        pf, dc, m = res.plan.prefill, res.plan.decode, res.metrics
        print(f"| {name} | {wall:.2f} | {pf.workers}× TP{pf.tp} PP{pf.pp} EP{pf.ep} batch {pf.batch_size} | "
              f"{dc.workers}× TP{dc.tp} PP{dc.pp} EP{dc.ep} batch {dc.batch_size} | {m.gpus_used} | "
              f"{m.tokens_per_s_per_gpu:,.1f} | {agg} | {res.winner} |")


if __name__ == "__main__":
    main()
