"""``plan_training``: the fastest training layout for a GPU count, chosen by CP-SAT over the cost table.

Pipeline: request → candidate space (``costmodel.space``) → cost table with closed-form memory fixes
(``costmodel.table``) → one row per distinct layout → CP-SAT selection (``select``) → the chosen layout
re-evaluated by ``costmodel.evaluate.estimate_training`` (the reported numbers) → explanation.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from shardplan.costmodel.core.layouts import check_gpus
from shardplan.costmodel.training.cp_rules import a2a_heads_ok
from shardplan.costmodel.training.evaluate import at_optimum, estimate_rows, estimate_training
from shardplan.costmodel.training.frameworks import caps_for, framework_system
from shardplan.costmodel.training.knobs import RECOMPUTE_POLICIES
from shardplan.costmodel.training.layout import Recompute
from shardplan.costmodel.training.pipeline_sim import uniform_split
from shardplan.costmodel.training.report import TrainReport
from shardplan.costmodel.training.space import enumerate_layouts, row_keys
from shardplan.costmodel.training.stage_report import estimate_split
from shardplan.costmodel.training.stage_split import supports_stage_split
from shardplan.costmodel.training.table import TrainTable, build_train_table
from shardplan.errors import ShardplanError
from shardplan.hardware.software import CP_COMM_TYPES
from shardplan.hardware.spec import SystemSpec
from shardplan.planner.core.scaling import RATE_UNIT_S, TIME_UNIT_S, from_int_time, to_int_time
from shardplan.planner.core.select import select
from shardplan.planner.training.explain import (
    comparison_rows,
    comparisons,
    explanation,
    infeasible_plan,
    plan_layout,
)
from shardplan.planner.training.rank import tie_rank
from shardplan.planner.training.request import TrainRequest, check_pins, pytorch_cp, selective_modules, space_request
from shardplan.planner.training.schema import Alternative, SolverOut, TrainPlan
from shardplan.planner.training.stage_search import (
    row_report,
    search_stages,
    stage_plan_report,
    stage_sentence,
    with_stage_search,
)
from shardplan.units import format_bytes

LAYOUT_KEY = ("tp", "pp", "dp", "ep", "cp", "mb", "v", "rc", "sp", "zero", "gb", "sel")
# Rows handed to CP-SAT at most: the best distinct layouts in the exact order (objective, then tie rank). The k
# best of the whole table are among them (k ≤ this), and the selector model stays small (~7 µs per boolean).
SELECTOR_ROWS = 1024


def primary_objective(table: TrainTable, idx: np.ndarray, per_sequence: bool) -> np.ndarray:
    """Integer objective of rows ``idx``: step time in µs, or time per sequence in ns."""
    t = table.step_time_s[idx]
    if per_sequence:
        return to_int_time(t / table.rows.gb[idx], RATE_UNIT_S)
    return to_int_time(t, TIME_UNIT_S)


def distinct_best(table: TrainTable, idx: np.ndarray, primary: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Among rows ``idx``, the best row of every distinct layout (offload variants collapse)."""
    r = table.rows
    keys = row_keys([getattr(r, k)[idx] for k in LAYOUT_KEY])
    order = np.lexsort((rank, primary))
    _, first = np.unique(keys[order], return_index=True)
    return np.sort(order[first])


def baseline_row(table: TrainTable, eligible: np.ndarray, system: SystemSpec) -> int | None:
    """The hand layout a practitioner starts from (``explain.HAND_RULE``): the smallest TP within a node that
    fits with no pipeline; if none does, TP = the largest in a node and the shallowest pipeline that fits. Then
    microbatch 1, no interleaving, no CP, no offload, SP with TP, ZeRO-1 with data parallelism, and the least
    recompute that fits (fewest fully recomputed layers)."""
    r = table.rows
    mask = eligible & (r.tp <= system.gpus_per_node) & (r.cp == 1) & (r.v == 1) & (r.f_opt + r.f_w + r.f_act == 0)
    mask &= (r.sp == (r.tp > 1)) & (r.zero == np.minimum(1, r.dp - 1))
    mb1 = mask & (r.mb == 1)
    mask = mb1 if mb1.any() else mask
    if not mask.any():
        return None
    flat = mask & (r.pp == 1)
    if flat.any():
        mask = flat & (r.tp == r.tp[flat].min())
    else:
        mask = mask & (r.tp == r.tp[mask].max())
        mask &= r.pp == r.pp[mask].min()
    cand = np.flatnonzero(mask)
    rk = np.where(r.rc[cand] == 2, r.rk[cand], 0)
    order = np.lexsort((-r.gb[cand], rk, r.rc[cand]))
    return int(cand[order[0]])


def _without_recompute(req: TrainRequest, best: TrainReport) -> TrainReport | None:
    """The chosen layout with no recompute (what the explanation weighs recompute against)."""
    if best.plan is None or best.plan.recompute == "none":
        return None
    p = best.plan
    lay = dataclasses.replace(plan_layout(p), recompute=Recompute.NONE, recompute_layers=None, recompute_modules=None)
    w = req.workload.model_copy(update={"global_batch": p.global_batch})
    return estimate_training(req.model, req.system, req.num_gpus, w, lay)


def _modules_sentence(req: TrainRequest, best: TrainReport) -> str | None:
    """What a selective module set other than Megatron's default saved: the same layout (uniform split) with
    core_attn alone against the chosen set, both evaluated by the cost model."""
    p = best.plan
    if p is None or p.recompute != "selective" or p.recompute_modules in (None, ["core_attn"]) \
            or set(p.recompute_modules) & set(RECOMPUTE_POLICIES):  # another framework's policy: no Megatron set
        return None
    lay = dataclasses.replace(plan_layout(p), recompute=Recompute.SELECTIVE, recompute_layers=None,
                              recompute_modules=None)
    w = req.workload.model_copy(update={"global_batch": p.global_batch})
    default = estimate_training(req.model, req.system, req.num_gpus, w, lay)
    chosen = estimate_training(req.model, req.system, req.num_gpus, w,
                               dataclasses.replace(lay, recompute_modules=tuple(p.recompute_modules)))
    if chosen.metrics is None or default.metrics is None:
        return None
    more = 100 * (chosen.metrics.step_time_s / default.metrics.step_time_s - 1)
    return (f"Selective recompute of {', '.join(p.recompute_modules)} (Megatron --recompute-modules): peak "
            f"{format_bytes(chosen.memory.total_bytes)} per GPU vs {format_bytes(default.memory.total_bytes)} with "
            f"core_attn alone ({default.status}), for {more:+.1f}% step time (uniform split).")


def _cp_comm_sentence(req: TrainRequest, best: TrainReport) -> str | None:
    """With CP, the plan's layout (its stage split included) under the system's CP exchange and under the others
    Transformer Engine runs (``SoftwareSpec.cp_comm_type``; a2a only where cp divides a TP rank's heads), each
    evaluated by the cost model: which exchange to set. Only for stacks that run Transformer Engine's CP (Megatron,
    or no framework named)."""
    p = best.plan
    if p is None or best.metrics is None or p.cp == 1 or req.framework not in (None, "megatron") \
            or any(p.stage_offload_activations or []):  # per-rank activation offload: no command evaluates it
        return None
    lay = plan_layout(p)
    w = req.workload.model_copy(update={"global_batch": p.global_batch})
    uniform = p.stage_layers in (None, uniform_split(req.model.num_layers, p.pp)) and p.stage_recompute_layers is None
    ours = req.system.software.cp_comm_type
    heads = a2a_heads_ok(req.model, p.tp, p.cp)
    times = {ours: best.metrics.step_time_s}  # the plan's own evaluation
    for kind in CP_COMM_TYPES:
        if kind == ours or (kind == "a2a" and not heads):
            continue
        system = req.system.model_copy(update={"software": req.system.software.model_copy(
            update={"cp_comm_type": kind})})
        try:
            rep = estimate_training(req.model, system, req.num_gpus, w, lay) if p.pp == 1 or uniform else \
                estimate_split(req.model, system, req.num_gpus, w, lay, p.stage_layers, p.stage_recompute_layers)
        except ShardplanError:
            continue
        if rep.metrics is not None and rep.status != "infeasible":
            times[kind] = rep.metrics.step_time_s
    if len(times) < 2:
        return None
    others = ", ".join(f"{k} {t:.3f} s ({100 * (t / times[ours] - 1):+.1f}%)" for k, t in times.items() if k != ours)
    why = "" if heads else f"; a2a cannot split a TP-{p.tp} rank's heads over cp {p.cp}"
    return (f"Context parallelism exchanges K/V by {ours} (cp_comm_type): {times[ours]:.3f} s per step; "
            f"the same layout with {others}{why} (--cp-comm-type, or a system file's software: cp_comm_type).")


def plan_training(req: TrainRequest, *, explain: bool = True) -> TrainPlan:
    """Plan a training run: the optimal layout under the cost model, with alternatives and reasons.

    ``explain=False`` skips the search for fixes when nothing fits (used by that search itself).
    """
    t0 = time.perf_counter()
    # what the framework fixes, priced
    req = req.model_copy(update={"system": framework_system(req.system, req.framework, req.model,
                                                            pytorch_cp=pytorch_cp(req))})
    if req.framework is not None and not caps_for(req.framework, req.model).stage_split:
        req = req.model_copy(update={"uniform_stages": True})  # its stages hold equal layer counts
    check_gpus(req.system, req.num_gpus)
    check_pins(req)
    work = req.workload
    space = enumerate_layouts(req.model, work, space_request(req))
    if len(space.rows) == 0:
        if work.local_batch and ({"batch per dp rank not a multiple of local_batch",
                                  "interleave with microbatches not a multiple of pp"} & set(space.pruned)):
            raise ShardplanError(f"no layout holds whole schedules of {work.local_batch} sequences per dp rank "
                                 f"(global batch/dp must be a multiple of it, and with interleaving its microbatches "
                                 f"a multiple of pp): change it or drop it", field="local-batch")
        raise ShardplanError(
            f"no layout with these pins uses exactly {req.num_gpus} GPUs and a valid batch (tp·pp·dp·cp must equal "
            f"--gpus, dp·microbatch must divide the global batch)", field="gpus")
    rows = space.rows
    if req.recompute_layers is not None:
        rows = rows.replace(rk=np.where(rows.rc == 2, req.recompute_layers, rows.rk))
    whole = req.framework is not None and not caps_for(req.framework, req.model).partial_recompute
    table = build_train_table(req.model, req.system, work, rows, allow_offload=req.offload != "off",
                              offload_last_resort=req.offload == "auto",
                              partial_recompute=req.recompute is None and not whole,
                              module_sets=req.module_sets and selective_modules(req) is None)
    build_s = time.perf_counter() - t0
    fits = table.fits
    offloaded = (table.rows.f_opt + table.rows.f_w + table.rows.f_act) > 0
    if req.offload == "auto" and (fits & ~offloaded).any():
        fits = fits & ~offloaded  # offload competes with NICs for PCIe: only a last resort by default
    feasible = np.flatnonzero(fits)
    per_seq = not req.fixed_global_batch
    common = dict(candidates=len(space.rows), evaluated=len(table), feasible=int(len(feasible)),
                  pruned=space.pruned, build_s=build_s)
    if len(feasible) == 0:
        replan = (lambda r: plan_training(r, explain=False)) if explain else None
        plan = infeasible_plan(req, table, time.perf_counter() - t0, common, replan=replan)
        wall = time.perf_counter() - t0  # includes the search for fixes
        return plan.model_copy(update={"solver": plan.solver.model_copy(update={"wall_time_s": wall})})

    rank_all = tie_rank(table.rows)
    primary_all = primary_objective(table, np.arange(len(table)), per_seq)
    cand = feasible[distinct_best(table, feasible, primary_all[feasible], rank_all[feasible])]
    keep = max(SELECTOR_ROWS, req.top_k)
    if len(cand) > keep:  # rows past the best ``keep`` in the exact order cannot be among the top k: dominated
        cand = np.sort(cand[np.lexsort((rank_all[cand], primary_all[cand]))[:keep]])
    base = baseline_row(table, fits, req.system)
    hint = int(np.flatnonzero(cand == base)[0]) if base is not None and (cand == base).any() else None
    sel = select(primary_all[cand], tie_rank(table.rows.take(cand)), k=req.top_k, time_limit_s=req.time_limit_s,
                 seed=req.seed, hint=hint)
    chosen = [int(cand[i]) for i in sel.indices]
    unit = RATE_UNIT_S if per_seq else TIME_UNIT_S
    n_rows = len(cand)
    obj = from_int_time(sel.objective[0] // n_rows, unit)
    bound = from_int_time(math.floor(sel.bound[0] / n_rows), unit)  # the primary part: ties' rank fraction dropped
    solver = SolverOut(status=sel.statuses[0], wall_time_s=0.0, solve_s=sel.build_s + sel.solve_s,
                       selector_rows=n_rows, objective=obj, best_bound=bound,
                       gap=max(0.0, (obj - bound) / obj) if obj else 0.0, **common)

    reports: dict[int, TrainReport] = {}

    def report(i: int) -> TrainReport:
        """Row ``i`` re-evaluated alone: every number the plan prints comes from here."""
        if i not in reports:
            w = work.model_copy(update={"global_batch": int(table.rows.gb[i])})
            reports[i] = estimate_training(req.model, req.system, req.num_gpus, w, table.rows.row(i))
        return reports[i]

    def prefetch(idx: list[int]) -> None:
        """The reports of several rows at once (``estimate_rows``: the same as ``report`` row by row)."""
        todo = [i for i in dict.fromkeys(idx) if i not in reports]
        if len(todo) > 1:
            w = work.model_copy(update={"global_batch": int(table.rows.gb[todo[0]])})
            got = estimate_rows(req.model, req.system, req.num_gpus, w, [table.rows.row(i) for i in todo],
                                [int(table.rows.gb[i]) for i in todo])
            reports.update(zip(todo, got, strict=True))

    # the plan, its alternatives, the baseline and the comparisons' rows (which the selection fixes): one call
    compared = comparison_rows(table, chosen[0], fits, per_sequence=per_seq)
    prefetch([*chosen, *([] if base is None else [base]), *compared[0],
              *(i for i in compared[1] if isinstance(i, int))])
    best = report(chosen[0])
    stages = None
    if not req.uniform_stages and not whole and supports_stage_split(req.model):  # else: the uniform split
        every = np.arange(len(table))
        rows_all = distinct_best(table, every, primary_all, rank_all)
        if req.offload == "auto" and (table.fits & ~offloaded).any():
            rows_all = rows_all[~offloaded[rows_all]]  # offload stays a last resort
        stages = search_stages(req, table, rows_all, chosen[0], per_seq, time_limit_s=req.time_limit_s)
        best = stage_plan_report(req, table, stages, best, report)
    # Alternatives: the next distinct layouts of the selection (the plan's own layout left out, wherever the
    # per-stage search found it), each as a plan prints it (per-stage optimum or named uniform split), by score.
    won = stages.row if stages is not None else chosen[0]
    same = row_keys([getattr(table.rows, k)[[won, *chosen]] for k in LAYOUT_KEY])
    others = [i for i, key in zip(chosen, same[1:], strict=True) if key != same[0]][:req.top_k - 1]
    prefetch([*others, *([] if base is None else [base])])
    reps = [row_report(req, table, i, report) if stages is not None else report(i) for i in others]
    reps.sort(key=lambda rep: rep.metrics.step_time_s / (rep.plan.global_batch if per_seq else 1))
    alts = [Alternative(rank=k, plan=rep.plan, step_time_s=rep.metrics.step_time_s,
                        tokens_per_s=rep.metrics.tokens_per_s,
                        delta_pct=100 * (best.metrics.tokens_per_s / rep.metrics.tokens_per_s - 1),
                        memory_bytes=rep.memory.total_bytes) for k, rep in enumerate(reps, start=2)]
    status = sel.statuses[0]
    explained = explanation(best, report(base) if base is not None else None, _without_recompute(req, best))
    if stages is not None:
        solver = with_stage_search(solver, stages)
        status = "optimal" if status == "optimal" and stages.status == "optimal" else "feasible"
        if stages.split is not None or (best.plan is not None and best.plan.pp > 1):  # nothing to say without PP
            explained = [*explained, stage_sentence(stages, best)]
    if (modules := _modules_sentence(req, best)) is not None:
        explained = [*explained, modules]
    if (cp_comm := _cp_comm_sentence(req, best)) is not None:
        explained = [*explained, cp_comm]
    # A choice between layouts carries the optimiser's curse: the interval measured on the planner's own picks.
    metrics = at_optimum(best.metrics, req.system, req.model) if len(cand) > 1 else best.metrics
    plan = TrainPlan(
        status=status, model=req.model.name, hardware=req.system.name, num_gpus=req.num_gpus,
        seq_len=work.seq_len, plan=best.plan, metrics=metrics, memory=best.memory, stages=best.stages,
        layers=best.layers, solver=solver, alternatives=alts,
        comparisons=comparisons(table, chosen[0], fits, report, per_sequence=per_seq, plan=best, prefetch=prefetch,
                                rows=compared),
        explanation=explained,
    )
    wall = time.perf_counter() - t0
    return plan.model_copy(update={"solver": solver.model_copy(update={"wall_time_s": wall})})

