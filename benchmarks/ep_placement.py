"""Is the free planner's taste for smaller or in-node expert parallelism a cross-node all-to-all priced too slow? The
published MoE layouts of ``validate --group optimum`` split by where their EP group sits (``validation.placement``):
inside one NVLink domain or across domains; each side's pinned error (predicted over measured throughput) by GPU
family. If the model overpriced the cross-node all-to-all, the cross-node layouts would read slow (negative) and the
in-node ones right; the free plans' in-node claims would then be an artefact of that price.

A second table bins the same runs by the tokens one rank feeds a layer per microbatch (microbatch · seq / (tp · cp)):
a cost the model leaves out that is paid per kernel launch (host overhead: Python, PyTorch and Transformer Engine
per call) would read as optimism on the smallest bins.

With ``--free`` it also plans each run free (about 45 s) and counts where the free plans put their EP groups.

Run: .venv/bin/python benchmarks/ep_placement.py [--free]   (a few seconds)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from shardplan.validation.placement import ep_in_domain, gpu_family, moe_runs, placement_rows

BINS = ((0, 2048), (2048, 4096), (4096, 8192), (8192, 10**9))


def summary(errs: list[float]) -> str:
    return (f"n={len(errs):3d}  mean {statistics.fmean(errs):+6.1f}%  median {statistics.median(errs):+6.1f}%  "
            f"MAE {statistics.fmean(abs(e) for e in errs):5.1f}%")


def free_placement() -> dict[tuple[str, bool], int]:
    """Free plans per (family, EP in one NVLink domain)."""
    from shardplan.planner.training.solve import TrainRequest, plan_training

    counts: dict[tuple[str, bool], int] = defaultdict(int)
    for run in moe_runs():
        plan = plan_training(TrainRequest(model=run.model, system=run.system, num_gpus=run.gpus, workload=run.work,
                                          framework=run.framework), explain=False)
        if plan.plan is not None:
            counts[(gpu_family(run), ep_in_domain(run.system, plan.plan.ep, plan.plan.etp or plan.plan.tp))] += 1
    return dict(counts)


def main() -> None:
    data = placement_rows()
    families = sorted({r.family for r in data})
    print("published MoE layouts, pinned error (+: predicted faster than measured)")
    for fam in families:
        for inside in (True, False):
            errs = [r.pinned_error_pct for r in data if r.family == fam and r.inside == inside]
            where = "inside one NVLink domain" if inside else "across domains"
            if errs:
                print(f"  {fam:10s} EP {where:25s} {summary(errs)}")
    print("by tokens a rank feeds a layer per microbatch")
    for fam in families:
        for lo, hi in BINS:
            errs = [r.pinned_error_pct for r in data if r.family == fam and lo <= r.tokens < hi]
            if errs:
                print(f"  {fam:10s} [{lo:5d}, {hi if hi < 10**9 else 'inf'!s:>5s})  {summary(errs)}")
    if "--free" in sys.argv:
        print("free plans' EP groups:", {f"{f} {'inside' if i else 'across'}": n
                                         for (f, i), n in sorted(free_placement().items())})


if __name__ == "__main__":
    main()
