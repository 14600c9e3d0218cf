"""Why a training plan wins, how the obvious alternatives compare, and what to change when nothing fits."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from shardplan.costmodel.training.frameworks import cp_blocker
from shardplan.costmodel.training.layout import Recompute, TrainLayout
from shardplan.costmodel.training.report import TrainPlanOut, TrainReport
from shardplan.costmodel.training.stages import STAGES
from shardplan.costmodel.training.table import TrainTable
from shardplan.planner.core.select import explain_infeasible
from shardplan.planner.training.rank import tie_rank
from shardplan.planner.training.request import TrainRequest, pytorch_cp, space_request
from shardplan.planner.training.schema import Comparison, SolverOut, TrainPlan
from shardplan.units import format_bytes, format_seconds

PIN_FLAGS = {"tp": "--tp", "pp": "--pp", "dp": "--dp", "ep": "--ep", "cp": "--cp", "microbatch": "--microbatch",
             "interleave": "--interleave", "recompute": "--recompute", "recompute_layers": "--recompute-layers",
             "sequence_parallel": "--sequence-parallel", "zero_stage": "--zero"}
HAND_RULE = "smallest TP within a node that fits, then the shallowest PP; microbatch 1, least recompute that fits"


def describe(lay: TrainLayout, layers_per_stage: int | None = None) -> str:
    """A layout named in full: 'TP=2 PP=1 DP=64 CP=2 EP=1, microbatch 1, interleave 1, recompute full on 6
    layers/stage, SP on, ZeRO-1, no offload' — every knob the cost model evaluates (a selective module set other
    than Megatron's default as 'recompute selective modules layernorm+moe_act')."""
    rc = str(lay.recompute)
    if lay.recompute == Recompute.FULL and lay.recompute_layers is not None and (
            layers_per_stage is None or lay.recompute_layers < layers_per_stage):
        rc += f" on {lay.recompute_layers} layer{'s' if lay.recompute_layers > 1 else ''}/stage"
    if lay.recompute == Recompute.SELECTIVE and lay.recompute_modules is not None:
        rc += f" modules {'+'.join(lay.recompute_modules)}"  # Megatron's --recompute-modules (default core_attn)
    offload = [f"{name} {v:.0%}" for name, v in (("optimizer", lay.offload_optimizer), ("weights",
               lay.offload_weights), ("activations", lay.offload_activations)) if v > 0]
    etp = f" ETP={lay.expert_tp}" if lay.ep > 1 and lay.expert_tp != lay.tp else ""  # folded experts' own TP
    return (f"TP={lay.tp} PP={lay.pp} DP={lay.dp} CP={lay.cp} EP={lay.ep}{etp}, microbatch {lay.microbatch}, "
            f"interleave {lay.interleave}, recompute {rc}, SP {'on' if lay.sequence_parallel else 'off'}, "
            f"ZeRO-{lay.zero_stage}, " + (f"offload {', '.join(offload)}" if offload else "no offload"))


def describe_row(table: TrainTable, i: int) -> str:
    """Row ``i`` of the table named in full."""
    stage_layers = max(int(st.shape.layers[i]) for st in table.cost.stages if bool(st.shape.exists[i]))
    return describe(table.rows.row(i), stage_layers)


def plan_layout(plan: TrainPlanOut) -> TrainLayout:
    """A reported plan's layout (its uniform split: per-stage choices are the plan's ``stage_*`` fields)."""
    return TrainLayout(tp=plan.tp, pp=plan.pp, dp=plan.dp, ep=plan.ep, cp=plan.cp, etp=plan.etp,
                       microbatch=plan.microbatch_size, interleave=plan.interleave, recompute=Recompute(plan.recompute),
                       recompute_layers=plan.recompute_layers, sequence_parallel=plan.sequence_parallel,
                       zero_stage=plan.zero_stage, offload_optimizer=plan.offload.optimizer,
                       offload_weights=plan.offload.weights, offload_activations=plan.offload.activations,
                       recompute_modules=None if plan.recompute_modules in (None, ["core_attn"])
                       else tuple(plan.recompute_modules))


def describe_plan(plan: TrainPlanOut) -> str:
    """A reported plan named in full (the same words as ``describe``)."""
    return describe(plan_layout(plan))


def _binding(table: TrainTable, i: int) -> str:
    """'the first stage (activations 61 GiB)' for row i."""
    st = table.cost.stages[int(table.cost.binding_stage[i])]
    cats = {"activations": st.activations[i], "weights": st.weights[i], "gradients": st.grads[i],
            "optimizer state": st.optimizer[i]}
    big = max(cats, key=lambda k: cats[k])
    return f"{st.shape.name} stage ({big} {format_bytes(float(cats[big]))})"


def _best(table: TrainTable, mask: np.ndarray, per_sequence: bool = False) -> int:
    """The fastest row of ``mask`` by the solver's objective (step time, or time per sequence when the planner
    chooses the batch); ties: the solver's preference order."""
    idx = np.flatnonzero(mask)
    t = _objective(table, idx, per_sequence)
    order = np.lexsort((tie_rank(table.rows.take(idx)), t))
    return int(idx[order[0]])


def _objective(table: TrainTable, idx: np.ndarray | int, per_sequence: bool) -> np.ndarray:
    t = table.step_time_s[idx]
    return t / table.rows.gb[idx] if per_sequence else t


def comparison_rows(table: TrainTable, chosen: int, eligible: np.ndarray, limit: int = 8,
                    per_sequence: bool = False) -> tuple[list[int], list[int | Comparison]]:
    """The rows ``comparisons`` shows: the best row of each other (TP, PP) pair that fits among ``eligible``, fastest
    first, and in pair order those that fit only with offload (a row) or not at all (why)."""
    r = table.rows
    radix = int(r.pp.max(initial=0)) + 1
    pairs = [(int(c) // radix, int(c) % radix) for c in np.unique(r.tp.astype(np.int64) * radix + r.pp)]
    fitting: list[tuple[float, int]] = []
    other: list[int | Comparison] = []  # in pair order: a row that fits only with offload, or why none fits
    for tp, pp in pairs:
        if (tp, pp) == (int(r.tp[chosen]), int(r.pp[chosen])):
            continue
        mask = (r.tp == tp) & (r.pp == pp)
        if (mask & eligible).any():
            i = _best(table, mask & eligible, per_sequence)
            fitting.append((float(_objective(table, i, per_sequence)), i))
        elif (mask & table.fits).any():
            other.append(_best(table, mask & table.fits, per_sequence))
        else:
            i = int(np.flatnonzero(mask)[np.argmin(table.cost.peak_memory[mask])])
            need = float(table.cost.peak_memory[i])
            note = (f"does not fit: {format_bytes(need)} > {format_bytes(table.capacity)} usable on the "
                    f"{_binding(table, i)}" if need > table.capacity
                    else "does not fit: offloaded tensors exceed host memory")
            other.append(Comparison(layout=describe_row(table, i), fits=False, note=note))
    return [i for _, i in sorted(fitting)[:limit]], other


def comparisons(table: TrainTable, chosen: int, eligible: np.ndarray, report: Callable[[int], TrainReport],
                limit: int = 8, per_sequence: bool = False, plan: TrainReport | None = None,
                prefetch: Callable[[list[int]], None] | None = None,
                rows: tuple[list[int], list[int | Comparison]] | None = None) -> list[Comparison]:
    """The best layout of each other (TP, PP) pair among the rows the solver chose from (``eligible``), named in
    full and re-evaluated by ``report`` (``estimate_training`` of that layout): its step time, or why it does not
    fit. A pair that fits only with CPU offload (which the solver sets aside by default) says so. ``delta_pct``
    compares time per sequence (step time when the batch is fixed) with ``plan``, the plan as printed (its
    per-stage split included); without it, with row ``chosen``. ``prefetch``: evaluates the rows named before
    ``report`` is asked for them one at a time (the same reports, in one batch). ``rows``: ``comparison_rows`` of
    these arguments, when the caller has them."""
    shown, other = rows if rows is not None else comparison_rows(table, chosen, eligible, limit, per_sequence)
    best = plan if plan is not None else report(chosen)

    def delta(rep: TrainReport) -> float:
        return 100 * ((rep.metrics.step_time_s / rep.plan.global_batch)
                      / (best.metrics.step_time_s / best.plan.global_batch) - 1)

    if prefetch is not None:
        prefetch([*shown, *(i for i in other if isinstance(i, int))])

    def offloaded(i: int) -> Comparison:
        rep = report(i)
        return Comparison(layout=describe_plan(rep.plan), plan=rep.plan, fits=False,
                          step_time_s=rep.metrics.step_time_s, delta_pct=delta(rep),
                          note="fits only with CPU offload, which is used only when nothing fits without it "
                               "(--offload on to let it compete)")
    out: list[Comparison] = []
    for i in shown:
        rep = report(i)
        note = f"best of TP={rep.plan.tp} PP={rep.plan.pp}"
        if rep.plan.global_batch != best.plan.global_batch:
            note += f", batch {rep.plan.global_batch} (vs plan: time per sequence)"
        out.append(Comparison(layout=describe_plan(rep.plan), plan=rep.plan, fits=True,
                              step_time_s=rep.metrics.step_time_s, delta_pct=delta(rep), note=note))
    return (out + [offloaded(c) if isinstance(c, int) else c for c in other])[:limit]


def _executed_note(m: Any) -> str:
    """Where flash attention's skipped causal half makes MFU read well above what the kernels run: the share of peak
    they execute (the count Megatron-LM's formula has used since 8873b55d6a, 2025-03: causal attention halved)."""
    if m.tflops_per_gpu <= 0 or m.hfu <= 0:
        return ""
    executed = m.executed_tflops_per_gpu * m.hfu / m.tflops_per_gpu
    if executed >= m.mfu - 0.05:
        return ""
    return (f"; the kernels run {executed:.1%} of peak (flash attention skips the masked half of the causal "
            f"attention counted here; Megatron-LM's FLOP formula has left that half out since 2025)")


def explanation(best: TrainReport, base: TrainReport | None, bare: TrainReport | None = None) -> list[str]:
    """Sentences: memory and headroom, where time goes, why recompute (``bare``: the plan without it), and the
    gain over the hand layout (``base``)."""
    m, mem = best.metrics, best.memory
    usable = mem.capacity_bytes - mem.headroom_bytes
    # "binds" only when memory is nearly full (< 5% of the usable memory left); otherwise it is the tightest stage
    verb = "binds on" if mem.total_bytes > 0.95 * usable else "is tightest on"
    lines = [
        f"Memory {verb} the {mem.stage} stage: {format_bytes(mem.total_bytes)} of {format_bytes(usable)} usable "
        f"({format_bytes(mem.capacity_bytes)} less {format_bytes(mem.headroom_bytes)} kept free for fragmentation "
        f"and spikes; --memory-headroom).",
        f"MFU {m.mfu:.1%}, HFU {m.hfu:.1%} (model FLOPs, causal attention counted in full; HFU adds recompute)"
        + _executed_note(m) + ".",
    ]
    parts = [("pipeline bubble", m.bubble_s), ("TP communication", m.tp_exposed_s), ("pipeline sends", m.pp_exposed_s),
             ("DP gradient sync", m.dp_exposed_s), ("ZeRO-3 gathers", m.zero3_exposed_s),
             ("expert all-to-all", m.ep_exposed_s), ("context-parallel K/V exchange", m.cp_exposed_s),
             ("MoE host sync", m.host_sync_s), ("optimizer step", m.optimizer_s)]
    shown = [f"{name} {v / m.step_time_s:.1%}" for name, v in parts if v / m.step_time_s >= 0.005]
    if shown:
        lines.append("Exposed overheads per step: " + ", ".join(shown) + ".")
    p = best.plan
    if p.recompute != "none":
        what = f"Recompute {p.recompute}" + (f" on {p.recompute_layers} layers per stage" if p.recompute_layers else "")
        if bare is not None and bare.status == "infeasible":
            lines.append(f"{what}: without it this layout needs {format_bytes(bare.memory.total_bytes)} per GPU > "
                         f"{format_bytes(usable)} usable.")
        elif bare is not None:
            lines.append(f"{what}: without it this layout takes {format_seconds(bare.metrics.step_time_s)} per step.")
    if p.offload.optimizer or p.offload.weights or p.offload.activations:
        lines.append("CPU offload is the cheapest way found to fit this layout in GPU memory.")
    if base is not None:
        t_base = base.metrics.step_time_s
        name = f"hand layout ({HAND_RULE}: {describe_plan(base.plan)})"
        if base.plan.global_batch != p.global_batch:
            tok = base.metrics.tokens_per_s
            lines.append(f"vs. the {name}, batch {base.plan.global_batch}: {m.tokens_per_s / tok:.2f}× the throughput "
                         f"({tok:,.0f} → {m.tokens_per_s:,.0f} tokens/s).")
        elif abs(t_base - m.step_time_s) > 1e-9 * m.step_time_s:
            lines.append(f"vs. the {name}: {t_base / m.step_time_s:.2f}× faster ({format_seconds(t_base)} → "
                         f"{format_seconds(m.step_time_s)} per step).")
        else:
            lines.append(f"The {name} is already optimal.")
    return lines


def _fits_on(req: TrainRequest, n: int, *, prune: bool = True) -> str | None:
    """The fastest fitting layout on ``n`` GPUs, described, or None: the table only, no report. ``prune`` costs
    only the layouts that pass ``fit_bound.may_fit`` (the others cannot fit: the answer is the same)."""
    from shardplan.costmodel.training.fit_bound import may_fit
    from shardplan.costmodel.training.space import enumerate_layouts
    from shardplan.costmodel.training.table import build_train_table

    sub = req.model_copy(update={"num_gpus": n})
    space_req = space_request(sub)
    offload = req.offload != "off"
    if prune:
        # The bound ignores interleave and recompute and grows with the microbatch: if no layout with the smallest
        # of each fits it, none does, and the full space (hundreds of thousands of rows) is never enumerated.
        lean = dataclasses.replace(space_req, microbatch=req.microbatch or 1, interleave=req.interleave or 1,
                                   recompute=req.recompute or Recompute.NONE)
        lean_rows = enumerate_layouts(req.model, req.workload, lean).rows
        if not may_fit(req.model, req.system, req.workload, lean_rows, allow_offload=offload).any():
            return None
    rows = enumerate_layouts(req.model, req.workload, space_req).rows
    if prune and len(rows):
        rows = rows.take(np.flatnonzero(may_fit(req.model, req.system, req.workload, rows, allow_offload=offload)))
    if len(rows) == 0:
        return None
    if req.recompute_layers is not None:
        rows = rows.replace(rk=np.where(rows.rc == 2, req.recompute_layers, rows.rk))
    table = build_train_table(req.model, req.system, req.workload, rows, allow_offload=offload,
                              offload_last_resort=req.offload == "auto", partial_recompute=req.recompute is None)
    if not table.fits.any():
        return None
    r = table.rows
    kept = table.fits & ((r.f_opt + r.f_w + r.f_act) == 0)
    return describe_row(table, _best(table, kept if (req.offload == "auto" and kept.any()) else table.fits))


def _min_gpus(req: TrainRequest, deadline: float = float("inf"), *, prune: bool = True
              ) -> tuple[int, str] | str | None:
    """The smallest GPU count (whole nodes, up to 64× the request) at which some layout fits; ``"time"`` when the
    search passed ``deadline`` (``--time-limit`` bounds the search for fixes too) before finding one. ``prune``:
    GPU counts and layouts that provably cannot fit are not costed (``_fits_on``)."""
    node = req.system.gpus_per_node
    lo, n = req.num_gpus, max(2 * req.num_gpus, node)
    limit = 64 * max(req.num_gpus, node)
    while n <= limit and (req.system.max_nodes is None or n // node <= req.system.max_nodes):
        if time.perf_counter() > deadline:
            return "time"
        found = _fits_on(req, n, prune=prune)
        if found is not None:
            step = max(node, (n - lo) // 8 // node * node)
            for m in range(lo - lo % step + step, n, step):
                if time.perf_counter() > deadline:
                    return n, found
                smaller = _fits_on(req, m, prune=prune)
                if smaller is not None:
                    return m, smaller
            return n, found
        lo, n = n, 2 * n
    return None


def _pin_text(name: str, value: Any) -> str:
    flag = PIN_FLAGS[name]
    if isinstance(value, bool):
        return flag if value else "--no-" + flag.removeprefix("--")
    return f"{flag} {value}"


def _fix_line(free: TrainPlan) -> str:
    assert free.plan is not None and free.metrics is not None
    return f"{describe_plan(free.plan)} fits (step {format_seconds(free.metrics.step_time_s)})"


def _pin_fixes(req: TrainRequest, replan: Callable[[TrainRequest], TrainPlan]) -> tuple[list[str], list[str]]:
    """The user's pins, and the fixes that drop one of them (or, failing that, all): each names the pin dropped
    and the layout that then fits, with its step time (the planner's evaluation of exactly that layout)."""
    names = ("tp", "pp", "dp", "ep", "cp", "microbatch", "interleave", "recompute", "recompute_layers",
             "sequence_parallel", "zero_stage")
    pins = {k: getattr(req, k) for k in names if getattr(req, k) is not None}
    out: list[str] = []
    for name, value in pins.items():
        drop = {name: None} | ({"recompute_layers": None} if name == "recompute" else {})
        free = replan(req.model_copy(update={**drop, "top_k": 1}))
        if free.status != "infeasible" and free.plan is not None:
            out.append(f"drop {_pin_text(name, value)}: {_fix_line(free)}")
    if not out and len(pins) > 1:
        free = replan(req.model_copy(update={**dict.fromkeys(pins), "top_k": 1}))
        if free.status != "infeasible" and free.plan is not None:
            out.append(f"drop the pins ({' '.join(_pin_text(k, v) for k, v in pins.items())}): {_fix_line(free)}")
    return [_pin_text(k, v) for k, v in pins.items()], out


def _exchange_fixes(req: TrainRequest, replan: Callable[[TrainRequest], TrainPlan], deadline: float) -> list[str]:
    """A stated CP exchange that cannot run the model's attention (``frameworks.cp_blocker``) keeps the plan at CP 1:
    the fixes that drop it for an exchange that runs, each with the layout that then fits here, or else with the
    fewest GPUs it fits on."""
    sw = req.system.software
    if "cp_comm_type" not in sw._stated or pytorch_cp(req) or cp_blocker(req.model, sw.cp_comm_type) is None:
        return []
    out = []
    for other in ("a2a", "all_gather"):
        if cp_blocker(req.model, other) is not None:
            continue
        software = sw.model_copy(update={"cp_comm_type": other})
        software._stated = sw._stated
        alt = req.model_copy(update={"system": req.system.model_copy(update={"software": software}), "top_k": 1})
        drop = (f"drop --cp-comm-type {sw.cp_comm_type} (its context parallelism cannot run {req.model.name}'s "
                f"attention) for --cp-comm-type {other}")
        free = replan(alt)
        if free.status != "infeasible" and free.plan is not None:
            out.append(f"{drop}: {_fix_line(free)}")
        elif isinstance(found := _min_gpus(alt, deadline), tuple):
            out.append(f"{drop} and use at least {found[0]} GPUs: {found[1]} fits")
    return out


def infeasible_plan(req: TrainRequest, table: TrainTable, wall: float, common: dict[str, Any], *,
                    replan: Callable[[TrainRequest], TrainPlan] | None = None) -> TrainPlan:
    """No candidate fits: name the binding requirement and (given ``replan``, the planner without
    explanations) the cheapest fixes, which honour the user's pins or name the pin to drop."""
    deadline = time.perf_counter() + req.time_limit_s  # --time-limit bounds the search for fixes too
    core = explain_infeasible({"gpu_memory": table.gpu_over > 0, "host_memory": table.host_over > 0},
                              time_limit_s=min(10.0, req.time_limit_s))
    i = int(np.argmin(table.gpu_over))
    if ("gpu_memory" in core or not core) and table.gpu_over[i] > 0:  # else the leanest row fails on the host
        reason = (f"GPU memory: even the leanest layout ({describe_row(table, i)}) needs "
                  f"{format_bytes(float(table.cost.peak_memory[i]))} per GPU > {format_bytes(table.capacity)} "
                  f"usable on the {_binding(table, i)}")
    else:
        reason = "host memory: the offload that would fit GPU memory exceeds the CPU memory of the nodes"
    suggestions: list[str] = []
    if replan is not None:
        pins, fixes = _pin_fixes(req, replan)
        fixes += _exchange_fixes(req, replan, deadline)
        suggestions += fixes
        if req.offload == "off":
            off = replan(req.model_copy(update={"offload": "auto", "top_k": 1}))
            if off.status != "infeasible" and off.plan is not None:
                suggestions.append(f"allow CPU offload (--offload auto): {_fix_line(off)}")
        found = _min_gpus(req, deadline)
        if found == "time":
            suggestions.append("more GPUs may fit: the search for the smallest count stopped at --time-limit; "
                               "raise it")
        elif isinstance(found, tuple):
            n, layout = found
            nodes = max(1, n // req.system.gpus_per_node)
            kept = f" keeping {' '.join(pins)}" if pins else ""
            suggestions.append(f"use at least {n} GPUs ({nodes} node{'s' if nodes > 1 else ''}){kept}: {layout} fits")
        elif pins:
            suggestions.append(f"with {' '.join(pins)} no layout fits even on {64 * req.num_gpus} GPUs: "
                               "drop a pin (above)" if fixes else
                               f"with {' '.join(pins)} no layout fits even on {64 * req.num_gpus} GPUs")
        else:
            suggestions.append(f"no layout fits even on {64 * req.num_gpus} GPUs: shorten --seq-len or use "
                               "larger GPUs")
    solver = SolverOut(status="infeasible", wall_time_s=wall, solve_s=0.0, selector_rows=0, objective=0.0,
                       best_bound=0.0, gap=0.0, **common)
    return TrainPlan(status="infeasible", reason=reason, suggestions=suggestions, model=req.model.name,
                     hardware=req.system.name, num_gpus=req.num_gpus, seq_len=req.workload.seq_len, solver=solver,
                     explanation=[f"Requirements that cannot all hold: {', '.join(core) or 'memory'}.",
                                  f"The leanest row: {STAGES[int(table.cost.binding_stage[i])]} stage binds."])
