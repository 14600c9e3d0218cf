"""Per-stage optimisation over the global layouts, with bounds: which rows need the per-stage model at all.

Every distinct global layout with ``pp > 1`` (fitting with the uniform split or not) gets a lower bound on
its best per-stage step time (``stage_bounds``: the average of the fastest per-rank work for every row; then,
where that leaves hope, the balance of each rank's memory-aware work with rank 0's smallest tail; then, where that
still leaves hope, the joint bound on rank 0's layers and tail). Rows are visited by increasing bound; a row is
solved with the per-stage CP-SAT model (options that cannot beat the incumbent dropped) unless its bound already
reaches the incumbent, in which case it and every later row are bounded out. The result is OPTIMAL when every row is
solved optimally or bounded out within the time limit: optimal over the per-stage model's closed-form pipeline term;
a row whose closed-form optimum has unequal model chunks is also solved over equal-chunk splits and the better of the
two, as the cost model prices them (with the schedule's loss, ``pipeline_sim``), is kept, so under that loss the
result is the better of two exact optima, not a proven one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from shardplan.costmodel.training.frameworks import caps_for
from shardplan.costmodel.training.pipeline_sim import uniform_split
from shardplan.costmodel.training.report import TrainReport
from shardplan.costmodel.training.stage_bounds import average_lower_bounds, stage_lower_bounds
from shardplan.costmodel.training.stage_report import split_report
from shardplan.costmodel.training.stage_split import (
    StageSplitCost,
    evaluate_split,
    supports_stage_split,
)
from shardplan.costmodel.training.stages import KindCost
from shardplan.costmodel.training.table import TrainTable
from shardplan.planner.training.request import TrainRequest
from shardplan.planner.training.schema import SolverOut, StageSearchOut
from shardplan.planner.training.stages import StageChoice, StageSpace, bounded_options, solve_stages


@dataclass(frozen=True, slots=True)
class StageSearch:
    """The best per-stage plan found over the global rows, and how every row was accounted for."""

    row: int  # table row of the winning global layout
    split: StageSplitCost | None  # None: the uniform split of ``row`` stays best
    choice: StageChoice | None
    uniform_step_s: float  # the uniform split's step time of the best uniform row
    solved: int  # rows whose per-stage model was solved
    bounded: int  # rows whose lower bound could not beat the incumbent
    single_stage: int  # rows without a pipeline (nothing to split)
    skipped: int  # rows left unexamined when the time ran out
    status: str  # optimal when every row was solved optimally or bounded out
    solve_s: float


def _score(step_s: float, gb: int, per_seq: bool) -> float:
    return step_s / gb if per_seq else step_s


def solve_row(req: TrainRequest, table: TrainTable, i: int, *, time_limit_s: float, upper_bound_s: float | None = None,
              kinds: dict[str, KindCost] | None = None) -> tuple[StageSplitCost | None, StageChoice | None]:
    """The per-stage plan of table row ``i`` under the request's constraints (recompute pinned or free, one
    count for every rank when exporting, offload as allowed), evaluated by the cost model; (None, None) when no
    per-stage plan fits or beats ``upper_bound_s`` (a step time without the overhead factor)."""
    r = table.rows
    lay = r.row(i)
    w = req.workload.model_copy(update={"global_batch": int(r.gb[i])})
    offloaded = bool(r.f_opt[i] + r.f_w[i] + r.f_act[i] > 0)
    one_count = req.framework is not None and caps_for(req.framework, req.model).one_recompute_count
    space = StageSpace(req.model, req.system, w, lay, allow_offload=req.offload == "on" or offloaded,
                       single_recompute=req.single_recompute_count or one_count,
                       free_recompute=req.recompute_layers is None and req.recompute is None, kinds=kinds or {})
    t0 = time.perf_counter()
    best: tuple[StageSplitCost | None, StageChoice | None] = (None, None)
    complete = True  # both solves optimal (or the second not needed)
    # The closed-form per-stage optimum over every split; when its chunks are unequal the schedule's loss
    # (pipeline_sim) prices it above the closed form, so the exact optimum over equal-chunk splits competes too.
    options = bounded_options(space, upper_bound_s)  # the equal-chunk space's are a subset (Options.equal_chunks)
    for equal in (False, True):
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0:
            complete = False
            break
        sp = replace(space, equal_chunks=equal) if equal else space
        choice = solve_stages(sp, time_limit_s=left, seed=req.seed, upper_bound_s=upper_bound_s,
                              options=options.equal_chunks(space) if equal else options)
        if choice is not None:
            complete &= choice.status == "optimal"
            split = evaluate_split(req.model, req.system, w, lay, choice.layers, choice.recompute_layers,
                                   choice.offload_pct, space.kinds)
            if best[0] is None or (not split.fits, split.step_time_s) < (not best[0].fits, best[0].step_time_s):
                best = (split, choice)
        if best[0] is None or best[0].schedule_excess_s == 0.0:
            break  # nothing fits, or the plan found has equal chunks: the equal-chunk space holds nothing better
        if req.model.num_layers % lay.interleave:
            break  # no split has equal chunks: every rank's layers a multiple of v would sum to a multiple of v
    if best[1] is not None and not complete:
        best = (best[0], replace(best[1], status="feasible"))
    return best


def search_stages(req: TrainRequest, table: TrainTable, rows: np.ndarray, best_row: int, per_seq: bool, *,
                  time_limit_s: float) -> StageSearch:
    """Per-stage plans over the distinct global ``rows`` of ``table``; ``best_row`` is the uniform optimum."""
    t0 = time.perf_counter()
    model, system, work = req.model, req.system, req.workload
    r = table.rows
    overhead = 1 + system.software.step_overhead_fraction
    uniform_step = float(table.step_time_s[best_row])
    incumbent = _score(uniform_step, int(r.gb[best_row]), per_seq)
    best: tuple[int, StageSplitCost | None, StageChoice | None] = (best_row, None, None)
    deep = rows[r.pp[rows] > 1]
    free = req.recompute_layers is None and req.recompute is None
    allow = req.offload == "on" or (req.offload == "auto" and bool((r.f_opt + r.f_w + r.f_act)[
        rows].max(initial=0) > 0))
    # Two bounds: a cheap average-work one for every row, the memory-aware one where the cheap one leaves hope.
    # per-kind costs depend on neither recompute nor offload: the table's serve every bound and solve below
    kinds = table.kinds.take(deep)
    lb = average_lower_bounds(model, system, work, r.take(deep), free_recompute=free, kinds=kinds) * overhead
    lb = lb / np.where(per_seq, r.gb[deep], 1)
    hope = np.flatnonzero(lb < incumbent * (1 - 1e-9))
    per = np.where(per_seq, r.gb[deep[hope]], 1)
    fine = stage_lower_bounds(model, system, work, r.take(deep[hope]), free_recompute=free, allow_offload=allow,
                              cutoff=incumbent * (1 - 1e-9) * per / overhead,
                              kinds=kinds.take(hope))
    lb[hope] = np.maximum(lb[hope], fine * overhead / per)
    order = np.argsort(lb, kind="stable")
    solved = bounded = 0
    status = "optimal"
    for pos, j in enumerate(order):
        if lb[j] >= incumbent * (1 - 1e-9):
            bounded = len(order) - pos
            break
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0:
            status = "feasible"
            break
        i = int(deep[j])
        gb = int(r.gb[i])
        bound_s = incumbent * (gb if per_seq else 1) / overhead
        split, choice = solve_row(req, table, i, time_limit_s=left, upper_bound_s=bound_s,
                                  kinds=table.kinds_of(np.array([i])))
        solved += 1
        if choice is None or split is None:
            continue
        if choice.status != "optimal":
            status = "feasible"
        score = _score(split.step_time_s, gb, per_seq)
        if split.fits and score < incumbent:
            incumbent, best = score, (i, split, choice)
    skipped = len(order) - solved - bounded
    if skipped:
        status = "feasible"
    return StageSearch(best[0], best[1], best[2], uniform_step, solved, bounded, len(rows) - len(deep), skipped,
                       status, time.perf_counter() - t0)



def stage_plan_report(req: TrainRequest, table: TrainTable, search: StageSearch, uniform_best: TrainReport,
                      report: Callable[[int], TrainReport]) -> TrainReport:
    """The report of the search's plan: the per-stage evaluation, or the uniform one when it stays best."""
    if search.split is None:
        split = uniform_best.plan.model_copy(update={"stage_layers": uniform_split(req.model.num_layers,
                                                                                  uniform_best.plan.pp)})
        return uniform_best.model_copy(update={"plan": split})
    i = search.row
    base = report(i)
    lay = table.rows.row(i)
    w = req.workload.model_copy(update={"global_batch": int(table.rows.gb[i])})
    return split_report(req.model, req.system, req.num_gpus, w, lay, search.split, base, table.kinds_of(np.array([i])))


def row_report(req: TrainRequest, table: TrainTable, i: int, report: Callable[[int], TrainReport]) -> TrainReport:
    """Row ``i`` as a plan prints it (a ``--top-k`` alternative): its per-stage optimum when that beats its uniform
    split, else the uniform split, named (``stage_layers``) either way, so the numbers are ``estimate train`` of the
    layout with those stage layers. Without per-stage search or a pipeline: ``report(i)``."""
    base = report(i)
    r = table.rows
    if req.uniform_stages or not supports_stage_split(req.model) or r.pp[i] == 1 or base.plan is None:
        return base
    split, _ = solve_row(req, table, i, time_limit_s=req.time_limit_s, kinds=table.kinds_of(np.array([i])))
    if split is None or not split.fits or base.metrics is None or split.step_time_s >= base.metrics.step_time_s:
        uniform = uniform_split(req.model.num_layers, int(r.pp[i]))
        return base.model_copy(update={"plan": base.plan.model_copy(update={"stage_layers": uniform})})
    w = req.workload.model_copy(update={"global_batch": int(r.gb[i])})
    return split_report(req.model, req.system, req.num_gpus, w, r.row(i), split, base, table.kinds_of(np.array([i])))


def with_stage_search(solver: SolverOut, search: StageSearch) -> SolverOut:
    return solver.model_copy(update={"stage_search": StageSearchOut(
        status=search.status, solved=search.solved, bounded=search.bounded, single_stage=search.single_stage,
        skipped=search.skipped, solve_s=search.solve_s, uniform_step_time_s=search.uniform_step_s)})


def stage_sentence(search: StageSearch, best: TrainReport) -> str:
    """What the per-stage choice gained over the uniform split, in one sentence."""
    rows = (f"{search.solved} global layouts solved per stage, {search.bounded} bounded out"
            + (f", {search.skipped} left at the time limit" if search.skipped else ""))
    if search.split is None or best.plan is None or best.metrics is None:
        return f"The uniform layer split stays best ({rows})."
    p = best.plan
    gain = 100 * (search.uniform_step_s / best.metrics.step_time_s - 1)
    what = f"layers per stage {_runs(p.stage_layers or [])}"
    if p.stage_recompute_layers is not None:
        what += f", fully recomputed layers per stage {_runs(p.stage_recompute_layers)}"
    if any(p.stage_offload_activations or []):
        pcts = [round(100 * x) for x in p.stage_offload_activations or []]
        what += f", activations offloaded per stage (%) {_runs(pcts)}"
    return (f"Per-stage choice ({what}): step {best.metrics.step_time_s:.4g} s vs {search.uniform_step_s:.4g} s with "
            f"the uniform split, {gain:+.1f}% throughput ({rows}).")


def _runs(values: list[int]) -> str:
    """``[7, 8, 8, 8, 7]`` → ``7, 8×3, 7``."""
    out: list[str] = []
    for v in values:
        if out and out[-1].split("×")[0] == str(v):
            head, _, count = out[-1].partition("×")
            out[-1] = f"{head}×{int(count or 1) + 1}"
        else:
            out.append(str(v))
    return "[" + ", ".join(out) + "]"
