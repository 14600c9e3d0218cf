"""What the free planner's optimism is made of: for every run of ``validate --group optimum``, the published layout's
step and the free plan's step, both as the cost model prices them, split into the exposed costs
``validation.optimum.step_parts`` names; the mean over runs of each part's saving as a share of the published step,
for all runs, dense and MoE, and (``--by-source``) per source prefix of the record ids.

Run: .venv/bin/python benchmarks/free_decomposition.py [--by-source]   (about three minutes on two cores)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from shardplan.planner.training.solve import TrainRequest, plan_training
from shardplan.validation.optimum import load_records_tuned, parse_run, step_parts
from shardplan.validation.runs import pinned_estimate


def savings() -> list[tuple[str, bool, float, dict[str, float]]]:
    """(id, MoE, step saved as a share of the published step, that share per part) for every run both price."""
    out = []
    for rec in load_records_tuned():
        run = parse_run(rec)
        if isinstance(run, str):
            continue
        rep = pinned_estimate(run.model, run.system, run.gpus, run.work, run.layout, run.stage_layers)
        plan = plan_training(TrainRequest(model=run.model, system=run.system, num_gpus=run.gpus, workload=run.work,
                                          framework=run.framework), explain=False)
        if rep.metrics is None or plan.metrics is None:
            continue
        a = step_parts(rep.metrics, rep.stages, rep.plan)
        b = step_parts(plan.metrics, plan.stages, plan.plan)
        pub = rep.metrics.step_time_s
        parts = {k: (a[k] - b[k]) / pub for k in a}
        out.append((run.id, run.model.moe is not None, (pub - plan.metrics.step_time_s) / pub, parts))
    return out


def table(rows: list[tuple[str, bool, float, dict[str, float]]], groups: dict[str, list[int]]) -> None:
    names = list(groups)
    print("| part | " + " | ".join(f"{g} ({len(groups[g])})" for g in names) + " |")
    print("|---|" + "---:|" * len(names))

    def mean(idx: list[int], f: object) -> float:
        return 100 * statistics.mean(f(rows[i]) for i in idx) if idx else float("nan")  # type: ignore[operator]

    print("| step saved, total | " + " | ".join(f"{mean(groups[g], lambda r: r[2]):.2f}%" for g in names) + " |")
    keys = sorted(rows[0][3], key=lambda k: -statistics.mean(r[3][k] for r in rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{mean(groups[g], lambda r, k=k: r[3][k]):+.2f}" for g in names) + " |")


def main() -> int:
    rows = savings()
    everything = list(range(len(rows)))
    table(rows, {"all": everything, "dense": [i for i in everything if not rows[i][1]],
                 "MoE": [i for i in everything if rows[i][1]]})
    if "--by-source" in sys.argv:
        by: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by[r[0].split("-")[0]].append(i)
        print()
        table(rows, dict(sorted(by.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
