"""The factored CP-SAT model of one knob row, and the numpy brute force it must agree with.

Model (integer percents p[c,t] of class c on tier t; times in ``unit`` seconds, memory in KiB; needs rounded
up and capacities down by ``planner.scaling``):

    minimise   Σ_(phase, sublayer, iteration) W · m[phase, sublayer, iteration]
    subject to (1) Σ_t p[c,t] = 100                      for each class
               (2) M0_j + Σ M_j[c,t] · p[c,t] ≤ cap_j     GPU (prefill peak, decode peak), CPU, disk
               (3) m = max_lane (C0 + Σ C[c,t] · p[c,t])    the iteration's slowest lane (add_max_equality)

W counts iterations (layers × steps × 1 or K−1), so the objective is the run time of the block.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.offload.terms import OffloadTable
from shardplan.planner.core.scaling import fine_time_unit, to_int_capacity_kib, to_int_need_kib, to_int_time


# --- the CP-SAT model of one row -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IntRow:
    """Integer coefficients of one row: lanes in ``unit`` seconds per percent, memory in KiB per percent."""

    lane_const: np.ndarray  # (P, s, i, l)
    lane_coef: np.ndarray  # (P, s, i, l, c, t)
    weight: np.ndarray  # (P, i) iteration counts
    mem_const: np.ndarray  # (J,)
    mem_coef: np.ndarray  # (J, c, t)
    capacity: np.ndarray  # (J,)
    unit: float
    allowed: np.ndarray  # (t,) tiers with capacity


def int_row(table: OffloadTable, r: int) -> IntRow:
    """Scale row r (``planner.scaling``: times and needs rounded up, capacities down)."""
    lane_max = table.lane_const[r] + table.lane_coef[r].max(axis=-1).sum(axis=-1)  # every class on its worst tier
    upper = float(np.einsum("pi,psil->", table.weight[r], lane_max))
    unit = fine_time_unit(max(upper, 1e-9))
    return IntRow(
        lane_const=to_int_time(table.lane_const[r], unit), lane_coef=to_int_time(table.lane_coef[r] / 100, unit),
        weight=np.round(table.weight[r]).astype(np.int64), mem_const=to_int_need_kib(table.mem_const[r]),
        mem_coef=to_int_need_kib(table.mem_coef[r] / 100),
        capacity=np.array([to_int_capacity_kib(c) for c in table.capacity]),
        unit=unit, allowed=np.array([True, table.capacity[2] > 0, table.capacity[3] > 0]))


def int_objective(row: IntRow, pct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer objective and feasibility of placements ``pct`` (M, 3, 3) in percent (the brute-force path)."""
    lanes = row.lane_const + np.einsum("psilct,mct->mpsil", row.lane_coef, pct)
    obj = np.einsum("mpsi,pi->m", lanes.max(axis=-1), row.weight)
    mem = row.mem_const + np.einsum("jct,mct->mj", row.mem_coef, pct)
    ok = np.all(mem <= row.capacity, axis=1) & np.all(pct[:, :, ~row.allowed] == 0, axis=(1, 2))
    return obj, ok


@dataclass(frozen=True, slots=True)
class RowSolution:
    status: str  # optimal, feasible, infeasible, unknown
    pct: np.ndarray | None  # (3, 3) percents
    objective: int
    bound: float


def _live_lanes(row: IntRow, ph: int, s: int, i: int) -> list[int]:
    """Lanes of one iteration that can be the maximum: drop a lane whose largest value (every class on its
    worst tier) is below another lane's smallest value, and duplicates."""
    const, coef = row.lane_const[ph, s, i], row.lane_coef[ph, s, i]  # (l,), (l, c, t)
    hi = const + 100 * coef.max(axis=2).sum(axis=1)
    lo = const + 100 * coef.min(axis=2).sum(axis=1)
    keep, seen = [], set()
    for lane in np.argsort(-hi, kind="stable"):
        key = (int(const[lane]), coef[lane].tobytes())
        if hi[lane] < lo.max() or key in seen:
            continue
        seen.add(key)
        keep.append(int(lane))
    return keep


def rounding_slack(row: IntRow) -> int:
    """An upper bound on (integer objective − float run time / unit): every lane rounds up by less than one unit
    for its constant and one per percent placed (300 percents), in every counted iteration."""
    return int(301 * row.weight.sum() * 2) + 1


def solve_row(row: IntRow, *, step: int = 1, hint: np.ndarray | None = None, time_limit_s: float = 10.0,
              seed: int = 0, cutoff: int | None = None) -> RowSolution:
    """CP-SAT over one row's percents (one worker, fixed seed): the placement with the least run time.

    With ``cutoff`` only placements whose integer objective is below it are allowed (branch and bound over
    rows: ``infeasible`` then proves the row cannot beat the incumbent)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    values = list(range(0, 101, step)) if 100 % step == 0 else [*range(0, 101, step), 100]
    dom = cp_model.Domain.from_values(values)
    classes, tiers = ("weights", "kv_cache", "activations"), ("gpu", "cpu", "disk")
    p = [[model.new_int_var_from_domain(dom, f"pct[{c},{t}]") for t in tiers] for c in classes]
    flat = [p[c][t] for c in range(3) for t in range(3)]
    for c in range(3):
        model.add(sum(p[c]) == 100)  # (1)
        for t in range(3):
            if not row.allowed[t]:
                model.add(p[c][t] == 0)

    def expr(const: int, coef: np.ndarray) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.weighted_sum(flat, [int(v) for v in coef.ravel()]) + int(const)

    for j in range(len(row.capacity)):  # (2)
        model.add(expr(row.mem_const[j], row.mem_coef[j]) <= int(row.capacity[j]))
    weights, iters = [], []
    for ph, s, i in itertools.product(range(row.lane_const.shape[0]), range(2), range(2)):
        if row.weight[ph, i] == 0:
            continue
        live = _live_lanes(row, ph, s, i)
        hi = int(max(row.lane_const[ph, s, i, lane] + 100 * row.lane_coef[ph, s, i, lane].max(axis=1).sum()
                     for lane in live))
        m = model.new_int_var(0, hi, f"iteration[phase={ph},sublayer={s},{'first' if i == 0 else 'steady'}]")
        model.add_max_equality(m, [expr(row.lane_const[ph, s, i, lane], row.lane_coef[ph, s, i, lane])
                                   for lane in live])  # (3)
        weights.append(int(row.weight[ph, i]))
        iters.append(m)
    objective = cp_model.LinearExpr.weighted_sum(iters, weights)
    if cutoff is not None:
        model.add(objective < cutoff)
    model.minimize(objective)
    if hint is not None:
        for v, h in zip(flat, np.asarray(hint).ravel(), strict=True):
            model.add_hint(v, int(h))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.cp_model_presolve = False  # measured 2.5× faster on these 9-variable models, same optima
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        name = "infeasible" if status == cp_model.INFEASIBLE else "unknown"
        return RowSolution(name, None, 0, float("inf") if name == "infeasible" else 0.0)
    pct = np.array([[solver.value(p[c][t]) for t in range(3)] for c in range(3)])
    return RowSolution("optimal" if status == cp_model.OPTIMAL else "feasible", pct,
                       int(round(solver.objective_value)), solver.best_objective_bound)


def grid_placements(step: int) -> np.ndarray:
    """Every placement on a ``step``% grid: (M, 3, 3) percents (the brute-force space)."""
    trip = [(g, c, 100 - g - c) for g in range(0, 101, step) for c in range(0, 101 - g, step)
            if (100 - g - c) % step == 0]
    t = np.array(trip)
    idx = np.array(list(itertools.product(range(len(t)), repeat=3)))
    return t[idx]


def brute_force_row(row: IntRow, step: int) -> tuple[np.ndarray | None, int | None]:
    """The reference for ``solve_row``: the least integer objective over the whole grid, numpy."""
    pct = grid_placements(step)
    obj, ok = int_objective(row, pct)
    if not ok.any():
        return None, None
    k = int(np.argmin(np.where(ok, obj, np.iinfo(np.int64).max)))
    return pct[k], int(obj[k])
