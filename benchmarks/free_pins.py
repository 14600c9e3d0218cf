"""Which of the free planner's choices carry its optimism: the `optimum` group's runs (the publisher's declared
regressions left out) planned free, then again with the published run's recompute kind pinned, then also its EP
(MoE models), then also its TP; for each variant the mean signed error of the plan's tokens/s per GPU against the
measured run, and how many plans fall within −10…+15%. Only runs every variant plans are counted.

Run: .venv/bin/python benchmarks/free_pins.py   (about seven minutes on two cores)
"""

from __future__ import annotations

import statistics
from typing import Any

from shardplan.errors import ShardplanError
from shardplan.planner.training.solve import TrainRequest, plan_training
from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run
from shardplan.validation.optimum import error_pct as group_error

VARIANTS: dict[str, tuple[str, ...]] = {"free": (), "recompute pinned": ("recompute",),
                                        "recompute, EP pinned": ("recompute", "ep"),
                                        "recompute, EP, TP pinned": ("recompute", "ep", "tp")}


def pins(run: OptimumRun, names: tuple[str, ...]) -> dict[str, Any]:
    """The published layout's values of ``names`` as request pins (EP only for MoE models)."""
    lay, out = run.layout, {}
    for name in names:
        if name == "recompute":
            out["recompute"] = lay.recompute
        elif name == "ep" and run.model.moe is not None:
            out["ep"] = lay.ep
        elif name == "tp":
            out["tp"] = lay.tp
    return out


def error_pct(run: OptimumRun, names: tuple[str, ...]) -> float | None:
    try:
        plan = plan_training(TrainRequest(model=run.model, system=run.system, num_gpus=run.gpus, workload=run.work,
                                          framework=run.framework, **pins(run, names)), explain=False)
    except (ShardplanError, ValueError, OverflowError):
        return None
    if plan.metrics is None:
        return None
    return group_error(plan.metrics.tokens_per_s / run.gpus, run.measured_tokens_per_s_per_gpu)  # the group's own error


def main() -> int:
    rows: list[tuple[bool, dict[str, float]]] = []
    for rec in load_records_tuned():
        run = parse_run(rec)
        if isinstance(run, str) or run.known_regression:
            continue
        errs = {name: error_pct(run, names) for name, names in VARIANTS.items()}
        if all(e is not None for e in errs.values()):
            rows.append((run.model.moe is not None, errs))  # type: ignore[arg-type]
    print(f"{len(rows)} runs")
    print("| variant | mean signed | MAPE | within −10…+15% | dense mean signed | MoE mean signed |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in VARIANTS:
        v = [e[name] for _, e in rows]
        dense = [e[name] for moe, e in rows if not moe]
        moe = [e[name] for is_moe, e in rows if is_moe]
        inside = sum(1 for x in v if -10 <= x <= 15)
        print(f"| {name} | {statistics.mean(v):+.2f}% | {statistics.mean(abs(x) for x in v):.2f}% | {inside} | "
              f"{statistics.mean(dense):+.2f}% | {statistics.mean(moe):+.2f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
