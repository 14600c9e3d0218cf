"""CP-SAT as a selector over a cost table, and the numpy brute force it must agree with.

Model (rows r = 1..R of a pre-filtered table, c_r = integer objective coefficient):

    minimise   Σ_r c_r · pick_r
    subject to (1) Σ_r pick_r = 1                      exactly one layout
               (2) pick_r = 0 for every r already chosen (top-k: no-good cuts)

``c_r = objective_r · R + rank_r`` makes ties deterministic (``scaling.lexicographic``). Infeasible rows
never reach the model: numpy drops them, and ``explain_infeasible`` builds a second model with one
assumption literal per requirement to name the binding ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shardplan.errors import ShardplanError
from shardplan.planner.core.scaling import MAX_EXACT, MAX_OBJECTIVE_SUM, lexicographic


@dataclass
class Selection:
    """Chosen row indices (best first), with CP-SAT's status and timing for each solve."""

    indices: list[int]
    statuses: list[str]
    objective: list[int]
    bound: list[float]
    build_s: float
    solve_s: float
    num_rows: int
    progress: list[tuple[float, float]] = field(default_factory=list)  # (seconds, objective) improvements


def brute_force(primary: np.ndarray, rank: np.ndarray, k: int = 1) -> list[int]:
    """The reference: rows sorted by (primary, rank), first k."""
    order = np.lexsort((rank, primary))
    return [int(i) for i in order[:k]]


def select(primary: np.ndarray, rank: np.ndarray, *, k: int = 1, time_limit_s: float = 30.0, seed: int = 0,
           hint: int | None = None, label: Callable[[int], str] | None = None) -> Selection:
    """Pick the k best rows with CP-SAT (one worker, fixed seed: deterministic)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    exact = [int(p) * len(rank) + int(r) for p, r in zip(primary.tolist(), rank.tolist(), strict=True)]
    top = max(exact, default=0)
    by_position = top >= MAX_EXACT or top * len(exact) >= MAX_OBJECTIVE_SUM
    if not by_position:
        coeffs = lexicographic(primary, rank)
    else:
        # Coefficients past 2^53 are not exact in CP-SAT's doubles, and a sum past 2^62 fails CP-SAT's overflow check
        # (MODEL_INVALID): give CP-SAT each row's position in the exact order instead (the same minimiser; positions
        # sum to < R², far below either limit); objectives are reported in exact units.
        order = sorted(range(len(exact)), key=exact.__getitem__)
        coeffs = [0] * len(exact)
        for pos, i in enumerate(order):
            coeffs[i] = pos
    model = cp_model.CpModel()
    name = label or (lambda i: f"pick[{i}]")
    picks = [model.new_bool_var(name(i)) for i in range(len(coeffs))]
    model.add_exactly_one(picks)  # (1)
    model.minimize(cp_model.LinearExpr.weighted_sum(picks, coeffs))
    if hint is not None:
        model.add_hint(picks[hint], 1)
    build = time.perf_counter() - t0

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    out = Selection([], [], [], [], build, 0.0, len(coeffs))
    t1 = time.perf_counter()
    for _ in range(min(k, len(coeffs))):
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if not out.indices:
                what = "no solution" if status == cp_model.UNKNOWN else f"CP-SAT status {solver.status_name(status)}"
                raise ShardplanError(f"{what} within --time-limit {time_limit_s:g} s; raise it", field="time-limit")
            break
        chosen = next(i for i, p in enumerate(picks) if solver.boolean_value(p))
        out.indices.append(chosen)
        out.statuses.append("optimal" if status == cp_model.OPTIMAL else "feasible")
        if by_position:
            out.objective.append(exact[chosen])
            out.bound.append(float(exact[chosen]) if status == cp_model.OPTIMAL else 0.0)
        else:
            out.objective.append(int(round(solver.objective_value)))
            out.bound.append(solver.best_objective_bound)
        model.add(picks[chosen] == 0)  # (2)
        if hint is not None:
            model.clear_hints()
    out.solve_s = time.perf_counter() - t1
    return out


MAX_CORE_ROWS = 50_000
"""Above this many rows the assumption model takes CP-SAT longer to load than any time limit (its loading is not
interruptible; 79 s for 300k rows measured): the core comes from the deletion filter instead."""


def _deletion_core(violations: dict[str, np.ndarray]) -> list[str]:
    """An irreducible set of requirements no row meets together (the deletion filter: drop a requirement whenever
    the others still leave no row), in numpy; the same kind of answer as the CP-SAT core."""
    core = list(violations)
    if np.logical_or.reduce([violations[r] for r in core]).all():
        for req in list(core):
            rest = [r for r in core if r != req]
            if rest and np.logical_or.reduce([violations[r] for r in rest]).all():
                core = rest
        return core
    return []


def explain_infeasible(violations: dict[str, np.ndarray], *, time_limit_s: float = 10.0) -> list[str]:
    """Requirements that together leave no row: ``violations[req][r]`` is True when row r breaks req.

    One assumption literal per requirement; each distinct violation pattern's pick implies the negation of every
    requirement it breaks. CP-SAT's ``sufficient_assumptions_for_infeasibility`` names a subset that cannot all hold.
    """
    if violations:
        # rows breaking the same requirements are interchangeable picks: one of each pattern decides the same
        # question (at most 2^k rows for k requirements), so the model stays small for any table
        names = list(violations)
        patterns = np.unique(np.stack([np.asarray(violations[r], dtype=bool) for r in names], axis=1), axis=0)
        violations = {r: patterns[:, j] for j, r in enumerate(names)}
    n = len(next(iter(violations.values()))) if violations else 0
    if n > MAX_CORE_ROWS:
        return _deletion_core(violations)
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    reqs = {name: model.new_bool_var(f"req[{name}]") for name in violations}
    picks = [model.new_bool_var(f"pick[{i}]") for i in range(n)]
    model.add_exactly_one(picks)
    for req, broken in violations.items():
        for i in np.flatnonzero(broken):
            model.add_implication(picks[int(i)], ~reqs[req])
    model.add_assumptions(list(reqs.values()))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # assumptions need a single worker
    solver.parameters.max_time_in_seconds = time_limit_s
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return []  # some row meets every requirement: no core
    if status != cp_model.INFEASIBLE:
        return _deletion_core(violations)  # no answer within the time limit
    core = set(solver.sufficient_assumptions_for_infeasibility())
    return [name for name, lit in reqs.items() if lit.index in core]
