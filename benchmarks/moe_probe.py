"""MoE records of the validation data: the pinned prediction of each published layout beside the measurement, with
the step split into its exposed parts and the memory per GPU (what a MoE fix should move, and where).

Run: .venv/bin/python benchmarks/moe_probe.py [substring of the record id]
"""

from __future__ import annotations

import sys
from typing import Any

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.validation import optimum as O
from shardplan.validation import runs as R

GiB = 1024**3


def line(tag: str, model: Any, system: Any, gpus: int, work: Any, layout: Any, measured: float, tokens: bool) -> str:
    rep = estimate_training(model, system, gpus, work, layout)
    m, mem = rep.metrics, rep.memory
    pred = m.tokens_per_s / gpus if tokens else m.mfu * system.gpu.peak(work.dtype) / 1e12
    sw = system.software
    stack = sw.ep_dispatcher + ("+overlap" if sw.ep_comm_overlap else "")
    return (f"{tag[:52]:52s} {system.name[:11]:11s} {100 * (pred - measured) / measured:+7.1f}% "
            f"step {m.step_time_s:6.2f} s: bubble {m.bubble_s:5.2f} TP {m.tp_exposed_s:5.2f} EP {m.ep_exposed_s:5.2f} "
            f"DP {m.dp_exposed_s:5.2f} PP {m.pp_exposed_s:5.2f} | {stack}"
            f" | GiB {mem.total_bytes / GiB:5.1f} of {(mem.capacity_bytes - mem.headroom_bytes) / GiB:5.1f}: "
            f"act {mem.activations_bytes / GiB:5.1f}{'  INFEASIBLE' if rep.status == 'infeasible' else ''}")


def main() -> int:
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    print("optimum group (tokens/s per GPU):")
    for rec in O.load_records_tuned():
        run = O.parse_run(rec)
        if isinstance(run, str) or run.model.moe is None or only not in run.id:
            continue
        print(line(run.id, run.model, run.system, run.gpus, run.work, run.layout, run.measured_tokens_per_s_per_gpu,
                   True))
    print("modern group:")
    for rec in R.load_records("modern_training_runs"):
        setup = R.modern_setup(rec)
        if setup is None or setup[0].moe is None or only not in rec["id"]:
            continue
        model, system, n, work, lay, quantity, measured = setup
        print(line(rec["id"], model, system, n, work, lay, measured, quantity == "tokens_per_s_per_gpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
