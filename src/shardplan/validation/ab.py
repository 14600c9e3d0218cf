"""``validate --group ab``: what one changed setting does, measured by NVIDIA, against the cost model.

Each record of ``data/ab_runs.json`` is a pair of Megatron-Bridge runs of the same model, machines and batch that
differ in one setting (EP overlap, a recompute module set, TP or PP): the measured throughput ratio b/a (step times
a/b, or model TFLOP/s b/a for the same batch) against the ratio of the cost model's step times for the two layouts.
The absolute errors of the two runs partly cancel here: this is the check behind choosing between layouts.
"""

from __future__ import annotations

from typing import Any

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.hardware import get_system
from shardplan.hardware.domains import job_system
from shardplan.models import get_model
from shardplan.validation.memory import record_layout, record_workload
from shardplan.validation.runs import Case, load_records


def measured_ratio(r: dict[str, Any]) -> float:
    """Throughput of run b over run a, from their step times or their model TFLOP/s per GPU."""
    a, b = r["a"], r["b"]
    if "step_time_s" in a:
        return float(a["step_time_s"]) / float(b["step_time_s"])
    return float(b["model_tflops_per_gpu"]) / float(a["model_tflops_per_gpu"])


def predicted_ratio(r: dict[str, Any]) -> float:
    model, work = get_model(r["model"]), record_workload(r["workload"])
    steps = []
    for side in (r["a"], r["b"]):
        base = get_system(r["hardware"])
        system = job_system(base.model_copy(update={"software": base.software.model_copy(update=side["software"])}),
                            r["gpus"])
        steps.append(estimate_training(model, system, r["gpus"], work, record_layout(side["layout"])).metrics
                     .step_time_s)
    return steps[0] / steps[1]


def ab_cases() -> list[Case]:
    return [Case("ab", r["id"], "throughput_ratio_b_over_a", measured_ratio(r),
                 lambda r=r: predicted_ratio(r)) for r in load_records("ab_runs")]
