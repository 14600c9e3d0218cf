"""What moving expert parallelism inside one node buys, measured against what the cost model prices: the free
planner's largest MoE lever (``benchmarks/free_decomposition.py``: EP communication, 9 of the 14 points MoE free plans
claim over the published layouts).

Megatron-Bridge's performance tables ran gpt-oss-120b (bf16, 64 GPUs, GBS 1280, microbatch 4, TP 1, PP 1) with EP 64,
across eight nodes, in the 26.02 container (v0.3.0 ``docs/performance-summary.md`` l.93 DGX-B200 8,047 and the
DGX-B300 row 8,359 tokens/s per GPU; recipes ``GPT_OSS_120B_PRETRAIN_CONFIG_B{2,3}00_BF16_V2`` at v0.3.0: EP 64,
NCCL's all-to-all, B200 recomputing layernorm and the MoE activation, B300 with Transformer Engine CUDA graphs of
attention, router and preprocess), and with EP 8, inside each node, in 26.04.01 (v0.4.2 recipes, 13,568 on B200
with NCCL's all-to-all, 15,232 on B300 with HybridEP; the ``optimum`` group's records
``mbridge-26.04.01-gpt-oss-120b-64gpu-b{2,3}00-bf16``). On B200 the two workload configs differ in EP alone; the
library recipe, Megatron-Core and Transformer Engine moved with the container, a drift read on the rows whose
workload config did not change (GB300 EP 64, H100 PP 4 EP 8): 19,412 → 19,200 and 5,993 → 5,824, −1.1% and −2.8%
(v0.4.2 ``docs/performance-summary.md`` l.81). The B200 EP 8 rows of the containers between (26.02.01 13,722, 26.04
13,045) put the measured ratio at 1.62–1.71.

Each EP 64 run is priced as its 26.04.01 record with EP 64 and the 26.02 dispatcher (NCCL's all-to-all); the
ratio EP 8 / EP 64 is compared with the measured one. The DeepSeek-V3 pair on 256 B200 (26.04 EP 8 PP 16 HybridEP,
26.04.01 EP 32 PP 8 DeepEP with the all-to-all overlapped: two records of the group) differs in more than EP and is
shown for reference.

Run: .venv/bin/python benchmarks/ep_ab.py   (a few seconds)
"""

from __future__ import annotations

import copy

from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run
from shardplan.validation.runs import pinned_estimate

# (label, record of the second run, its changes for the first run, measured tokens/s per GPU of the first run and
#  its source); the second run's measurement is its record's
PAIRS = [
    ("gpt-oss-120b, 64 B200: EP 64 (26.02) → EP 8 (26.04.01)", "mbridge-26.04.01-gpt-oss-120b-64gpu-b200-bf16",
     {"parallel": {"ep": 64}, "software": {"ep_dispatcher": "alltoall"}}, 8047.0,
     "Megatron-Bridge v0.3.0 docs/performance-summary.md l.93"),
    ("gpt-oss-120b, 64 B300: EP 64 (26.02) → EP 8 HybridEP (26.04.01)",
     "mbridge-26.04.01-gpt-oss-120b-64gpu-b300-bf16",
     {"parallel": {"ep": 64}, "software": {"ep_dispatcher": "alltoall"}}, 8359.0,
     "Megatron-Bridge v0.3.0 docs/performance-summary.md, DGX-B300 table"),
]
REFERENCE = ("DeepSeek-V3, 256 B200: EP 8 PP 16 (26.04) → EP 32 PP 8, overlapped (26.04.01)",
             "mbridge-26.04-deepseekv3-256gpu-b200-mxfp8", "mbridge-26.04.01-deepseekv3-256gpu-b200-mxfp8")


def _records() -> dict[str, dict]:
    return {r["id"]: r for r in load_records_tuned()}


def _varied(record: dict, changes: dict) -> dict:
    out = copy.deepcopy(record)
    for section, fields in changes.items():
        out[section] = {**(out.get(section) or {}), **fields}
    return out


def priced(record: dict) -> float:
    """Tokens/s per GPU the cost model prices for a record's published layout."""
    run = parse_run(record)
    assert isinstance(run, OptimumRun), run
    step = pinned_estimate(run.model, run.system, run.gpus, run.work, run.layout, run.stage_layers).metrics.step_time_s
    return run.work.global_batch * run.work.seq_len / run.gpus / step


def rows() -> list[tuple[str, float, float, float, float]]:
    """(label, first run measured, first priced, second measured, second priced) for every pair."""
    recs = _records()
    out = []
    for label, second, changes, measured_first, _ in PAIRS:
        rec = recs[second]
        out.append((label, measured_first, priced(_varied(rec, changes)),
                    rec["metrics"]["tokens_per_s_per_gpu"], priced(rec)))
    label, a, b = REFERENCE
    out.append((label, recs[a]["metrics"]["tokens_per_s_per_gpu"], priced(recs[a]),
                recs[b]["metrics"]["tokens_per_s_per_gpu"], priced(recs[b])))
    return out


def main() -> None:
    print("| pair | first: measured, priced | second: measured, priced | measured ratio | priced ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, m1, p1, m2, p2 in rows():
        print(f"| {label} | {m1:,.0f}, {p1:,.0f} ({100 * (p1 / m1 - 1):+.1f}%) | {m2:,.0f}, {p2:,.0f} "
              f"({100 * (p2 / m2 - 1):+.1f}%) | {m2 / m1:.3f} | {p2 / p1:.3f} |")


if __name__ == "__main__":
    main()
