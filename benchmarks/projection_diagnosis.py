"""Per point of every ``projection`` series: what changes from the calibration points, and where the error sits.

Run: .venv/bin/python benchmarks/projection_diagnosis.py [series-substring]

For each point: the layout (TP, PP, DP, interleave v, microbatch size, microbatches per step m), the nodes it spans
and how many members of one DP group share a node (8/TP; 1 = the gradient sync runs on the network only), then,
as shares of the calibrated step: the pipeline bubble, the exposed TP collectives, and the exposed gradient sync
plus ZeRO-3 gathers (``dp+z3``); the base system's error, the error after calibrating on the series' smallest
point(s) (``validate --group projection``), and the error that would remain with TP, DP and ZeRO-3 collectives all
hidden. Each series ends with its mean |error| uncalibrated and calibrated.
"""

from __future__ import annotations

import sys

import numpy as np

from shardplan.calibration.fit import select_and_fit
from shardplan.calibration.projection import calibration_points
from shardplan.calibration.runs import Run
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.hardware.spec import Calibration, with_calibration
from shardplan.validation.projection import series

HEAD = ("  point                           TP PP   DP  v mb   m nodes DP/node bubble  TP-exp dp+z3   base  "
        "calibrated  no-comm")


def main() -> int:
    want = sys.argv[1] if len(sys.argv) > 1 else ""
    before: list[float] = []
    after_all: list[float] = []
    for name, (system, points) in series().items():
        if want not in name:
            continue
        pts = sorted(points, key=lambda p: (p.gpus, p.id))
        runs = [Run(i, p.id, p.model, p.gpus, p.workload, p.layout, p.step_time_s, None, "") for i, p in enumerate(pts)]
        k = calibration_points(len(runs))
        fit = select_and_fit(system, runs[:k])
        cal = with_calibration(system, Calibration.model_validate({**system.calibration.model_dump(), **fit.values}))
        print(f"{name}: calibrated on {k} point(s), fitted {({p: round(v, 3) for p, v in fit.values.items()})}")
        print(HEAD)
        e_base, e_cal = [], []
        for i, p in enumerate(pts):
            lay = p.layout
            base = estimate_training(p.model, system, p.gpus, p.workload, lay).metrics
            m = estimate_training(p.model, cal, p.gpus, p.workload, lay).metrics
            step = m.step_time_s
            comm = m.tp_exposed_s + m.dp_exposed_s + m.zero3_exposed_s
            micro = p.workload.global_batch // (lay.dp * lay.microbatch)
            nodes = -(-p.gpus // system.gpus_per_node)
            e0, e1 = base.step_time_s / p.step_time_s - 1, step / p.step_time_s - 1
            e2 = (step - comm) / p.step_time_s - 1
            tag = "cal " if i < k else "proj"
            if i >= k:
                e_base.append(e0)
                e_cal.append(e1)
            print(f"  {tag} {p.id[-26:]:>26} {lay.tp:>2} {lay.pp:>2} {lay.dp:>4} {lay.interleave:>2} "
                  f"{lay.microbatch:>2} {micro:>3} {nodes:>5} {max(system.gpus_per_node // lay.tp, 1):>7} "
                  f"{m.bubble_s / step:6.1%} "
                  f"{m.tp_exposed_s / step:6.1%} {(m.dp_exposed_s + m.zero3_exposed_s) / step:6.1%} "
                  f"{e0:+6.1%}  {e1:+8.1%}  {e2:+7.1%}")
        print(f"  mean |error| of the projected points: uncalibrated {np.mean(np.abs(e_base)):.1%}, "
              f"calibrated {np.mean(np.abs(e_cal)):.1%}")
        before += e_base
        after_all += e_cal
    if after_all:
        print(f"all series: {len(after_all)} projected points, mean |error| uncalibrated "
              f"{np.mean(np.abs(before)):.1%}, calibrated {np.mean(np.abs(after_all)):.1%} "
              f"(mean signed {np.mean(after_all):+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
