"""In-node against cross-node expert parallelism where one table measured both: Megatron-MoE-ModelZoo's Qwen3-235B-A22B
on 256 H100 at 4,096 tokens, global batch 2,048, bf16, DeepEP (yanring/Megatron-MoE-ModelZoo@e865051
best_practice/qwen3/readme.md, "Performance Results" / "H100"). Each measured layout of the table is priced from the
same record's setup with its layout replaced, beside the layout the free planner's choices lean to (EP 8 inside a node,
TP 2, PP 8), which the table does not measure. The free plans' optimism on MoE runs rests on in-node EP; this is the
one place where a publisher measured in-node EP layouts of a model next to its cross-node ones.

Rows the validation data does not hold (and why) are marked: the table's "Intra-node EP + FSDP" row prints TP 2 while
its launch line sets TP 1, so both are priced; its A2A row (PP 32 × VPP 3 = 96 chunks for 94 layers, Megatron
counting the embedding and loss as pipeline layers) has no counterpart here.

A second table prices the pairs of Megatron-Bridge's published runs (validate --group optimum records) that hold one
model on one machine under two layouts or two recipes: DeepSeek-V3 on 256 B200, in-node EP 8 (container 26.04) against
cross-node EP 32 with the all-to-all overlapped (26.04.01); Qwen3-30B-A3B on 8 GB200 under the 26.04.01 recipe against
its model verification card's (full-iteration CUDA graphs, overlap, TE op fuser, FP8 attention). Each pair's measured
ratio is printed beside the model's.

Run: .venv/bin/python benchmarks/moe_inode.py   (about ten seconds)
"""

from __future__ import annotations

import dataclasses

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute
from shardplan.validation import runs as R
from shardplan.validation.optimum import load_records_tuned, parse_run, step_parts

BASE = "mzoo-qwen3-235b-a22b-256gpu-h100-bf16-ep32"
# (label, record priced, code the table names, measured step s or None, layout fields replacing the record's)
ROWS: list[tuple[str, str, str, float | None, dict[str, object]]] = [
    ("cross-node EP32, TP2 PP8 V4 (recorded)", BASE, "moe_dev f3e6c5", 19.7, {}),
    ("cross-node EP32 + 1F1B overlap (recorded)", f"{BASE}-1f1b", "moe_dev f3e6c5", 17.6, {}),
    ("intra-node EP8, TP4 PP8 V4 (recorded)", "mzoo-qwen3-235b-a22b-256gpu-h100-bf16-ep8-tp4", "main 1e057005", 29.0,
     {}),
    ("intra-node EP8 + FSDP, TP1 (launch line)", BASE, "main 1e057005", 17.6,
     {"tp": 1, "pp": 1, "dp": 256, "ep": 8, "interleave": 1, "microbatch": 4, "zero_stage": 3,
      "recompute": Recompute.FULL, "recompute_modules": None}),
    ("intra-node EP8 + FSDP, TP2 (table column)", BASE, "main 1e057005", 17.6,
     {"tp": 2, "pp": 1, "dp": 128, "ep": 8, "interleave": 1, "microbatch": 4, "zero_stage": 3,
      "recompute": Recompute.FULL, "recompute_modules": None}),
    ("intra-node EP8, TP2 PP8 V4 (not measured)", BASE, "", None, {"ep": 8}),
    ("EP16, TP2 PP8 V4 (not measured)", BASE, "", None, {"ep": 16}),
]


# (label, first run, second run): the second's measured and priced throughput over the first's
PAIRS: list[tuple[str, str, str]] = [
    ("DeepSeek-V3, 256 B200: in-node EP8 PP16 -> cross-node EP32 PP8 V2 overlapped",
     "mbridge-26.04-deepseekv3-256gpu-b200-mxfp8", "mbridge-26.04.01-deepseekv3-256gpu-b200-mxfp8"),
    ("Qwen3-30B-A3B, 8 GB200 EP8: 26.04.01 recipe -> model card (graphed, overlapped)",
     "mbridge-26.04.01-qwen3-30b-a3b-8gpu-gb200-mxfp8", "mbcard-qwen3-30b-a3b-8gpu-gb200-mxfp8-perf"),
    ("Qwen3-30B-A3B, 8 B300 EP8: 26.04.01 recipe -> 26.06 recipe (the card's knobs)",
     "mbridge-26.04.01-qwen3-30b-a3b-8gpu-b300-mxfp8", "mbridge-26.06-qwen3-30b-a3b-8gpu-b300-mxfp8"),
    ("Qwen3-235B-A22B, 256 H100 EP32: model zoo 2025 -> 2026 script (router graphs)",
     "mzoo-qwen3-235b-a22b-256gpu-h100-bf16-ep32-1f1b", "mzoo-qwen3-235b-a22b-256gpu-h100-bf16-ep32-2026"),
]


def priced_pairs() -> None:
    """Each pair's measured and priced tokens/s per GPU, and the second run's ratio to the first, both ways."""
    runs = {r["id"]: r for r in load_records_tuned()}
    print(f"\n{'pair':78s} {'measured':>17s} {'priced':>17s} {'ratio meas/priced':>18s}")
    for label, a, b in PAIRS:
        meas, priced = [], []
        for rid in (a, b):
            run = parse_run(runs[rid])
            assert not isinstance(run, str), run
            rep = R.pinned_estimate(run.model, run.system, run.gpus, run.work, run.layout, run.stage_layers)
            meas.append(run.measured_tokens_per_s_per_gpu)
            priced.append(rep.metrics.tokens_per_s / run.gpus)
        print(f"{label:78s} {meas[0]:8,.0f}{meas[1]:9,.0f} {priced[0]:8,.0f}{priced[1]:9,.0f} "
              f"{meas[1] / meas[0]:8.2f}x {priced[1] / priced[0]:7.2f}x")


def main() -> int:
    records = {r["id"]: r for r in R.load_records("modern_training_runs")}
    setup = R.modern_setup(records[BASE])
    assert setup is not None
    model, system, n, work = setup[:4]
    print(f"{model.name} on {n} {system.gpu.name}, seq {work.seq_len}, global batch {work.global_batch}, "
          f"{system.software.ep_dispatcher}")
    print(f"{'layout':44s} {'code':15s} {'measured':>8s} {'priced':>7s} {'error':>7s}  exposed EP / host sync / "
          f"ZeRO-3 gathers, peak GiB")
    for label, rid, code, measured, upd in ROWS:
        own = R.modern_setup(records[rid])
        assert own is not None
        model, system, n, work, base = own[:5]
        rep = estimate_training(model, system, n, work, dataclasses.replace(base, **upd))  # type: ignore[arg-type]
        parts = step_parts(rep.metrics)
        step = rep.metrics.step_time_s
        err = f"{100 * (measured / step - 1):+6.1f}%" if measured else "      "  # throughput error: priced faster > 0
        print(f"{label:44s} {code:15s} {measured or float('nan'):8.1f} {step:7.2f} {err}  "
              f"{parts['EP comm']:5.2f} / {parts['host sync']:4.2f} / {parts['ZeRO-3 gathers']:5.2f} s, "
              f"{rep.memory.total_bytes / 1024**3:5.1f}")
    priced_pairs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
