"""``estimate_training``: the full cost breakdown of one pinned layout, the float reference path.

It validates the layout (bad input raises ``ShardplanError``), evaluates it with ``train_cost`` (the
same function the planner's tables use), and reports ``infeasible`` — with the binding stage and
category and the cheapest single changes that fit — when it does not fit in memory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from shardplan.costmodel.core import bands
from shardplan.costmodel.core.layouts import check_gpus
from shardplan.costmodel.training.cp_rules import check_cp_comm
from shardplan.costmodel.training.knobs import DEFAULT_RECOMPUTE_MODULES
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import cached_mtp_params, cached_weight_bytes
from shardplan.costmodel.training.recompute_modules import selective_terms
from shardplan.costmodel.training.report import (
    LayerRow,
    MemoryOut,
    OffloadOut,
    StageRow,
    TrainMetrics,
    TrainPlanOut,
    TrainReport,
)
from shardplan.costmodel.training.space import check_dtype, validate_layout
from shardplan.costmodel.training.stage_memory import param_memory
from shardplan.costmodel.training.stages import STAGES
from shardplan.costmodel.training.step import TrainCost, train_cost
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import format_bytes, format_seconds

CATEGORIES = ("weights", "grads", "optimizer", "activations", "framework")


def normalize(lay: TrainLayout) -> TrainLayout:
    """Sequence parallelism is a no-op without TP: drop it so equal layouts compare equal."""
    return dataclasses.replace(lay, sequence_parallel=False) if lay.tp == 1 else lay


def host_capacity(system: SystemSpec, work: TrainWorkload) -> float:
    return system.host_memory_bytes * (1 - work.host_reserve_fraction)


def gpu_capacity(system: SystemSpec, work: TrainWorkload) -> float:
    """GPU memory a plan may fill: the GPU's memory less the headroom. The one capacity every fit test uses."""
    return float(system.gpu.memory_bytes) - work.headroom_bytes(system.gpu.memory_bytes)


def fits(cost: TrainCost, system: SystemSpec, work: TrainWorkload) -> np.ndarray:
    """Rows whose every stage fits in GPU memory less the headroom and whose offloads fit in host memory."""
    return (cost.peak_memory <= gpu_capacity(system, work)) & (cost.host_bytes_per_node <= host_capacity(system, work))


def _f(x: np.ndarray, i: int) -> float:
    return float(np.asarray(x)[i])


def _recompute_layers(cost: TrainCost, lay: TrainLayout, i: int) -> int | None:
    """Fully recomputed layers per stage as reported: None (all) when it covers every layer of every stage."""
    k = lay.recompute_layers
    most = max(int(_f(st.shape.layers, i)) for st in cost.stages if bool(st.shape.exists[i]))
    return None if k is None or lay.recompute != Recompute.FULL or k >= most else k


def report_row(cost: TrainCost, i: int, *, model: ModelSpec, system: SystemSpec, num_gpus: int) -> TrainReport:
    """The report of row ``i`` of an evaluated batch of layouts."""
    r, w = cost.ctx.rows, cost.ctx.work
    lay = r.row(i)
    cap = float(system.gpu.memory_bytes)
    headroom = w.headroom_bytes(cap)
    usable = gpu_capacity(system, w)
    peak = system.gpu.peak(w.dtype)
    step = _f(cost.step_time_s, i)
    gb = int(r.gb[i])
    plan = TrainPlanOut(
        tp=lay.tp, pp=lay.pp, dp=lay.dp, ep=lay.ep, cp=lay.cp, microbatch_size=lay.microbatch,
        num_microbatches=int(round(_f(cost.num_microbatches, i))), global_batch=gb, interleave=lay.interleave,
        schedules=int(round(float(cost.ctx.schedules[i]))), mtp_layers=w.mtp_layers,
        recompute=str(lay.recompute), recompute_layers=_recompute_layers(cost, lay, i), zero_stage=lay.zero_stage,
        sequence_parallel=lay.sequence_parallel,
        offload=OffloadOut(weights=lay.offload_weights, optimizer=lay.offload_optimizer,
                           activations=lay.offload_activations),
        etp=lay.expert_tp if model.moe is not None else None,
        recompute_modules=list(lay.recompute_modules or DEFAULT_RECOMPUTE_MODULES)
        if lay.recompute == Recompute.SELECTIVE else None,
        cp_comm_type=str(system.software.cp_comm_type) if lay.cp > 1 else None,
    )
    metrics = TrainMetrics(
        step_time_s=step, tokens_per_s=gb * w.seq_len / step,
        mfu=_f(cost.model_flops, i) / (step * num_gpus * peak),
        hfu=_f(cost.hardware_flops, i) / (step * num_gpus * peak),
        tflops_per_gpu=_f(cost.hardware_flops, i) / (step * num_gpus) / 1e12,
        executed_tflops_per_gpu=_f(cost.executed_flops, i) / (step * num_gpus) / 1e12,
        bubble_fraction=_f(cost.bubble_s, i) / step, pipeline_s=_f(cost.pipeline_s, i), bubble_s=_f(cost.bubble_s, i),
        tp_exposed_s=_f(cost.tp_exposed_s, i), pp_exposed_s=_f(cost.pp_exposed_s, i),
        dp_exposed_s=_f(cost.dp_exposed_s, i), zero3_exposed_s=_f(cost.zero3_exposed_s, i),
        ep_exposed_s=_f(cost.ep_exposed_s, i), cp_exposed_s=_f(cost.cp_exposed_s, i),
        host_sync_s=_f(cost.host_s, i), optimizer_s=_f(cost.optimizer_s, i),
    )
    half = bands.band(system, "train", moe=model.moe is not None)
    metrics = metrics.model_copy(update={
        "band_pct": None if half is None else 100 * half, "step_time_s_range": bands.around(step, half),
        "tokens_per_s_range": bands.around(metrics.tokens_per_s, half)})
    stages = [
        StageRow(
            stage=st.shape.name, index=int(_f(st.shape.index, i)), layers=int(_f(st.shape.layers, i)),
            moe_layers=int(_f(st.shape.moe_layers, i)), fwd_time_s=_f(st.fwd_s, i), bwd_time_s=_f(st.bwd_s, i),
            recompute_time_s=_f(st.recompute_s, i), weights_bytes=_f(st.weights, i), gradients_bytes=_f(st.grads, i),
            optimizer_bytes=_f(st.optimizer, i), activations_bytes=_f(st.activations, i),
            framework_bytes=_f(st.framework, i), total_bytes=_f(st.total, i), capacity_bytes=cap,
            headroom_bytes=headroom, fits=_f(st.total, i) <= usable,
        )
        for st in cost.stages if bool(st.shape.exists[i])
    ]
    b = int(cost.binding_stage[i])
    bind = cost.stages[b]
    memory = MemoryOut(
        stage=STAGES[b], weights_bytes=_f(bind.weights, i), gradients_bytes=_f(bind.grads, i),
        optimizer_bytes=_f(bind.optimizer, i), activations_bytes=_f(bind.activations, i),
        framework_bytes=_f(bind.framework, i), total_bytes=_f(bind.total, i), capacity_bytes=cap,
        headroom_bytes=headroom, cpu_bytes=_f(bind.cpu_bytes, i), host_bytes_per_node=_f(cost.host_bytes_per_node, i),
        host_capacity_bytes=host_capacity(system, w),
    )
    return TrainReport(
        status="feasible", model=model.name, hardware=system.name, num_gpus=num_gpus, seq_len=w.seq_len,
        plan=plan, metrics=metrics, memory=memory, stages=stages, layers=layer_rows(cost, i),
    )


def layer_rows(cost: TrainCost, i: int) -> list[LayerRow]:
    """One row per layer kind per stage: per-layer costs and memory (multiply by ``count`` for the stage)."""
    r = cost.ctx.rows
    rows: list[LayerRow] = []
    for st in cost.stages:
        if not bool(st.shape.exists[i]):
            continue
        counts = {kind: int(_f(st.shape.count(kind), i)) for kind in cost.kinds}
        mixers = sum(c for kind, c in counts.items() if kind not in ("embedding", "head", "mlp", "moe"))
        n = int(_f(st.shape.layers, i))
        mode = int(r.rc[i])
        k_full = min(int(r.rk[i]), n) if mode == 2 else 0
        for kind, kc in cost.kinds.items():
            count = counts[kind]
            if count == 0:
                continue
            if kind in ("embedding", "head"):
                splits = [(count, 0 if mode == 2 else mode)]
            elif mode == 2:
                # the first k layers of the stage are fully recomputed (dense layers precede MoE layers; token
                # mixers of several kinds in proportion)
                if kind in ("mlp", "moe"):
                    before = 0 if kind != "moe" else counts.get("mlp", 0)
                    rec = min(max(k_full - before, 0), count)
                else:
                    rec = min(round(k_full * count / max(mixers, 1)), count)
                splits = [(rec, 2), (count - rec, 0)]
            else:
                splits = [(count, mode)]
            for c, md in splits:
                if c > 0:
                    rows.append(_layer_row(cost, st.shape.name, kind, kc, c, md, i))
    return rows


def _layer_row(cost: TrainCost, stage: str, kind: str, kc: Any, count: int, mode: int, i: int) -> LayerRow:
    """One per-layer row: ``count`` layers of ``kind`` under recompute ``mode`` (0 none, 1 selective, 2 full)."""
    rc_time = _f(kc.selective.time, i) if mode == 1 else (_f(kc.rerun.time, i) if mode == 2 else 0.0)
    rc_flops = _f(kc.selective.flops, i) if mode == 1 else (_f(kc.rerun.flops, i) if mode == 2 else 0.0)
    weights, grads, opt = (float(np.asarray(x)[i]) for x in param_memory(cost.ctx, kc.params.dense, kc.params.expert))
    mtp = kind == "head" and cost.ctx.work.mtp_layers > 0  # the head row carries the MTP modules (stages.kind_costs)
    if kind != "embedding" and (kind != "head" or mtp):  # the layers' quantized copies (stage_memory.memory_of)
        cached = _f(cached_mtp_params(cost.ctx), i) if mtp else _f(kc.params.total, i)
        weights += float(cached_weight_bytes(cost.ctx)[i]) * cached
    acts = 0.0
    if kc.acts is not None:
        acts = _f((kc.acts.none, kc.acts.selective, kc.acts.full)[mode], i)
    if mode == 1:  # the layout's --recompute-modules beyond core_attn: as the stage rows count them (step._stage)
        mods = selective_terms({kind: kc}, {kind: 1}, cost.ctx.rows.sel)
        rc_time, rc_flops = rc_time + _f(mods.time, i), rc_flops + _f(mods.flops, i)
        acts -= _f(mods.freed, i)
    return LayerRow(
        stage=stage, kind="head+mtp" if mtp else kind, count=count,
        recompute=("none", "selective", "full")[mode] if kc.acts is not None else "none",
        fwd_flops=_f(kc.fwd.flops, i), bwd_flops=_f(kc.bwd.flops, i), recompute_flops=rc_flops,
        fwd_time_s=_f(kc.fwd.time, i), bwd_time_s=_f(kc.bwd.time, i), recompute_time_s=rc_time,
        hbm_bytes=_f(kc.fwd.nbytes, i) + _f(kc.bwd.nbytes, i),
        comm_tp_s=_f(kc.fwd.comm_tp + kc.bwd.comm_tp, i), comm_cp_s=_f(kc.fwd.comm_cp + kc.bwd.comm_cp, i),
        comm_ep_s=_f(kc.fwd.comm_ep + kc.bwd.comm_ep, i), host_s=_f(kc.fwd.host + kc.bwd.host, i),
        params=_f(kc.params.total, i),
        weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=opt, activations_bytes=acts,
    )


def infeasibility(report: TrainReport) -> str:
    """One sentence naming the binding resource."""
    mem = report.memory
    usable = mem.capacity_bytes - mem.headroom_bytes
    if mem.total_bytes > usable:
        cats = {"activations": mem.activations_bytes, "weights": mem.weights_bytes, "gradients": mem.gradients_bytes,
                "optimizer state": mem.optimizer_bytes}
        big = max(cats, key=cats.__getitem__)
        return (f"GPU memory: the {mem.stage} stage needs {format_bytes(mem.total_bytes)} per GPU > "
                f"{format_bytes(usable)} ({format_bytes(mem.capacity_bytes)} less {format_bytes(mem.headroom_bytes)}"
                f" headroom; {big} {format_bytes(cats[big])})")
    return (f"host memory: offloaded tensors need {format_bytes(mem.host_bytes_per_node)} per node > "
            f"{format_bytes(mem.host_capacity_bytes)} usable")


def _variants(lay: TrainLayout, work: TrainWorkload) -> list[tuple[str, TrainLayout]]:
    """Single changes that save memory, each described as the user would apply it."""
    out: list[tuple[str, TrainLayout]] = []
    rep = dataclasses.replace
    if lay.recompute != Recompute.FULL:
        drop = " (drop --recompute-modules)" if lay.recompute_modules is not None else ""
        out.append((f"--recompute full{drop}", rep(lay, recompute=Recompute.FULL, recompute_layers=None,
                                                   recompute_modules=None)))
    if lay.tp > 1 and not lay.sequence_parallel:
        out.append(("--sequence-parallel", rep(lay, sequence_parallel=True)))
    if lay.microbatch > 1:
        out.append((f"--microbatch {lay.microbatch // 2}", rep(lay, microbatch=lay.microbatch // 2)))
    if lay.zero_stage < 1:
        out.append(("--zero 1", rep(lay, zero_stage=1)))
    if lay.pp == 1 and lay.zero_stage < 3:
        out.append(("--zero 3", rep(lay, zero_stage=3)))
    for pct in (25, 50, 100):
        if lay.offload_optimizer < pct / 100:
            out.append((f"offload {pct}% of optimizer state to the CPU", rep(lay, offload_optimizer=pct / 100)))
    if lay.pp > 1 and lay.interleave > 1:
        out.append(("--interleave 1", rep(lay, interleave=1)))
    return out


def _checked(model: ModelSpec, system: SystemSpec, num_gpus: int, work: TrainWorkload,
             layout: TrainLayout) -> TrainLayout:
    """The layout, normalized, once it passes every rule (bad input otherwise)."""
    check_gpus(system, num_gpus)
    check_dtype(work, system.gpu)
    validate_layout(model, num_gpus, work, layout)
    check_cp_comm(model, layout, system.software.cp_comm_type, work.seq_len)
    if system.software.ep_comm_overlap and "moe" in (layout.recompute_modules or ()):
        # Megatron-LM d98e8a6 transformer_config.py asserts this pair away
        raise ShardplanError("moe cannot be recomputed with the system's ep_comm_overlap (Megatron's "
                             "--overlap-moe-expert-parallel-comm); use moe_act or shared_experts",
                             field="recompute_modules")
    return normalize(layout)


def estimate_training(model: ModelSpec, system: SystemSpec, num_gpus: int, work: TrainWorkload,
                      layout: TrainLayout) -> TrainReport:
    """Validate and evaluate one layout; an over-capacity layout is an ``infeasible`` result with fixes."""
    layout = _checked(model, system, num_gpus, work, layout)
    variants = _variants(layout, work)
    rows = LayoutArrays.from_layouts([layout] + [normalize(v) for _, v in variants], work.global_batch)
    cost = train_cost(model, system, work, rows)
    ok = fits(cost, system, work)
    report = report_row(cost, 0, model=model, system=system, num_gpus=num_gpus)
    if ok[0]:
        return report
    fixes = sorted((float(cost.step_time_s[j + 1]), text) for j, (text, _) in enumerate(variants) if ok[j + 1])
    suggestions = [f"{text} (step {format_seconds(t)})" for t, text in fixes[:4]]
    if not suggestions:
        suggestions = ["raise --tp or --pp, or use more GPUs (`shardplan train` finds the smallest layout that fits)"]
    return report.model_copy(update={"status": "infeasible", "reason": infeasibility(report),
                                     "suggestions": suggestions})


def estimate_rows(model: ModelSpec, system: SystemSpec, num_gpus: int, work: TrainWorkload,
                  layouts: list[TrainLayout], batches: list[int]) -> list[TrainReport]:
    """``estimate_training`` of several layouts (each with its global batch), those that fit costed in one batch of
    rows: the same arithmetic row by row, so the same reports; a layout that does not fit goes through
    ``estimate_training`` alone for its fixes."""
    checked = [_checked(model, system, num_gpus, work.model_copy(update={"global_batch": gb}), lay)
               for lay, gb in zip(layouts, batches, strict=True)]
    rows = LayoutArrays.from_layouts(checked, work.global_batch)
    rows = rows.replace(gb=np.asarray(batches, dtype=np.int64))
    cost = train_cost(model, system, work, rows)
    ok = fits(cost, system, work)
    return [report_row(cost, i, model=model, system=system, num_gpus=num_gpus) if ok[i]
            else estimate_training(model, system, num_gpus, work.model_copy(update={"global_batch": gb}), lay)
            for i, (lay, gb) in enumerate(zip(layouts, batches, strict=True))]


def at_optimum(metrics: TrainMetrics, system: SystemSpec, model: ModelSpec) -> TrainMetrics:
    """``metrics`` of a layout the planner chose, with the interval at the optimum (``bands.optimum_band``) and
    the step time and tokens/s it spans; unchanged where the table has none (a calibrated system)."""
    got = bands.optimum_band(system, moe=model.moe is not None)
    if got is None:
        return metrics
    (lo, hi), runs = got
    return metrics.model_copy(update={
        "optimum_band_pct": [100 * lo, 100 * hi], "optimum_band_runs": runs,
        "optimum_step_time_s_range": bands.within(metrics.step_time_s, [lo, hi], time=True),
        "optimum_tokens_per_s_range": bands.within(metrics.tokens_per_s, [lo, hi])})
