"""The ``projection`` validation group: published scaling series, calibrated on their smallest runs.

Series (same software stack and machine, several GPU counts; records in ``shardplan/data``):
Narayanan et al. 2021 Table 1 (weak scaling, 1.7B–1T on 32–3072 A100s) and Table 2 (PTD-P and ZeRO-3 at
three GPU counts for 175B and 530B); Megatron-LM's H100 weak-scaling table (1.7B–462B on 48–6144 GPUs);
and every modern record family measured at two GPU counts with one sequence length (Llama 3 405B at 8K,
NeMo 24.07 GPT-3 175B, NeMo AutoModel DeepSeek-V3; the torchtitan Llama 3.1 8B pair ran on a GPU the
``modern`` group does not map, so it is not a case). Layouts are those of the ``narayanan`` and ``modern`` groups
(Table 1–2 microbatch and interleave chosen by the planner on the uncalibrated system, then pinned), with one
rule for every record: a knob its source does not state (a modern record's microbatch or virtual-pipeline size)
is the planner's choice on the uncalibrated system with everything stated pinned, as a tuned benchmark would
run it, instead of the ``modern`` group's 1. Llama 3 405B's two points differ in exactly that: PP 16 with 32 then
16 microbatches per pipeline puts 32% then 48% of the pipeline in the bubble at interleave 1, 6% then 12% at the
planner's 7; the paper measured a 7% drop per GPU (430 to 400 TFLOP/s) and blames the bubble.
Each projected point is a case: step time predicted after calibrating on the series' smallest point(s).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from shardplan.calibration.projection import SeriesPoint, project_series
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.validation.runs import Case, _gpt, load_records, modern_setup

# modern record families measured at several GPU counts: the id with its GPU count removed is the series
_MODERN_SERIES = re.compile(r"^(megatron-lm-weakscaling|llama3-paper-405b|nemo-24\.07-gpt3-175b|"
                            r"torchtitan-llama3\.1-8b|automodel-deepseek-v3)")


def _narayanan_point(r: dict[str, Any]) -> tuple[str, SeriesPoint]:
    from shardplan.planner.training.solve import TrainRequest, plan_training

    rid, m, p, w, hw = r["id"], r["model"], r["parallel"], r["workload"], r["hardware"]
    gpus, batch = hw["num_gpus"], w["global_batch_sequences"]
    pins: dict[str, Any] = {}
    if rid.startswith("megatron21-t1-"):
        h, layers, heads = m["hidden_size"], m["layers"], m["attention_heads"]
        tp, pp, zero, series = p["tp"], p["pp"], 0, "narayanan-t1"
    else:
        h, layers, heads = (12288, 96, 96) if "174.6B" in rid else (20480, 105, 128)
        tp, pp, zero = (1, 1, 3) if p["scheme"] == "ZeRO-3" else (8, p["model_parallel_size"] // 8, 0)
        pins["microbatch"] = p["microbatch"]
        series = rid.rsplit("-", 1)[0].removeprefix("megatron21-")
    s, vocab = 2048, 51200
    # Measured step time from the published TFLOP/s and the paper's Eq. 3 FLOP count (as the narayanan group).
    flops = 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
    measured = flops / (r["metrics"]["achieved_tflops_per_gpu"] * 1e12 * gpus)
    model = _gpt(rid, h, layers, heads)
    work = TrainWorkload(seq_len=s, global_batch=batch)
    req = TrainRequest(model=model, system=get_system("dgx-a100-80gb"), num_gpus=gpus, workload=work, tp=tp, pp=pp,
                       dp=gpus // (tp * pp), recompute=Recompute.FULL, sequence_parallel=False, zero_stage=zero,
                       **pins)
    plan = plan_training(req, explain=False).plan
    if plan is None:
        raise ValueError(f"{rid}: no layout fits")
    layout = TrainLayout(tp=plan.tp, pp=plan.pp, dp=plan.dp, microbatch=plan.microbatch_size,
                         interleave=plan.interleave, recompute=Recompute(plan.recompute), zero_stage=plan.zero_stage,
                         sequence_parallel=plan.sequence_parallel)
    return series, SeriesPoint(rid.removeprefix("megatron21-"), model, gpus, work, layout, measured)


def _modern_point(r: dict[str, Any]) -> tuple[str, Any, SeriesPoint] | None:
    match = _MODERN_SERIES.match(r["id"])
    setup = modern_setup(r) if match else None
    if match is None or setup is None:
        return None
    model, system, n, work, layout, quantity, value = setup
    layout = _unstated_by_planner(r["parallel"], model, system, n, work, layout)
    # The measured step time: tokens per GPU-second, or model FLOPs (cost model's count) per GPU-second.
    if quantity == "tokens_per_s_per_gpu":
        step = work.global_batch * work.seq_len / (value * n)
    else:
        from shardplan.costmodel.training.evaluate import estimate_training

        rep = estimate_training(model, system, n, work, layout)
        model_flops = rep.metrics.mfu * rep.metrics.step_time_s * n * system.gpu.peak(work.dtype)
        step = model_flops / (value * 1e12 * n)
    series = f"{match.group(1)}{'-compile' if 'compile' in r['id'] else ''}-s{work.seq_len}"
    return series, system, SeriesPoint(r["id"], model, n, work, layout, step)


def _unstated_by_planner(par: dict[str, Any], model: Any, system: Any, n: int, work: TrainWorkload,
                         layout: TrainLayout) -> TrainLayout:
    """``layout`` with the microbatch and interleave the record leaves unstated chosen by the planner on the
    uncalibrated system (everything else pinned as published); unchanged when both are stated."""
    from shardplan.planner.training.request import TrainRequest
    from shardplan.planner.training.solve import plan_training

    free_mb, free_v = par.get("microbatch") is None, par.get("vp") is None
    if not (free_mb or free_v):
        return layout
    lay = layout
    req = TrainRequest(model=model, system=system, num_gpus=n, workload=work, tp=lay.tp, pp=lay.pp, dp=lay.dp,
                       cp=lay.cp, ep=lay.ep, etp=lay.etp, recompute=lay.recompute,
                       recompute_layers=lay.recompute_layers, sequence_parallel=lay.sequence_parallel,
                       zero_stage=lay.zero_stage, microbatch=None if free_mb else lay.microbatch,
                       interleave=None if free_v else lay.interleave, uniform_stages=True)
    plan = plan_training(req, explain=False).plan
    if plan is None:  # nothing fits with the stated pins: keep the modern group's layout
        return layout
    return dataclasses.replace(layout, microbatch=plan.microbatch_size, interleave=plan.interleave)


def series() -> dict[str, tuple[Any, list[SeriesPoint]]]:
    """Every series with its (uncalibrated) system and points, in the order of the records."""
    out: dict[str, tuple[Any, list[SeriesPoint]]] = {}
    a100 = get_system("dgx-a100-80gb")
    for r in load_records("training_runs"):
        if r["id"].startswith(("megatron21-t1-", "megatron21-t2-")):
            name, point = _narayanan_point(r)
            out.setdefault(name, (a100, []))[1].append(point)
    for r in load_records("modern_training_runs"):
        got = _modern_point(r)
        if got is not None:
            name, system, point = got
            out.setdefault(name, (system, []))[1].append(point)
    return {k: v for k, v in out.items() if len(v[1]) >= 2}


def projection() -> list[Case]:
    """One case per projected point: measured vs predicted step time after calibrating on the smallest runs."""
    out = []
    for name, (system, points) in series().items():
        for p in project_series(system, points):
            out.append(Case("projection", f"{name}: {p.id} (calibrated on {', '.join(p.calibrated_on)})",
                            "step_time_s", p.measured_step_time_s, lambda t=p.predicted_step_time_s: t))
    return out
