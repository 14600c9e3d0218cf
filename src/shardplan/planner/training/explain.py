"""Why a training plan wins, how the obvious alternatives compare, and what to change when nothing fits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardplan.costmodel.training.report import TrainReport
from shardplan.costmodel.training.stages import STAGES
from shardplan.costmodel.training.table import TrainTable
from shardplan.hardware.spec import SystemSpec
from shardplan.planner.core.select import explain_infeasible
from shardplan.planner.training.request import TrainRequest, space_request
from shardplan.planner.training.schema import Comparison, SolverOut, TrainPlan
from shardplan.units import format_bytes


def _name(tp: int, pp: int) -> str:
    return f"TP={tp} PP={pp}"


def _binding(table: TrainTable, i: int) -> str:
    """'the first stage (activations 61 GiB)' for row i."""
    st = table.cost.stages[int(table.cost.binding_stage[i])]
    cats = {"activations": st.activations[i], "weights": st.weights[i], "gradients": st.grads[i],
            "optimizer state": st.optimizer[i]}
    big = max(cats, key=lambda k: cats[k])
    return f"{st.shape.name} stage ({big} {format_bytes(float(cats[big]))})"


def comparisons(table: TrainTable, chosen: int, system: SystemSpec, limit: int = 8) -> list[Comparison]:
    """The best layout of each other (TP, PP) pair: its step time, or why it does not fit."""
    r, t = table.rows, table.step_time_s
    cap = float(system.gpu.memory_bytes)
    pairs = sorted({(int(a), int(b)) for a, b in zip(r.tp, r.pp, strict=True)})
    base = float(t[chosen])
    out: list[Comparison] = []
    for tp, pp in pairs:
        if (tp, pp) == (int(r.tp[chosen]), int(r.pp[chosen])):
            continue
        mask = (r.tp == tp) & (r.pp == pp)
        ok = mask & table.fits
        if ok.any():
            i = int(np.flatnonzero(ok)[np.argmin(t[ok])])
            out.append(Comparison(layout=_name(tp, pp), fits=True, step_time_s=float(t[i]),
                                  delta_pct=100 * (float(t[i]) / base - 1),
                                  note=f"best with DP={int(r.dp[i])}, microbatch {int(r.mb[i])}"))
        else:
            i = int(np.flatnonzero(mask)[np.argmin(table.cost.peak_memory[mask])])
            need = float(table.cost.peak_memory[i])
            note = (f"does not fit: {format_bytes(need)} > {format_bytes(cap)} on the {_binding(table, i)}"
                    if need > cap else "does not fit: offloaded tensors exceed host memory")
            out.append(Comparison(layout=_name(tp, pp), fits=False, note=note))
    out.sort(key=lambda c: (not c.fits, c.step_time_s or 0.0))
    return out[:limit]


def explanation(best: TrainReport, table: TrainTable, base: int | None, system: SystemSpec) -> list[str]:
    """Sentences: memory headroom, where time goes, and the gain over the hand-written baseline."""
    m, mem = best.metrics, best.memory
    lines = [
        f"Memory binds on the {mem.stage} stage: {format_bytes(mem.total_bytes)} of "
        f"{format_bytes(mem.capacity_bytes)} ({1 - mem.total_bytes / mem.capacity_bytes:.0%} headroom).",
    ]
    parts = [("pipeline bubble", m.bubble_s), ("TP communication", m.tp_exposed_s), ("pipeline sends", m.pp_exposed_s),
             ("DP gradient sync", m.dp_exposed_s), ("ZeRO-3 gathers", m.zero3_exposed_s),
             ("expert all-to-all", m.ep_exposed_s), ("context-parallel ring", m.cp_exposed_s),
             ("optimizer step", m.optimizer_s)]
    shown = [f"{name} {v / m.step_time_s:.1%}" for name, v in parts if v / m.step_time_s >= 0.005]
    if shown:
        lines.append("Exposed overheads per step: " + ", ".join(shown) + ".")
    p = best.plan
    if p.recompute != "none":
        lines.append(f"Recompute {p.recompute}" + (f" on {p.recompute_layers} layers per stage" if p.recompute_layers
                                                    else "") + ": storing every activation does not fit or is slower.")
    if p.offload.optimizer or p.offload.weights or p.offload.activations:
        lines.append("CPU offload is the cheapest way found to fit this layout in GPU memory.")
    if base is not None:
        t_base = float(table.step_time_s[base])
        r = table.rows
        if abs(t_base - m.step_time_s) > 1e-9:
            lines.append(
                f"vs. the usual hand layout ({_name(int(r.tp[base]), int(r.pp[base]))}, microbatch {int(r.mb[base])}, "
                f"recompute {['none', 'selective', 'full'][int(r.rc[base])]}): {t_base / m.step_time_s:.2f}× faster "
                f"({t_base:.3g} s → {m.step_time_s:.3g} s per step).")
        else:
            lines.append("The usual hand layout (TP = a node, shallowest pipeline that fits) is already optimal.")
    return lines


def _describe(table: TrainTable, i: int) -> str:
    """'TP=4 PP=8 DP=1, recompute full, offload optimizer 60%' for row i."""
    r = table.rows
    text = f"{_name(int(r.tp[i]), int(r.pp[i]))} DP={int(r.dp[i])}"
    if r.rc[i]:
        text += f", recompute {['none', 'selective', 'full'][int(r.rc[i])]}"
    offload = [f"{name} {v:.0%}" for name, v in (("optimizer", r.f_opt[i]), ("weights", r.f_w[i]),
                                                  ("activations", r.f_act[i])) if v > 0]
    return text + (f", offload {', '.join(offload)}" if offload else "")


def _fits_on(req: TrainRequest, n: int) -> str | None:
    """The fastest fitting layout on ``n`` GPUs, described, or None: the table only, no report."""
    from shardplan.costmodel.training.space import enumerate_layouts
    from shardplan.costmodel.training.table import build_train_table

    sub = req.model_copy(update={"num_gpus": n})
    space = enumerate_layouts(req.model, req.workload, space_request(sub))
    if len(space.rows) == 0:
        return None
    table = build_train_table(req.model, req.system, req.workload, space.rows, allow_offload=req.offload != "off",
                              partial_recompute=req.recompute is None)
    if not table.fits.any():
        return None
    ok = np.flatnonzero(table.fits)
    return _describe(table, int(ok[np.argmin(table.step_time_s[ok])]))


def _min_gpus(req: TrainRequest) -> tuple[int, str] | None:
    """The smallest GPU count (whole nodes, up to 64× the request) at which some layout fits."""
    node = req.system.gpus_per_node
    lo, n = req.num_gpus, max(2 * req.num_gpus, node)
    limit = 64 * max(req.num_gpus, node)
    while n <= limit and (req.system.max_nodes is None or n // node <= req.system.max_nodes):
        found = _fits_on(req, n)
        if found is not None:
            step = max(node, (n - lo) // 8 // node * node)
            for m in range(lo - lo % step + step, n, step):
                smaller = _fits_on(req, m)
                if smaller is not None:
                    return m, smaller
            return n, found
        lo, n = n, 2 * n
    return None


def infeasible_plan(req: TrainRequest, table: TrainTable, wall: float, common: dict[str, Any], *,
                    replan: Callable[[TrainRequest], TrainPlan] | None = None) -> TrainPlan:
    """No candidate fits: name the binding requirement and (given ``replan``, the planner without
    explanations) the cheapest fixes."""
    explain = replan is not None
    core = explain_infeasible({"gpu_memory": table.gpu_over > 0, "host_memory": table.host_over > 0})
    i = int(np.argmin(table.gpu_over))
    r = table.rows
    if "gpu_memory" in core or not core:
        reason = (f"GPU memory: even the leanest layout ({_describe(table, i)}, microbatch {int(r.mb[i])}) needs "
                  f"{format_bytes(float(table.cost.peak_memory[i]))} per GPU > "
                  f"{format_bytes(float(req.system.gpu.memory_bytes))} on the {_binding(table, i)}")
    else:
        reason = "host memory: the offload that would fit GPU memory exceeds the CPU memory of the nodes"
    suggestions: list[str] = []
    knobs = ("tp", "pp", "dp", "ep", "cp", "microbatch", "interleave", "recompute", "sequence_parallel", "zero_stage")
    pins = {k: getattr(req, k) for k in knobs if explain and getattr(req, k) is not None}
    if pins:
        assert replan is not None
        free = replan(req.model_copy(update={**dict.fromkeys(pins), "top_k": 1}))
        if free.status != "infeasible" and free.plan is not None:
            p = free.plan
            suggestions.append(f"drop the pins ({', '.join(pins)}): TP={p.tp} PP={p.pp} DP={p.dp} fits "
                               f"(step {free.metrics.step_time_s:.3g} s)")
    if explain and req.offload == "off":
        assert replan is not None
        off = replan(req.model_copy(update={"offload": "auto", "top_k": 1}))
        if off.status != "infeasible":
            suggestions.append("allow CPU offload (--offload auto)")
    found = _min_gpus(req) if explain else None
    if not explain:
        pass
    elif found is not None:
        n, layout = found
        nodes = max(1, n // req.system.gpus_per_node)
        suggestions.append(f"use at least {n} GPUs ({nodes} node{'s' if nodes > 1 else ''}): {layout} fits")
    else:
        suggestions.append(f"no layout fits even on {64 * req.num_gpus} GPUs: shorten --seq-len or use larger GPUs")
    solver = SolverOut(status="infeasible", wall_time_s=wall, solve_s=0.0, selector_rows=0, objective=0.0,
                       best_bound=0.0, gap=0.0, **common)
    return TrainPlan(status="infeasible", reason=reason, suggestions=suggestions, model=req.model.name,
                     hardware=req.system.name, num_gpus=req.num_gpus, seq_len=req.workload.seq_len, solver=solver,
                     explanation=[f"Requirements that cannot all hold: {', '.join(core) or 'memory'}.",
                                  f"The leanest row: {STAGES[int(table.cost.binding_stage[i])]} stage binds."])
