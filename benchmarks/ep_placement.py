"""Is the free planner's taste for in-node expert parallelism a cross-node all-to-all priced too slow? The published
MoE layouts of ``validate --group optimum`` split by where their EP group sits: inside one NVLink domain (etp·ep
ranks within a node, or within the job's NVL72 domain) or across it; each side's pinned error (predicted over measured
throughput) by GPU family. If the model overpriced the cross-node all-to-all, the cross-node layouts would read slow
(negative) and the in-node ones right; the free plans' in-node claims would then be an artefact of that price.

A second table bins the same runs by the tokens one rank feeds a layer per microbatch (microbatch · seq / (tp · cp)):
a cost the model leaves out that is paid per kernel launch (host overhead: Python, PyTorch and Transformer Engine
per call) would read as optimism on the smallest bins.

With ``--free`` it also plans each run free (about a minute) and counts where the free plans put their EP groups.

Run: .venv/bin/python benchmarks/ep_placement.py [--free]   (a few seconds)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run
from shardplan.validation.runs import pinned_estimate

BINS = ((0, 2048), (2048, 4096), (4096, 8192), (8192, 10**9))


def family(run: OptimumRun) -> str:
    """Hopper, Blackwell (B200/B300 and the NVL72 trays) or the GPU's own name."""
    name = run.system.gpu.name
    return "hopper" if name.startswith("h") else "blackwell" if name.startswith(("b", "gb")) else name


def in_domain(run: OptimumRun, ep: int, etp: int) -> bool:
    """The EP group (etp·ep consecutive expert ranks: Megatron-Core's tp-ep-dp order for experts) stays inside one
    NVLink domain (``gpus_per_node`` after ``job_system``: the node, or the NVL72 job's domain)."""
    return etp * ep <= run.system.gpus_per_node


def rows() -> list[tuple[str, str, bool, float, float]]:
    """(id, family, EP in one NVLink domain, tokens a rank feeds a layer per microbatch, pinned error %) of every
    published MoE layout the model prices; the declared regressions left out."""
    out = []
    for rec in load_records_tuned():
        run = parse_run(rec)
        if isinstance(run, str) or run.model.moe is None or run.known_regression:
            continue
        lay = run.layout
        rep = pinned_estimate(run.model, run.system, run.gpus, run.work, lay, run.stage_layers)
        err = 100.0 * (rep.metrics.tokens_per_s / run.gpus / run.measured_tokens_per_s_per_gpu - 1.0)
        tokens = lay.microbatch * run.work.seq_len / (lay.tp * lay.cp)
        out.append((run.id, family(run), in_domain(run, lay.ep, lay.etp or lay.tp), tokens, err))
    return out


def summary(errs: list[float]) -> str:
    return (f"n={len(errs):3d}  mean {statistics.fmean(errs):+6.1f}%  median {statistics.median(errs):+6.1f}%  "
            f"MAE {statistics.fmean(abs(e) for e in errs):5.1f}%")


def free_placement() -> dict[tuple[str, bool], int]:
    """Free plans per (family, EP in one NVLink domain)."""
    from shardplan.planner.training.solve import TrainRequest, plan_training

    counts: dict[tuple[str, bool], int] = defaultdict(int)
    for rec in load_records_tuned():
        run = parse_run(rec)
        if isinstance(run, str) or run.model.moe is None or run.known_regression:
            continue
        plan = plan_training(TrainRequest(model=run.model, system=run.system, num_gpus=run.gpus, workload=run.work,
                                          framework=run.framework), explain=False)
        if plan.plan is not None:
            counts[(family(run), in_domain(run, plan.plan.ep, plan.plan.etp or plan.plan.tp))] += 1
    return dict(counts)


def main() -> None:
    data = rows()
    print("published MoE layouts, pinned error (+: predicted faster than measured)")
    for fam in sorted({r[1] for r in data}):
        for inside in (True, False):
            errs = [r[4] for r in data if r[1] == fam and r[2] == inside]
            where = "inside one NVLink domain" if inside else "across domains"
            if errs:
                print(f"  {fam:10s} EP {where:25s} {summary(errs)}")
    print("by tokens a rank feeds a layer per microbatch")
    for fam in sorted({r[1] for r in data}):
        for lo, hi in BINS:
            errs = [r[4] for r in data if r[1] == fam and lo <= r[3] < hi]
            if errs:
                print(f"  {fam:10s} [{lo:5d}, {hi if hi < 10**9 else 'inf'!s:>5s})  {summary(errs)}")
    if "--free" in sys.argv:
        print("free plans' EP groups:", {f"{f} {'inside' if i else 'across'}": n
                                         for (f, i), n in sorted(free_placement().items())})


if __name__ == "__main__":
    main()
