"""Offload planner and cost-model speed and accuracy, on demand (not part of the test suite).

    .venv/bin/python benchmarks/bench_offload.py            # markdown tables on stdout

1. `plan_offload` wall time (in-process, after imports; median of 3) for the issue's commands, with the
   CP-SAT status and how many knob rows were enumerated, bounded out and solved. Target: OPT-175B on
   gcp-t4 ≤ 2 s (FlexGen's LP policy search takes 11–27 s on this machine).
2. Accuracy on every record of validation/offload.json, next to FlexGen's own cost model
   (FMInference/FlexGen@19753bc0 experimental/cost_model.py, re-implemented below with its fitted T4
   constants) for the same policies.
3. One `estimate_offload` call.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from shardplan.costmodel.offload.evaluate import estimate_offload
from shardplan.costmodel.offload.policy import (
    OffloadObjective,
    OffloadPolicy,
    OffloadWorkload,
    Placement,
    default_capacities,
)
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.offload.solve import OffloadRequest, plan_offload
from shardplan.units import GiB

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    # label, model, system, prompt, gen, extra request fields
    ("OPT-175B, gcp-t4, 512+32", "opt-175b", "gcp-t4", 512, 32, {}),
    ("OPT-175B, gcp-t4, 512+32, --allow-compression", "opt-175b", "gcp-t4", 512, 32, {"allow_compression": True}),
    ("OPT-30B, gcp-t4, 512+32", "opt-30b", "gcp-t4", 512, 32, {}),
    ("OPT-6.7B, gcp-t4, 512+32", "opt-6.7b", "gcp-t4", 512, 32, {}),
    ("Llama-2-70B, a6000-ws, 512+32, --cpu-mem 200GiB", "llama-2-70b", "a6000-ws", 512, 32, {"cpu_mem": 200 * GiB}),
    ("Mixtral-8x7B, rtx4090-pc, 1024+128, latency", "mixtral-8x7b", "rtx4090-pc", 1024, 128,
     {"objective": OffloadObjective.LATENCY}),
    ("Mixtral-8x7B, rtx4090-pc, 1024+128, throughput", "mixtral-8x7b", "rtx4090-pc", 1024, 128, {}),
]


def _request(model: str, system: str, prompt: int, gen: int, extra: dict) -> OffloadRequest:
    s = get_system(system)
    extra = dict(extra)
    caps = default_capacities(s, cpu_mem=extra.pop("cpu_mem", None))
    return OffloadRequest(model=get_model(model), system=s, workload=OffloadWorkload(prompt_len=prompt, gen_len=gen),
                          capacities=caps, **extra)


def bench_planner() -> list[str]:
    lines = ["| case | status | wall (median of 3) | rows | cannot fit | bounded out | CP-SAT solves | plan "
             "| tokens/s |", "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for label, *args in CASES:
        req = _request(*args)
        plan_offload(req)  # warm up imports and caches
        walls, plan = [], None
        for _ in range(3):
            t = time.perf_counter()
            plan = plan_offload(req)
            walls.append(time.perf_counter() - t)
        s, p = plan.solver, plan.plan
        desc = (f"{p.gpu_batch_size}×{p.num_gpu_batches}, W {p.weights.gpu:.0%}/{p.weights.cpu:.0%}/"
                f"{p.weights.disk:.0%}, KV {p.kv_cache.gpu:.0%}/{p.kv_cache.cpu:.0%}/{p.kv_cache.disk:.0%}"
                + (", CPU attn" if p.cpu_attention else "") + (", 4-bit" if p.compression else ""))
        lines.append(f"| {label} | {s.status} | {statistics.median(walls):.2f} s | {s.candidates:,} | "
                     f"{s.pruned_memory:,} | {s.pruned_bound:,} | {s.solved:,} | {desc} | "
                     f"{plan.metrics.tokens_per_s:.3g} |")
    return lines


# --- FlexGen's own cost model (experimental/cost_model.py, CostModelConfig defaults fitted on the T4) ----------
GB, TERA = 1 << 30, 1e12
FLEXGEN_FIT = dict(ctog_bdw=12.89 * GB, gtoc_bdw_cache=0.97 * GB, gtoc_bdw_hidden=4.82 * GB, dtoc_bdw=0.473 * GB,
                   ctod_bdw_cache_p=0.746 * GB, ctod_bdw_hidden_p=2.015 * GB, ctod_bdw_g=2.015 * GB,
                   mm_flops_p=21.24 * TERA, mm_flops_g=4.3 * TERA, bmm_flops_p=9.97 * TERA, bmm_flops_g=0.079 * TERA,
                   cpu_flops=0.0123 * TERA, c1=0.0168, c2=0.0328, c3=0.0621)
OPT_SHAPES = {"OPT-6.7B": (32, 4096), "OPT-30B": (48, 7168), "OPT-175B": (96, 12288)}


def flexgen_model(name: str, s: int, n: int, pol: dict) -> float:
    """Throughput FlexGen's LP cost model assigns to a fixed policy (its ``solve_lp`` with every percent pinned)."""
    c = FLEXGEN_FIT
    l, h1 = OPT_SHAPES[name]
    h2 = 4 * h1
    gbs, bls = pol["gpu_batch"], pol["gpu_batch"] * pol["num_gpu_batches"]
    wg, wc = pol["wg"] / 100, pol["wc"] / 100
    cg, cc = pol["cg"] / 100, pol["cc"] / 100
    hg, hc = pol["hg"] / 100, pol["hc"] / 100
    wn, cn, hn = 1 - wg - wc, 1 - cg - cc, 1 - hg - hc
    wi = 8 * h1**2 + 4 * h1 * h2
    if pol.get("compress_weight"):
        wi /= 4
    ctogp = (wi * (wc + wn) + 2 * s * h1 * bls * (hc + hn)) / c["ctog_bdw"]
    gtocp = 4 * (s + 1) * h1 * bls * (cc + cn) / c["gtoc_bdw_cache"] + 2 * s * h1 * bls * (hc + hn) / c[
        "gtoc_bdw_hidden"]
    dtocp = (wi * wn + 2 * s * h1 * bls * hn) / c["dtoc_bdw"]
    ctodp = 4 * bls * (s + 1) * h1 * cn / c["ctod_bdw_cache_p"] + 2 * s * h1 * bls * hn / c["ctod_bdw_hidden_p"]
    compp = bls * (8 * s * h1**2 + 4 * s * h1 * h2) / c["mm_flops_p"] + 4 * bls * s**2 * h1 / c["bmm_flops_p"]
    tpre = max(ctogp + dtocp, gtocp + ctodp, compp)
    ctogg = (wi * (wc + wn) + 2 * h1 * bls * (hc + hn)) / c["ctog_bdw"]
    gtocg = 2 * h1 * bls * (hc + hn) / c["gtoc_bdw_hidden"]
    dtocg = (4 * bls * (s + n / 2) * h1 * cn + 2 * h1 * bls * hn) / c["dtoc_bdw"] + wi * wn / (c["dtoc_bdw"] * 0.95)
    ctodg = (4 * bls * h1 * cn + 2 * h1 * bls * hn) / c["ctod_bdw_g"]
    l1, l2 = max(0.0, math.log2(64 / gbs)), max(0.0, math.log2(4096 / h1))
    cpu = c["cpu_flops"] * max(0.1, 1 + c["c1"] * l1 * l2 - c["c2"] * l1 - c["c3"] * l2)
    compg = (bls * (8 * h1**2 + 4 * h1 * h2) / c["mm_flops_g"] + 4 * bls * (s + n / 2) * h1 * cg / c["bmm_flops_g"]
             + 4 * bls * (s + n / 2) * h1 * (cc + cn) / cpu)
    tgen = ctogg + max(gtocg, dtocg, ctodg, compg)
    return bls * n / (tpre * l + tgen * (n - 1) * l)


def _policy(pol: dict) -> OffloadPolicy:
    def split(g: float, c: float) -> Placement:
        return Placement.of(g / 100, c / 100, (100 - g - c) / 100)

    return OffloadPolicy(gpu_batch_size=pol["gpu_batch"], num_gpu_batches=pol["num_gpu_batches"],
                         weights=split(pol["wg"], pol["wc"]), kv_cache=split(pol["cg"], pol["cc"]),
                         activations=split(pol["hg"], pol["hc"]), cpu_attention=bool(pol.get("cpu_attention")),
                         compress_weights=bool(pol.get("compress_weight")),
                         compress_kv_cache=bool(pol.get("compress_cache")), pin_weights=pol.get("pin_weight", True))


def bench_accuracy() -> list[str]:
    records = json.loads((ROOT / "validation" / "offload.json").read_text())
    system = get_system("gcp-t4")
    caps = default_capacities(system)
    lines = ["| run | role | measured | shardplan | error | fits (ours) | FlexGen's model | its error |",
             "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in records:
        pol, w = r["parallel"]["offload_policy_percent"], r["workload"]
        name = r["model"]["name"]
        work = OffloadWorkload(prompt_len=w["prompt_len"], gen_len=w["gen_len"])
        rep = estimate_offload(get_model(name.lower()), system, work, _policy(pol), caps)
        measured = r["metrics"]["generation_throughput_tok_s"]
        ours = rep.metrics.tokens_per_s
        theirs = flexgen_model(name, w["prompt_len"], w["gen_len"], pol)
        tag = ("FlexGen-c " if "compress" in r["parallel"]["system"] else "FlexGen ") + f"{name} @{w['prompt_len']}"
        lines.append(f"| {tag} | {r['role']} | {measured:.3g} | {ours:.3g} | {100 * (ours / measured - 1):+.1f}% | "
                     f"{'yes' if rep.status == 'feasible' else 'no (' + rep.reason.split(':')[0] + ')'} | "
                     f"{theirs:.3g} | {theirs / measured:.2f}× |")
    return lines


def bench_estimate() -> str:
    system, model = get_system("gcp-t4"), get_model("opt-175b")
    pol = _policy(dict(gpu_batch=32, num_gpu_batches=8, wg=0, wc=50, cg=0, cc=0, hg=0, hc=100, cpu_attention=True))
    work, caps = OffloadWorkload(prompt_len=512, gen_len=32), default_capacities(system)
    estimate_offload(model, system, work, pol, caps)
    t = time.perf_counter()
    for _ in range(20):
        estimate_offload(model, system, work, pol, caps)
    return f"- one `estimate_offload` (OPT-175B, FlexGen's policy): {(time.perf_counter() - t) / 20 * 1e3:.1f} ms"


if __name__ == "__main__":
    print("\n".join(bench_planner()))
    print()
    print("\n".join(bench_accuracy()))
    print()
    print(bench_estimate())
