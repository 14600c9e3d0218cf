"""``plan_training``: the fastest training layout for a GPU count, chosen by CP-SAT over the cost table.

Pipeline: request → candidate space (``costmodel.space``) → cost table with closed-form memory fixes
(``costmodel.table``) → one row per distinct layout → CP-SAT selection (``select``) → the chosen layout
re-evaluated by ``costmodel.evaluate.estimate_training`` (the reported numbers) → explanation.
"""

from __future__ import annotations

import time

import numpy as np

from shardplan.costmodel.core.layouts import check_gpus
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import LayoutArrays
from shardplan.costmodel.training.space import enumerate_layouts, row_keys
from shardplan.costmodel.training.table import TrainTable, build_train_table
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.planner.core.scaling import RATE_UNIT_S, TIME_UNIT_S, from_int_time, to_int_time
from shardplan.planner.core.select import select
from shardplan.planner.training.explain import comparisons, explanation, infeasible_plan
from shardplan.planner.training.request import TrainRequest, check_pins, space_request
from shardplan.planner.training.schema import Alternative, SolverOut, TrainPlan

LAYOUT_KEY = ("tp", "pp", "dp", "ep", "cp", "mb", "v", "rc", "sp", "zero", "gb")


def tie_rank(rows: LayoutArrays) -> np.ndarray:
    """Deterministic preference among equal step times: less recompute, less offload, lower ZeRO, smaller
    TP, shallower pipeline, less CP/EP, fewer chunks, no SP, larger microbatch, larger batch."""
    offload = rows.f_opt + rows.f_w + rows.f_act
    rk = np.where(rows.rc == 2, rows.rk, 0)
    order = np.lexsort((-rows.gb, -rows.mb, rows.sp, rows.v, rows.ep, rows.cp, rows.pp, rows.tp, rows.zero,
                        offload, rk, rows.rc))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows))
    return rank


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


def baseline_row(table: TrainTable, feasible: np.ndarray, system: SystemSpec) -> int | None:
    """The hand-written heuristic: TP = a full node, the shallowest pipeline that fits, microbatch 1,
    no interleaving, the least recompute that fits, ZeRO-1 when there is data parallelism."""
    r = table.rows
    tp0 = r.tp[feasible].max(initial=0)
    tp0 = min(tp0, system.gpus_per_node) if tp0 else 0
    mask = feasible & (r.tp == tp0) & (r.cp == 1) & (r.v == 1) & (r.f_opt + r.f_w + r.f_act == 0)
    mask &= (r.sp == (tp0 > 1)) & (r.zero == np.minimum(1, r.dp - 1))
    mb1 = mask & (r.mb == 1)
    mask = mb1 if mb1.any() else mask
    if not mask.any():
        return None
    cand = np.flatnonzero(mask)
    order = np.lexsort((r.gb[cand] * -1, r.rc[cand], r.pp[cand]))
    return int(cand[order[0]])


def plan_training(req: TrainRequest, *, explain: bool = True) -> TrainPlan:
    """Plan a training run: the optimal layout under the cost model, with alternatives and reasons.

    ``explain=False`` skips the search for fixes when nothing fits (used by that search itself).
    """
    t0 = time.perf_counter()
    check_gpus(req.system, req.num_gpus)
    check_pins(req)
    work = req.workload
    space = enumerate_layouts(req.model, work, space_request(req))
    if len(space.rows) == 0:
        raise ShardplanError(
            f"no layout with these pins uses exactly {req.num_gpus} GPUs and a valid batch (tp·pp·dp·cp must equal "
            f"--gpus, dp·microbatch must divide the global batch)", field="gpus")
    rows = space.rows
    if req.recompute_layers is not None:
        rows = rows.replace(rk=np.where(rows.rc == 2, req.recompute_layers, rows.rk))
    table = build_train_table(req.model, req.system, work, rows, allow_offload=req.offload != "off",
                              partial_recompute=req.recompute is None)
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
    base = baseline_row(table, table.fits, req.system)
    hint = int(np.flatnonzero(cand == base)[0]) if base is not None and (cand == base).any() else None
    sel = select(primary_all[cand], tie_rank(table.rows.take(cand)), k=req.top_k, time_limit_s=req.time_limit_s,
                 seed=req.seed, hint=hint)
    chosen = [int(cand[i]) for i in sel.indices]
    unit = RATE_UNIT_S if per_seq else TIME_UNIT_S
    n_rows = len(cand)
    obj = from_int_time(sel.objective[0] // n_rows, unit)
    bound = from_int_time(sel.bound[0] / n_rows, unit)
    solver = SolverOut(status=sel.statuses[0], wall_time_s=0.0, solve_s=sel.build_s + sel.solve_s,
                       selector_rows=n_rows, objective=obj, best_bound=bound,
                       gap=max(0.0, (obj - bound) / obj) if obj else 0.0, **common)

    def report(i: int):
        row = table.rows.row(i)
        w = work.model_copy(update={"global_batch": int(table.rows.gb[i])})
        return estimate_training(req.model, req.system, req.num_gpus, w, row)

    best = report(chosen[0])
    alts = []
    for k, i in enumerate(chosen[1:], start=2):
        rep = report(i)
        alts.append(Alternative(rank=k, plan=rep.plan, step_time_s=rep.metrics.step_time_s,
                                tokens_per_s=rep.metrics.tokens_per_s,
                                delta_pct=100 * (best.metrics.tokens_per_s / rep.metrics.tokens_per_s - 1),
                                memory_bytes=rep.memory.total_bytes))
    plan = TrainPlan(
        status=sel.statuses[0], model=req.model.name, hardware=req.system.name, num_gpus=req.num_gpus,
        seq_len=work.seq_len, plan=best.plan, metrics=best.metrics, memory=best.memory, stages=best.stages,
        layers=best.layers, solver=solver, alternatives=alts,
        comparisons=comparisons(table, chosen[0], req.system),
        explanation=explanation(best, table, base, req.system),
    )
    wall = time.perf_counter() - t0
    return plan.model_copy(update={"solver": solver.model_copy(update={"wall_time_s": wall})})

