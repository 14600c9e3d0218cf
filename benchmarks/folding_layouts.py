"""Layouts of one MoE job, measured side by side by their publisher, against the cost model's ranking of them.

Liu et al., "MoE Parallel Folding" (arXiv 2504.14960 v2, NVIDIA; Megatron-Core on the Eos DGX H100 cluster, BF16,
sequence 4,096) trained Mixtral 8x22B and Qwen2-57B-A14B under several layouts of the same job and report each one's
MFU (model TFLOP/s per GPU over 989.5; §4.1, Table 2 confirms 458.3 → 46.3%): Table 3 (§6.4: the best layout per method
at global batch 256 on 128 GPUs for Mixtral, 64 for Qwen2, Table 1's MFU) and Table 4 (§6.4: the same layouts at global
batch 1,024 on up to 1,024 GPUs, data parallelism grown). Within one column the batch, model and FLOP count are the
same, so the ratio of two MFUs is the ratio of their throughputs, whatever FLOP convention the paper used. The free
planner's claims rest on exactly this: which of two layouts of one job is faster, and by how much.

Priced from the model zoo's record of the same job (``mzoo-mixtral-8x22b-128gpu-h100-bf16``: Megatron-Core's alltoall
dispatcher, grouped GEMM, userbuffers, distributed optimizer, no recompute, microbatch 1), token drop at capacity
factor 1 with padding (§4.2). The paper does not state the microbatch, the virtual pipeline stages or recompute; the
model zoo's benchmarking config at the paper's date (yanring/Megatron-MoE-ModelZoo@78fd4d6, 2025-04-04,
runtime_configs/benchmarking/runtime.conf: Mixtral-8x22B TP 2 PP 8 EP 8 VPP 1 MBS 1 GBS 256) sets V 1; the later
config (V 7) is priced beside it: V mainly moves the pipeline layouts' bubble (and V× their pipeline sends). Table 4
points to V 7: at 1,024 GPUs (16 microbatches a pipeline) V 1 would add a bubble of 7/16 of the compute time (7/23 of
the step), an MFU of at most 49.4 · (1 + 7/128) / (1 + 7/16) = 36.2% where 42.3% was measured, and with 7 layers a
stage V is 1 or 7. Layouts (Table 3):
MCore TP 2, EP 4, PP 8, expert TP = TP (Megatron-Core before folding couples them); MCore with folding TP 2, EP 8,
PP 8, expert TP 1; TP+EP+DP TP 4, EP 8, no pipeline, expert TP 4. The FSDP baselines (4.3% and 23.4% MFU) are left
out: the paper does not say which FSDP ran them.

Finding, not applied (benchmarks/RESULTS.md, wave 47).

Run: .venv/bin/python benchmarks/folding_layouts.py   (about half a minute)
"""

from __future__ import annotations

import dataclasses

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout
from shardplan.models import get_model
from shardplan.models.spec import ModelSpec
from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run, tuned_record
from shardplan.validation.runs import pinned_estimate

RECORD = "mzoo-mixtral-8x22b-128gpu-h100-bf16"
PEAK = 989.5  # TFLOP/s per GPU the paper's MFU divides by (§4.1)
# model -> layout name -> (tp, ep, expert tp, pp); dp fills the GPUs
LAYOUTS = {
    "mixtral-8x22b": {"MCore": (2, 4, 2, 8), "MCore w/ folding": (2, 8, 1, 8), "TP+EP+DP": (4, 8, 4, 1)},
    "qwen2-57b-a14b": {"MCore": (2, 4, 2, 4), "MCore w/ folding": (2, 4, 1, 4), "TP+EP+DP": (4, 4, 4, 1)},
}
# model -> (GPUs, global batch) -> measured MFU % per layout (Table 3: batch 256; Table 4: batch 1,024)
MEASURED = {
    "mixtral-8x22b": {
        (128, 256): (46.3, 49.3, 36.6), (128, 1024): (49.4, 52.2, 40.4), (256, 1024): (48.0, 50.7, 39.1),
        (512, 1024): (45.5, 48.9, 36.0), (1024, 1024): (42.3, 44.9, 36.2)},
    "qwen2-57b-a14b": {
        (64, 256): (35.3, 39.0, 23.1), (64, 1024): (36.2, 39.9, 22.4), (128, 1024): (36.0, 39.7, 20.9),
        (256, 1024): (34.8, 38.1, 19.8), (512, 1024): (32.5, 36.6, 19.7), (1024, 1024): (29.8, 33.4, 17.9)},
}
# virtual stages priced: the model zoo config at the paper's date (Mixtral 1, Qwen2 7: one layer a chunk) and 7
VIRTUAL = {"mixtral-8x22b": (1, 7), "qwen2-57b-a14b": (7,)}


def rate(run: OptimumRun, model: ModelSpec, gpus: int, batch: int, layout: tuple[int, int, int, int],
         v: int, dtype: str = "bf16") -> float:
    """The cost model's tokens/s per GPU of ``layout`` for this job (``v`` chunks per pipeline stage), on the model
    zoo record's stack with token drop and padding, in ``dtype``."""
    tp, ep, etp, pp = layout
    lay: TrainLayout = dataclasses.replace(run.layout, tp=tp, ep=ep, etp=etp, pp=pp, dp=gpus // (tp * pp),
                                           interleave=v if pp > 1 else 1)
    system = run.system.model_copy(update={"software": run.system.software.model_copy(
        update={"moe_drop_and_pad": True})})
    work = run.work.model_copy(update={"global_batch": batch, "dtype": dtype})
    return estimate_training(model, system, gpus, work, lay).metrics.tokens_per_s / gpus


# Table 2 (§4.5, 128 H100, Mixtral 8x22B, FP8 delayed scaling): model TFLOP/s per GPU, BF16 and FP8 (the paper prints
# the gains rounded: 1.26× and 1.30×)
TABLE2 = {"MCore": (458.3, 575.1), "MCore w/ folding": (487.7, 631.7)}


def fp8_pairs(run: OptimumRun) -> None:
    """FP8 over BF16 on one layout, measured and priced: Table 2's two Mixtral layouts (V 7), and the DGX Cloud
    v25.05.05 tables' same-layout H100 pairs (``validate --group optimum`` records)."""
    print("\nFP8 over BF16 on the same layout (throughput ratio), measured and priced")
    layouts = LAYOUTS["mixtral-8x22b"]
    for name, (bf16, fp8) in TABLE2.items():
        rates = [rate(run, run.model, 128, 256, layouts[name], 7, dtype=dt) for dt in ("bf16", "fp8")]
        print(f"  Mixtral 8x22B {name:18s} {fp8 / bf16:6.3f}  {rates[1] / rates[0]:6.3f}")
    recs = {r["id"]: r for r in load_records_tuned()}
    for rid in sorted(recs):
        if not (rid.endswith("-h100-fp8") and rid.replace("-fp8", "-bf16") in recs):
            continue
        pair = [parse_run(recs[i]) for i in (rid.replace("-fp8", "-bf16"), rid)]
        meas = pair[1].measured_tokens_per_s_per_gpu / pair[0].measured_tokens_per_s_per_gpu
        est = [pinned_estimate(r.model, r.system, r.gpus, r.work, r.layout, r.stage_layers).metrics.tokens_per_s
               for r in pair]
        print(f"  {rid[:-4]:45s} {meas:6.3f}  {est[1] / est[0]:6.3f}")


def main() -> int:
    run = parse_run(tuned_record(RECORD))
    assert isinstance(run, OptimumRun), run
    print(f"H100, seq {run.work.seq_len}: each layout's throughput over MCore's, measured (MFU ratio) and priced")
    misses: dict[tuple[str, str, int], list[float]] = {}
    for name, table in MEASURED.items():
        model, layouts = get_model(name), LAYOUTS[name]
        vs = VIRTUAL[name]
        print(f"\n{name}\n{'GPUs':>5s} {'batch':>6s} {'layout':18s} {'MFU %':>6s} {'measured':>9s} "
              + " ".join(f"{f'V {v}':>7s}" for v in vs))
        for (gpus, batch), mfus in table.items():
            mfu = dict(zip(layouts, mfus, strict=True))
            priced = {v: {k: rate(run, model, gpus, batch, lay, v) for k, lay in layouts.items()} for v in vs}
            for k in layouts:
                meas = mfu[k] / mfu["MCore"]
                ratios = [priced[v][k] / priced[v]["MCore"] for v in vs]
                for v, p in zip(vs, ratios, strict=True):
                    misses.setdefault((name, k, v), []).append(100 * (p / meas - 1))
                print(f"{gpus:5d} {batch:6d} {k:18s} {mfu[k]:6.1f} {meas:9.3f} "
                      + " ".join(f"{p:7.3f}" for p in ratios))
    print("\npriced over measured ratio, mean over the columns (+: the model rates the layout too well against MCore)")
    for (name, k, v), m in misses.items():
        if k != "MCore":
            print(f"  {name:15s} {k:18s} V {v}  {sum(m) / len(m):+6.1f}%  (range {min(m):+.1f}…{max(m):+.1f}%)")
    fp8_pairs(run)
    fold = MEASURED["mixtral-8x22b"][(128, 256)][1]
    print(f"\nmeasured MFU of Mixtral MCore w/ folding at 128 GPUs, batch 256: {fold}% = {fold * PEAK / 100:.1f} "
          f"TFLOP/s per GPU (Table 2: 487.7)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
