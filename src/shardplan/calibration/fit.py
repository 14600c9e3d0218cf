"""Bounded nonlinear least squares on log step-time residuals, and the choice of what to fit.

Residual of run i: ``ln(predicted_i / measured_i)``. Each parameter lives on [0, 1] between its physical
bounds (the scales on a log axis, the overheads linearly), so one Levenberg–Marquardt step size suits all;
steps are projected back into the box. The subset of parameters is chosen automatically: first one rate
that every run exercises — ``gemm_scale``, or a link level's collective efficiency when the runs' steps are
mostly exposed collectives on it and it explains them by a meaningful share better (ZeRO-3 on 384–2240 A100s:
30–80% of the step is inter-node gathers, and a GEMM scale pinned at its bound cannot explain that) — then,
while there are more runs than parameters (up to four), the candidate that lowers the residual most, as long
as it lowers it by a meaningful share. A parameter the runs do not see (``visible``: a
comm scale of a link level their exposed collectives never use) is never a candidate, so a projection onto that
level keeps the base system's value instead of a residual the fit pushed onto it. ``memory_overhead_bytes`` is
fitted apart, in closed form, from the runs that report peak memory (it is the only parameter that moves memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shardplan.calibration.runs import Run
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.hardware.spec import Calibration, SystemSpec, with_calibration

GiB = 2**30
# Time parameters the fit may choose from, after the first, in order of preference on ties.
TIME_PARAMS = ("gemm_scale", "step_overhead_s", "inter_node_comm_scale", "intra_node_comm_scale",
               "attention_scale", "elementwise_scale", "microbatch_overhead_s")
# The first parameter: a rate every run's work goes through (GEMMs, or one link level's collectives), gemm_scale
# unless a visible comm scale beats it by MIN_GAIN. A fixed overhead or a minor kernel class fitted alone
# extrapolated worse on the ``projection`` group (mean |error| 7.6% for step_overhead_s, 7.3% when
# attention/elementwise could open, 6.1% for these three).
FIRST_PARAMS = ("gemm_scale", "inter_node_comm_scale", "intra_node_comm_scale")
LOG_PARAMS = {"gemm_scale", "attention_scale", "elementwise_scale", "intra_node_comm_scale", "inter_node_comm_scale"}
MAX_TIME_PARAMS = 4
# A further parameter is kept only if it removes at least this share of the remaining squared residual,
# and only while the residual is above the fit's resolution (0.1% RMS in step time).
MIN_GAIN = 0.2
RESOLUTION = 1e-3
# A parameter the runs cannot see is not fitted: moving it by a tenth of its range (unit axis) must move some
# run's predicted step time by at least this much (a comm scale: that link level's exposed collectives take
# ≳ 7% of the step; otherwise the runs never crossed onto that level and its prior value stays).
VISIBLE = 0.01


def bounds(name: str) -> tuple[float, float]:
    """The physical range of a parameter, from the schema (``hardware.spec.Calibration``)."""
    meta = Calibration.model_fields[name].metadata
    lo = next(m.ge for m in meta if hasattr(m, "ge"))
    hi = next(m.le for m in meta if hasattr(m, "le"))
    return float(lo), float(hi)


def to_unit(name: str, value: float) -> float:
    lo, hi = bounds(name)
    if name in LOG_PARAMS:
        return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return (value - lo) / (hi - lo)


def from_unit(name: str, u: float) -> float:
    lo, hi = bounds(name)
    u = min(max(u, 0.0), 1.0)
    if name in LOG_PARAMS:
        return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return lo + u * (hi - lo)


def predict_steps(system: SystemSpec, runs: Sequence[Run], values: dict[str, float]) -> np.ndarray:
    """Step time of every run on ``system`` with the calibration ``values`` (the cost model, unchanged)."""
    cal = system.calibration.model_copy(update=values)
    sysc = with_calibration(system, Calibration.model_validate(cal.model_dump()))
    return np.array([estimate_training(r.model, sysc, r.gpus, r.workload, r.layout).metrics.step_time_s
                     for r in runs])


@dataclass(frozen=True)
class Fit:
    params: tuple[str, ...]
    values: dict[str, float]
    residuals: np.ndarray  # ln(predicted / measured) per run


def _lm(fun: Callable[[np.ndarray], np.ndarray], u0: np.ndarray, *, max_iter: int = 40) -> np.ndarray:
    """Projected Levenberg–Marquardt on the box [0, 1]^k with forward differences."""
    u = np.clip(u0.astype(float), 0.0, 1.0)
    r = fun(u)
    cost = float(r @ r)
    lam = 1e-3
    h = 1e-4
    for _ in range(max_iter):
        jac = np.empty((r.size, u.size))
        for j in range(u.size):
            step = h if u[j] + h <= 1.0 else -h
            du = u.copy()
            du[j] += step
            jac[:, j] = (fun(du) - r) / step
        a, g = jac.T @ jac, jac.T @ r
        improved = False
        while lam < 1e10:
            du = np.linalg.solve(a + lam * (np.diag(np.diag(a)) + 1e-12 * np.eye(u.size)), -g)
            un = np.clip(u + du, 0.0, 1.0)
            rn = fun(un)
            cn = float(rn @ rn)
            if cn < cost:
                improved = True
                done = cost - cn < 1e-14 + 1e-10 * cost or float(np.max(np.abs(un - u))) < 1e-7
                u, r, cost, lam = un, rn, cn, max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved or done:
            break
    return u


def fit_params(system: SystemSpec, runs: Sequence[Run], params: Sequence[str],
               start: dict[str, float] | None = None) -> Fit:
    """Least-squares values of ``params`` (others as in ``system``'s calibration) for ``runs``' step times."""
    measured = np.array([r.step_time_s for r in runs], dtype=float)
    base = system.calibration.model_dump()
    start = {**{p: base[p] for p in params}, **(start or {})}

    def values_of(u: np.ndarray) -> dict[str, float]:
        return {p: from_unit(p, float(x)) for p, x in zip(params, u, strict=True)}

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(predict_steps(system, runs, values_of(u)) / measured)

    if not params:
        return Fit((), {}, residuals(np.zeros(0)))
    u = _lm(residuals, np.array([to_unit(p, start[p]) for p in params]))
    return Fit(tuple(params), values_of(u), residuals(u))


def max_time_params(n_runs: int) -> int:
    """Fewer parameters than runs (at most four); one run still fits one rate (``FIRST_PARAMS``). Two runs fit one
    parameter only: an exact two-parameter fit extrapolated worse on the ``projection`` validation group (median
    |error| 11% against 5% with gemm_scale alone)."""
    return 1 if n_runs <= 2 else min(n_runs - 1, MAX_TIME_PARAMS)


def visible(system: SystemSpec, runs: Sequence[Run], name: str) -> bool:
    """Whether ``runs`` see ``name``: a tenth of its range (towards the inside) moves some run's step time by at
    least ``VISIBLE`` (log). Runs on one node never see ``inter_node_comm_scale``; runs whose collectives hide
    behind compute see neither comm scale, and a projection to a layout that exposes them keeps the prior."""
    u0 = to_unit(name, float(getattr(system.calibration, name)))
    moved = from_unit(name, u0 - 0.1 if u0 >= 0.1 else u0 + 0.1)
    base = predict_steps(system, runs, {})
    return bool(np.max(np.abs(np.log(predict_steps(system, runs, {name: moved}) / base))) >= VISIBLE)


def select_and_fit(system: SystemSpec, runs: Sequence[Run]) -> Fit:
    """Forward selection: the first rate (``FIRST_PARAMS``), then the visible parameter that lowers the residual
    most, while it helps."""
    fit = fit_params(system, runs, ["gemm_scale"])
    seen = [c for c in TIME_PARAMS[1:] if visible(system, runs, c)]
    for cand in (c for c in FIRST_PARAMS[1:] if c in seen):
        sse = float(fit.residuals @ fit.residuals)
        if math.sqrt(sse / len(runs)) < RESOLUTION:  # gemm_scale already explains the runs
            break
        trial = fit_params(system, runs, [cand])
        if float(trial.residuals @ trial.residuals) < (1 - MIN_GAIN) * sse:
            fit = trial
    limit = max_time_params(len(runs))
    # gemm_scale stays a candidate when a link level's rate was fitted first (ties prefer TIME_PARAMS' order)
    seen = [c for c in TIME_PARAMS if c == "gemm_scale" or c in seen] if limit > 1 else []
    while len(fit.params) < limit:
        sse = float(fit.residuals @ fit.residuals)
        if math.sqrt(sse / len(runs)) < RESOLUTION:
            break
        best: Fit | None = None
        for cand in seen:
            if cand in fit.params:
                continue
            trial = fit_params(system, runs, [*fit.params, cand], start=fit.values)
            if best is None or float(trial.residuals @ trial.residuals) < float(best.residuals @ best.residuals):
                best = trial
        if best is None or float(best.residuals @ best.residuals) > (1 - MIN_GAIN) * sse:
            break
        fit = best
    return fit


def leave_one_out(system: SystemSpec, runs: Sequence[Run], fit: Fit) -> np.ndarray:
    """Relative error ``predicted/measured − 1`` of each run when the chosen parameters are fitted on the others."""
    errs = []
    for i in range(len(runs)):
        rest = [r for j, r in enumerate(runs) if j != i]
        sub = fit_params(system, rest, fit.params, start=fit.values)
        pred = predict_steps(system, [runs[i]], sub.values)[0]
        errs.append(pred / runs[i].step_time_s - 1)
    return np.array(errs)


def fit_memory(runs: Sequence[Run], predicted_bytes: Sequence[float]) -> float | None:
    """Memory overhead: mean of measured − predicted peak memory, clipped to its bounds; None without data."""
    pairs = [(r.peak_memory_bytes, p) for r, p in zip(runs, predicted_bytes, strict=True)
             if r.peak_memory_bytes is not None]
    if not pairs:
        return None
    lo, hi = bounds("memory_overhead_bytes")
    return float(min(max(np.mean([m - p for m, p in pairs]), lo), hi))
