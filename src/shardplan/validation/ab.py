"""``validate --group ab``: what one changed setting does, measured by NVIDIA, against the cost model.

Each record of ``data/ab_runs.json`` is a pair of runs of the same model and machines that differ in one setting
(Megatron-Bridge: EP overlap, a recompute module set, TP or PP, or the GPU count with the batch per GPU held: weak
scaling; llm-foundry: the microbatch under FSDP with the gradient accumulation held): the measured ratio of their
tokens/s per GPU, b over a (from step times or model TFLOP/s where the batch is the same), against the ratio the cost
model predicts for the two layouts. A pair may name a tuned run of ``optimum_runs.json`` (``base_run``) for its model,
machine and stack, and state each side as changes to that run's layout.
The absolute errors of the two runs partly cancel here: this is the check behind choosing between layouts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.domains import job_system
from shardplan.hardware.spec import SystemSpec
from shardplan.models import get_model
from shardplan.models.spec import ModelSpec
from shardplan.validation.memory import record_layout, record_workload
from shardplan.validation.optimum import OptimumRun, parse_run, tuned_record
from shardplan.validation.runs import Case, load_records


def measured_ratio(r: dict[str, Any]) -> float:
    """Throughput per GPU of run b over run a, from their tokens/s per GPU, step times or model TFLOP/s per GPU."""
    a, b = r["a"], r["b"]
    if "tokens_per_s_per_gpu" in a:
        return float(b["tokens_per_s_per_gpu"]) / float(a["tokens_per_s_per_gpu"])
    if "step_time_s" in a:
        return float(a["step_time_s"]) / float(b["step_time_s"])
    return float(b["model_tflops_per_gpu"]) / float(a["model_tflops_per_gpu"])


Side = tuple[ModelSpec, SystemSpec, int, TrainWorkload, TrainLayout]


def _rate(side: Side) -> float:
    """The cost model's tokens/s per GPU of one side."""
    model, system, gpus, work, layout = side
    step = estimate_training(model, system, gpus, work, layout).metrics.step_time_s
    return work.global_batch * work.seq_len / (step * gpus)


def _sides(r: dict[str, Any]) -> tuple[Side, Side]:
    """Both runs of a pair as the cost model takes them. A pair naming a tuned run of ``optimum_runs.json``
    (``base_run``) takes its model, machine, stack and layout, each side setting its own global batch and layout
    ``changes``; otherwise each side states its layout and software on the pair's catalog model and system (a side may
    set its own GPU count and global batch)."""
    if "base_run" in r:
        run = parse_run(tuned_record(r["base_run"]))
        assert isinstance(run, OptimumRun), run
        a, b = ((run.model, run.system, run.gpus, run.work.model_copy(update={"global_batch": side["global_batch"]}),
                 dataclasses.replace(run.layout, **side["changes"])) for side in (r["a"], r["b"]))
        return a, b
    model, base = get_model(r["model"]), get_system(r["hardware"])
    out = []
    for side in (r["a"], r["b"]):
        gpus = side.get("gpus", r["gpus"])
        work = record_workload({**r["workload"], **({"global_batch": side["global_batch"]}
                                                     if "global_batch" in side else {})})
        settings = {k: v for k, v in side["software"].items() if not k.endswith("_source")}  # sources: prose
        system = job_system(base.model_copy(update={"software": base.software.model_copy(update=settings)}), gpus)
        out.append((model, system, gpus, work, record_layout(side["layout"])))
    return out[0], out[1]


def predicted_ratio(r: dict[str, Any]) -> float:
    """The cost model's tokens/s per GPU of run b over run a."""
    a, b = _sides(r)
    return _rate(b) / _rate(a)


def ab_cases() -> list[Case]:
    return [Case("ab", r["id"], "throughput_ratio_b_over_a", measured_ratio(r),
                 lambda r=r: predicted_ratio(r)) for r in load_records("ab_runs")]
