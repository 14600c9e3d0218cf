"""Per point of every ``projection`` series: what changes from the calibration points, and where the error sits.

Run: .venv/bin/python benchmarks/projection_diagnosis.py [series-substring]

For each point: the layout (TP, PP, DP and how many DP members share a node: 8/TP, 1 = the gradient sync runs on
the network only), the largest GEMM of a layer per GPU (FLOPs), the base system's error, the error after
calibrating on the series' smallest point(s) (``validate --group projection``), and the exposed TP and DP
communication of the calibrated prediction with the error that would remain without it.
"""

from __future__ import annotations

import sys

from shardplan.calibration.fit import select_and_fit
from shardplan.calibration.projection import calibration_points
from shardplan.calibration.runs import Run
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.hardware.spec import Calibration, with_calibration
from shardplan.validation.projection import series


def main() -> int:
    want = sys.argv[1] if len(sys.argv) > 1 else ""
    for name, (system, points) in series().items():
        if want not in name:
            continue
        pts = sorted(points, key=lambda p: (p.gpus, p.id))
        runs = [Run(i, p.id, p.model, p.gpus, p.workload, p.layout, p.step_time_s, None, "") for i, p in enumerate(pts)]
        k = calibration_points(len(runs))
        fit = select_and_fit(system, runs[:k])
        cal = with_calibration(system, Calibration.model_validate({**system.calibration.model_dump(), **fit.values}))
        print(f"{name}: calibrated on {k} point(s), fitted {({p: round(v, 3) for p, v in fit.values.items()})}")
        print("  point                          TP PP  DP  DP/node  GEMM FLOPs  base    calibrated  TP+DP exposed  "
              "without it")
        for i, p in enumerate(pts):
            lay, m = p.layout, p.model
            tokens = lay.microbatch * p.workload.seq_len
            gemm = 2 * tokens * m.hidden_size * max(m.ffn_hidden_size, 3 * m.hidden_size) / lay.tp
            base = estimate_training(m, system, p.gpus, p.workload, lay).metrics
            after = estimate_training(m, cal, p.gpus, p.workload, lay).metrics
            comm = after.tp_exposed_s + after.dp_exposed_s
            tag = "cal " if i < k else "proj"
            e0, e1 = base.step_time_s / p.step_time_s - 1, after.step_time_s / p.step_time_s - 1
            e2 = (after.step_time_s - comm) / p.step_time_s - 1
            print(f"  {tag} {p.id[-26:]:>26} {lay.tp:>2} {lay.pp:>2} {lay.dp:>4} {max(8 // lay.tp, 1):>5}  "
                  f"{gemm:10.2e}  {e0:+6.1%}  {e1:+8.1%}  {comm:9.3f} s  {e2:+8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
