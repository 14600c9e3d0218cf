"""The report of one global layout with a per-rank split (``stage_split.evaluate_split``): every number is that
evaluation's, per pipeline rank, in the shape of ``estimate_training``'s report.

The pipeline, bubble, data-parallel, ZeRO-3 and optimizer times and the stage table come from the per-rank
evaluation; the model FLOPs are the layout's; the executed FLOPs count each rank's recomputed layers; the
exposed TP/CP/EP communication is the slowest rank's and the pipeline sends rank 0's, as in ``train_cost``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardplan.costmodel.core import bands
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import (
    estimate_training,
    gpu_capacity,
    host_capacity,
    infeasibility,
    layer_rows,
    normalize,
)
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.report import LayerRow, MemoryOut, StageRow, TrainReport
from shardplan.costmodel.training.stage_split import StageSplitCost, check_split, evaluate_split, pipeline_factor
from shardplan.costmodel.training.stages import KindCost, kind_costs
from shardplan.costmodel.training.step import _flops, train_cost
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


def stage_name(i: int, p: int) -> str:
    return "first" if i == 0 else ("last" if i == p - 1 else "middle")


def _executed_flops(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout,
                    recomputed: int, kinds: dict[str, KindCost] | None = None) -> tuple[float, float, float]:
    """Model, hardware (model + recompute) and kernel-executed FLOPs per step with ``recomputed`` layers fully
    recomputed over all ranks (``kinds``: the layout's per-kind costs when the caller has them)."""
    rows = LayoutArrays.from_layouts([layout], work.global_batch)
    # _flops recomputes min(rk·pp, L)/L of the forward: rk = (Σ k_i)/pp gives Σ k_i / L exactly.
    rows = rows.replace(rk=np.array([recomputed / layout.pp]))
    ctx = Ctx(model, system, work, rows)
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)
    mf, hf, ef = _flops(ctx, kind_costs(ctx) if kinds is None else kinds, m)
    return float(mf[0]), float(hf[0]), float(ef[0])


def _layer_counts(model: ModelSpec, sc: StageSplitCost, i: int) -> dict[str, int]:
    c = sc.costs
    p = len(sc.stage_layers)
    moe = int(c.stage.shape.moe_layers[i])
    return {"embedding": int(i == 0), "attention": sc.stage_layers[i], "mlp": sc.stage_layers[i] - moe,
            "moe": moe, "head": int(i == p - 1)}


def _recomputed(counts: dict[str, int], kind: str, k: int) -> int:
    """Layers of ``kind`` among a rank's ``k`` fully recomputed ones (its first k: dense MLP layers precede MoE
    layers; ``evaluate.layer_rows``' rule)."""
    if kind in ("embedding", "head"):
        return 0
    before = counts["mlp"] if kind == "moe" else 0
    return min(max(k - before, 0), counts[kind])


def _split_layer_rows(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout,
                      sc: StageSplitCost, uniform: list[LayerRow]) -> list[LayerRow]:
    """Per-layer rows with the split's counts (middle: the heaviest middle rank). A layer's costs depend on its kind
    and recompute mode, not on its rank, so every rank's kinds are listed, also one the uniform split does not put
    there (a MoE layer on a first rank the uniform split fills with dense layers). Under full recompute each rank's
    layers split into its recomputed ones and the rest, as ``stage_recompute_layers`` says, each row carrying the
    per-layer costs of its mode (read from the layout recomputing every layer, and from it recomputing none)."""
    p = layout.pp
    mid = max(range(1, p - 1), key=lambda i: sc.per_mb_s[i], default=None)
    ranks = [(0, "first"), *([] if mid is None else [(mid, "middle")]), (p - 1, "last")]
    full = str(layout.recompute) == "full"
    if full:
        variants = [normalize(dataclasses.replace(layout, recompute=rc, recompute_layers=None))
                    for rc in (Recompute.FULL, Recompute.NONE)]
        cost = train_cost(model, system, work, LayoutArrays.from_layouts(variants, work.global_batch))
        templates = [*layer_rows(cost, 0), *layer_rows(cost, 1)]
    else:
        templates = uniform
    by_kind: dict[tuple[str, bool], LayerRow] = {}
    for row in templates:  # "head+mtp" (evaluate._layer_row) is the head's row
        by_kind.setdefault((row.kind.removesuffix("+mtp"), full and row.recompute == "full"), row)
    rows: list[LayerRow] = []
    for i, name in ranks:
        counts = _layer_counts(model, sc, i)
        for kind in ("embedding", "attention", "mlp", "moe", "head"):
            rec = _recomputed(counts, kind, sc.recompute_layers[i]) if full else 0
            for recomputed, count in ((True, rec), (False, counts[kind] - rec)):
                if count and (kind, recomputed) in by_kind:
                    rows.append(by_kind[(kind, recomputed)].model_copy(update={"stage": name, "count": count}))
    return rows


def _same_without_recompute(model: ModelSpec, system: SystemSpec, work: TrainWorkload, layout: TrainLayout,
                            sc: StageSplitCost) -> bool:
    plain = evaluate_split(model, system, work, dataclasses.replace(layout, recompute=Recompute.NONE,
                                                                    recompute_layers=None),
                           sc.stage_layers, None, sc.offload_pct)
    return plain.step_time_s == sc.step_time_s and plain.memory_bytes == sc.memory_bytes


def split_report(model: ModelSpec, system: SystemSpec, num_gpus: int, work: TrainWorkload, layout: TrainLayout,
                 sc: StageSplitCost, base: TrainReport, kinds: dict[str, KindCost] | None = None) -> TrainReport:
    """``base`` (the uniform estimate of ``layout``) with the plan, metrics, memory and stages of ``sc``
    (``kinds``: the layout's per-kind costs when the caller has them; the operator lists are not read)."""
    c, st = sc.costs, sc.costs.stage
    p = layout.pp
    step = sc.step_time_s
    peak = system.gpu.peak(work.dtype)
    recomputed = sum(sc.recompute_layers) if str(layout.recompute) == "full" else 0
    model_flops, hw_flops, exec_flops = _executed_flops(model, system, work, layout, recomputed, kinds)
    factor = pipeline_factor(layout, work)
    b0 = base.metrics
    # The slowest rank's exposed collectives (train_cost's convention): per-layer fwd+bwd collective time × its counts,
    # the embedding's and the LM head's on the ranks that hold them
    per_kind = {row.kind: row for row in base.layers}
    counts0 = _layer_counts(model, sc, int(np.argmax(sc.per_mb_s)))

    def exposed(attr: str) -> float:
        return factor * sum(n * getattr(per_kind[k], attr) for k, n in counts0.items() if k in per_kind)

    metrics = b0.model_copy(update=dict(
        step_time_s=step, tokens_per_s=work.global_batch * work.seq_len / step,
        mfu=model_flops / (step * num_gpus * peak), hfu=hw_flops / (step * num_gpus * peak),
        tflops_per_gpu=hw_flops / (step * num_gpus) / 1e12,
        executed_tflops_per_gpu=exec_flops / (step * num_gpus) / 1e12, bubble_fraction=sc.bubble_s / step,
        pipeline_s=sc.pipeline_s, bubble_s=sc.bubble_s, pp_exposed_s=factor * float(st.p2p_s[0]),
        tp_exposed_s=exposed("comm_tp_s"), cp_exposed_s=exposed("comm_cp_s"), ep_exposed_s=exposed("comm_ep_s"),
        host_sync_s=exposed("host_s"),
        dp_exposed_s=float(c.dp_s[0]), zero3_exposed_s=float(c.zero3_s[0]),
        optimizer_s=float(c.optimizer_s[0]),
    ))
    half = None if b0.band_pct is None else b0.band_pct / 100  # the band, around this split's own numbers
    metrics = metrics.model_copy(update=dict(step_time_s_range=bands.around(step, half),
                                             tokens_per_s_range=bands.around(metrics.tokens_per_s, half)))
    cap = float(system.gpu.memory_bytes)
    usable = gpu_capacity(system, work)
    headroom = cap - usable
    stages = [
        StageRow(stage=stage_name(i, p), index=i, layers=sc.stage_layers[i], moe_layers=int(st.shape.moe_layers[i]),
                 fwd_time_s=float(st.fwd_s[i]), bwd_time_s=float(st.bwd_s[i]),
                 recompute_time_s=float(st.recompute_s[i]), weights_bytes=float(st.weights[i]),
                 gradients_bytes=float(st.grads[i]), optimizer_bytes=float(st.optimizer[i]),
                 activations_bytes=float(st.activations[i]), framework_bytes=float(st.framework[i]),
                 total_bytes=float(st.total[i]), capacity_bytes=cap, headroom_bytes=headroom,
                 fits=float(st.total[i]) <= usable)
        for i in range(p)
    ]
    b = int(np.argmax(st.total))
    memory = MemoryOut(
        stage=stage_name(b, p), weights_bytes=float(st.weights[b]), gradients_bytes=float(st.grads[b]),
        optimizer_bytes=float(st.optimizer[b]), activations_bytes=float(st.activations[b]),
        framework_bytes=float(st.framework[b]), total_bytes=float(st.total[b]), capacity_bytes=cap,
        headroom_bytes=headroom,
        cpu_bytes=float(st.cpu_bytes[b]), host_bytes_per_node=sc.host_bytes_per_node,
        host_capacity_bytes=host_capacity(system, work),
    )
    ks = sc.recompute_layers
    # A full-recompute layout whose split recomputes no layer is named without recompute where that layout evaluates
    # the same (tests/planner/test_stages_plan.py); else (e.g. EP overlap, which Megatron refuses under full
    # recompute) it stays full with zero layers per rank, as evaluated.
    idle = str(layout.recompute) == "full" and not any(ks) and _same_without_recompute(
        model, system, work, layout, sc)
    full = str(layout.recompute) == "full" and not idle
    partial = [k for k, n in zip(ks, sc.stage_layers, strict=True) if k < n]
    plan = base.plan.model_copy(update=dict(
        **({"recompute": "none"} if idle else {}),
        stage_layers=list(sc.stage_layers),
        stage_recompute_layers=list(ks) if full else None,
        stage_offload_activations=[x / 100 for x in sc.offload_pct],
        # a summary (stage_recompute_layers is the plan): the most layers a partly recomputed rank recomputes
        recompute_layers=(max(partial) or None if partial else None) if full else None if idle else
        base.plan.recompute_layers,
        offload=base.plan.offload.model_copy(update={"activations": max(sc.offload_pct) / 100}),
    ))
    layers = _split_layer_rows(model, system, work, layout, sc, base.layers)
    return base.model_copy(update=dict(plan=plan, metrics=metrics, memory=memory, stages=stages, layers=layers))


def estimate_split(model: ModelSpec, system: SystemSpec, num_gpus: int, work: TrainWorkload, layout: TrainLayout,
                   stage_layers: list[int], recompute_layers: list[int] | None = None) -> TrainReport:
    """``estimate_training`` of ``layout`` with ``stage_layers`` layers (and optionally ``recompute_layers`` fully
    recomputed layers, under ``--recompute full``) on each pipeline rank."""
    base = estimate_training(model, system, num_gpus, work, layout)  # validates the layout
    check_split(model, layout, stage_layers)
    if recompute_layers is not None:
        if str(layout.recompute) != "full":
            raise ShardplanError("stage-recompute-layers needs --recompute full", field="stage-recompute-layers")
        if len(recompute_layers) != layout.pp or any(k < 0 or k > n for k, n in
                                                     zip(recompute_layers, stage_layers, strict=True)):
            raise ShardplanError(f"stage-recompute-layers needs {layout.pp} counts, each between 0 and that "
                                 f"rank's layers", field="stage-recompute-layers")
    base = base.model_copy(update={"status": "feasible", "reason": None, "suggestions": []})
    sc = evaluate_split(model, system, work, layout, stage_layers, recompute_layers)
    report = split_report(model, system, num_gpus, work, layout, sc, base)
    if sc.fits:
        return report
    return report.model_copy(update={"status": "infeasible", "reason": infeasibility(report), "suggestions": [
        "move layers off the binding stage (--stage-layers), or recompute more of its layers"]})
