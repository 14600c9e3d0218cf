"""``plan_offload``: where weights, KV cache and activations live, chosen by CP-SAT over the offload cost table.

Pipeline: request → knob rows (GPU batch b, GPU batches K, CPU attention, compression) → cost table of linear
lane/memory forms (``costmodel.offload_table``, numpy) → per row a greedy placement (upper bound) and a
Lagrangian lower bound → rows in lower-bound order, each a small factored CP-SAT model, until no remaining
row's bound can beat the best plan → the chosen plan re-evaluated by ``costmodel.offload.estimate_offload``.

The per-row CP-SAT model and its brute-force reference are in ``planner.offload_cpsat``; the bounds in
``planner.offload_bounds``. Rows compare by time per generated token (throughput) or block time (latency).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.core.result import ResultHead, Status
from shardplan.costmodel.offload.evaluate import estimate_offload, evaluate_row
from shardplan.costmodel.offload.policy import (
    CPU,
    Capacities,
    Knobs,
    OffloadObjective,
    OffloadPolicy,
    OffloadWorkload,
    Placement,
    check_system,
)
from shardplan.costmodel.offload.report import (
    OffloadMemoryOut,
    OffloadMetrics,
    OffloadPlanOut,
    OffloadReport,
    ResourceRow,
)
from shardplan.costmodel.offload.table import build_offload_table
from shardplan.costmodel.offload.terms import OffloadTable
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.planner.offload.bounds import (
    greedy_placements,
    lower_bounds,
    min_footprint_fits,
    provably_infeasible,
    score,
)
from shardplan.planner.offload.cpsat import int_row, rounding_slack, solve_row
from shardplan.units import format_bytes

# GPU batch sizes and batch counts considered (FlexGen's published policies use 2, 32, 48, 64, 72 × 1, 3, 8).
GPU_BATCHES = (1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160, 192, 224, 256, 320,
               384, 448, 512)
NUM_GPU_BATCHES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)


class OffloadRequest(BaseModel):
    """What to plan: model, machine, workload, tier capacities, objective, search space and solver limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    system: SystemSpec
    workload: OffloadWorkload
    capacities: Capacities
    objective: OffloadObjective = OffloadObjective.THROUGHPUT
    allow_compression: bool = Field(False, description="Also consider 4-bit weights and/or KV cache.")
    gpu_batch_sizes: tuple[int, ...] = GPU_BATCHES
    num_gpu_batches: tuple[int, ...] = NUM_GPU_BATCHES
    cpu_attention: bool | None = Field(None, description="Pin CPU attention on or off (None: both).")
    percent_step: Annotated[int, Field(ge=1, le=100)] = Field(1, description="Placement grid in percent.")
    time_limit_s: Annotated[float, Field(gt=0)] = 10.0
    seed: int = 0


class OffloadSolverOut(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Status = Field(description="optimal: every row solved or bounded out; feasible: stopped early.")
    wall_time_s: float
    candidates: int = Field(description="Knob rows enumerated (GPU batch × GPU batches × CPU attention × compression).")
    pruned_memory: int = Field(description="Rows whose smallest possible footprint exceeds a tier.")
    pruned_bound: int = Field(description="Rows whose lower bound cannot beat the chosen plan.")
    solved: int = Field(description="Rows solved by CP-SAT.")
    build_s: float
    solve_s: float
    objective: float = Field(description="Seconds per generated token (throughput) or block time (latency).")
    best_bound: float
    gap: float


class OffloadPlanResult(ResultHead):
    prompt_len: int
    gen_len: int
    objective: OffloadObjective
    plan: OffloadPlanOut | None = None
    metrics: OffloadMetrics | None = None
    bottleneck: dict[str, str] = Field(default_factory=dict)
    resources: list[ResourceRow] = Field(default_factory=list)
    memory: OffloadMemoryOut | None = None
    solver: OffloadSolverOut
    explanation: list[str] = Field(default_factory=list)


def candidate_knobs(req: OffloadRequest) -> Knobs:
    """Every (b, K, CPU attention, weight compression, KV compression) row of the search space."""
    attn = (False, True) if req.cpu_attention is None else (req.cpu_attention,)
    comp = (False, True) if req.allow_compression else (False,)
    rows = list(itertools.product(req.gpu_batch_sizes, req.num_gpu_batches, attn, comp, comp))
    b, k, a, cw, ck = (list(col) for col in zip(*rows, strict=True))
    return Knobs.of(gpu_batch=b, num_batches=k, cpu_attention=a, compress_weights=cw, compress_kv=ck)


# --- the search ---------------------------------------------------------------------------------------------
def policy_of(table: OffloadTable, r: int, x: np.ndarray) -> OffloadPolicy:
    """The policy of row r with placement fractions ``x`` (3, 3)."""
    k = table.knobs
    xs = [Placement.of(*(float(v) for v in np.round(x[c], 4))) for c in range(3)]
    return OffloadPolicy(gpu_batch_size=int(k.gpu_batch[r]), num_gpu_batches=int(k.num_batches[r]),
                         weights=xs[0], kv_cache=xs[1], activations=xs[2], cpu_attention=bool(k.cpu_attention[r]),
                         compress_weights=bool(k.compress_weights[r]), compress_kv_cache=bool(k.compress_kv[r]),
                         pin_weights=bool(k.pin_weights[r]))


@dataclass
class _Search:
    """Incumbent and bookkeeping of the branch-and-bound over rows."""

    best_score: float = float("inf")
    best_row: int = -1
    best_x: np.ndarray | None = None
    solved: int = 0
    pruned_bound: int = 0
    all_optimal: bool = True
    open_bound: float = float("inf")  # least lower bound of rows not closed (time limit)


def _run_search(req: OffloadRequest, table: OffloadTable, rows: np.ndarray, ub: np.ndarray, x_ub: np.ndarray,
                lb: np.ndarray, deadline: float) -> _Search:
    """Rows in lower-bound order; CP-SAT on each until the next bound cannot beat the incumbent."""
    st = _Search()
    if np.isfinite(ub[rows]).any():
        i = rows[int(np.argmin(ub[rows]))]
        st.best_score, st.best_row, st.best_x = float(ub[i]), int(i), x_ub[i]
    lb_score = score(table, lb, req.objective)
    for r in rows[np.argsort(lb_score[rows], kind="stable")]:
        if lb_score[r] >= st.best_score * (1 - 1e-9):
            st.pruned_bound += 1
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            st.all_optimal = False
            st.open_bound = min(st.open_bound, float(lb_score[r]))
            continue
        row = int_row(table, int(r))
        hint = np.round(x_ub[r] * 100).astype(int) if np.isfinite(ub[r]) else None
        cutoff = None
        if np.isfinite(st.best_score):  # a placement must beat the incumbent (float time → units, plus rounding)
            per = 1.0 if req.objective == OffloadObjective.LATENCY else float(table.knobs.block[r])
            cutoff = int(st.best_score * per / row.unit) + rounding_slack(row)
        sol = solve_row(row, step=req.percent_step, hint=hint, time_limit_s=left, seed=req.seed, cutoff=cutoff)
        st.solved += 1
        if sol.pct is None:
            if sol.status != "infeasible":
                st.all_optimal = False
                st.open_bound = min(st.open_bound, float(lb_score[r]))
            continue
        if sol.status != "optimal":
            st.all_optimal = False
            st.open_bound = min(st.open_bound, sol.bound * row.unit / (1 if req.objective == "latency"
                                                                         else float(table.knobs.block[r])))
        x = sol.pct / 100.0
        cost = evaluate_row(table, int(r), x[None])
        s = float(score(table.take(np.array([r])), cost.total_s, req.objective)[0])
        if bool(cost.fits[0]) and s < st.best_score:
            st.best_score, st.best_row, st.best_x = s, int(r), x
    return st


def plan_offload(req: OffloadRequest) -> OffloadPlanResult:
    """The placement and batch knobs with the best objective under the cost model, with what limits it."""
    t0 = time.perf_counter()
    check_system(req.system)
    m, sysm, work = req.model, req.system, req.workload
    knobs = candidate_knobs(req)
    table = build_offload_table(m, sysm, work, knobs, req.capacities)
    fits = min_footprint_fits(table)
    fits[fits] = ~provably_infeasible(table.take(np.flatnonzero(fits)))
    rows = np.flatnonzero(fits)
    x_ub, ub = greedy_placements(table, req.percent_step, req.objective)
    lb = np.full(len(table), np.inf)
    if len(rows):
        # Polyak targets: the row's own greedy plan, and the best greedy plan (all a row must beat).
        sub = table.take(rows)
        per_row = sub.knobs.block if req.objective == OffloadObjective.THROUGHPUT else 1
        lb[rows] = np.maximum(lower_bounds(sub, x_ub[rows], ub[rows] * per_row, iterations=40),
                              lower_bounds(sub, x_ub[rows], np.minimum(ub[rows], ub[rows].min()) * per_row,
                                           iterations=40))
    build = time.perf_counter() - t0
    st = _run_search(req, table, rows, ub, x_ub, lb, t0 + req.time_limit_s)
    solve = time.perf_counter() - t0 - build
    common = dict(candidates=len(table), pruned_memory=int(len(table) - len(rows)), pruned_bound=st.pruned_bound,
                  solved=st.solved, build_s=build, solve_s=solve)
    if st.best_x is None:
        wall = time.perf_counter() - t0
        solver = OffloadSolverOut(status="infeasible", wall_time_s=wall, objective=0.0, best_bound=0.0, gap=0.0,
                                  **common)
        reason, suggestions = _infeasible(req, table)
        return OffloadPlanResult(status="infeasible", reason=reason, suggestions=suggestions, model=m.name,
                                 hardware=sysm.name, prompt_len=work.prompt_len, gen_len=work.gen_len,
                                 objective=req.objective, solver=solver)
    policy = policy_of(table, st.best_row, st.best_x)
    rep = estimate_offload(m, sysm, work, policy, req.capacities)
    status = "optimal" if st.all_optimal else "feasible"
    bound = min(st.best_score, st.open_bound)
    per_token = work.gen_len if req.objective == OffloadObjective.THROUGHPUT else 1  # scores are per sequence
    solver = OffloadSolverOut(status=status, wall_time_s=time.perf_counter() - t0,
                              objective=st.best_score / per_token, best_bound=bound / per_token,
                              gap=max(0.0, 1 - bound / st.best_score), **common)
    return OffloadPlanResult(
        status=status, model=m.name, hardware=sysm.name, prompt_len=work.prompt_len, gen_len=work.gen_len,
        objective=req.objective, plan=rep.plan, metrics=rep.metrics, bottleneck=rep.bottleneck,
        resources=rep.resources, memory=rep.memory, solver=solver,
        explanation=_explain(req, table, rep, st, ub))


_RESOURCE_NAMES = {"gpu": "GPU compute", "cpu": "the CPU (attention, staging copies)",
                   "pcie_h2d": "PCIe host→GPU", "pcie_d2h": "PCIe GPU→host", "disk_read": "disk reads",
                   "disk_write": "disk writes"}


def _explain(req: OffloadRequest, table: OffloadTable, rep: OffloadReport, st: _Search, ub: np.ndarray) -> list[str]:
    """Sentences: what bounds each phase, which tier is full, and the gain over the best greedy placement."""
    lines = []
    for phase, res in rep.bottleneck.items():
        busy = {r.resource: r for r in rep.resources if r.phase == phase}
        total = rep.metrics.prefill_s if phase == "prefill" else rep.metrics.decode_s
        share = busy[res].binding_s / total if total else 0.0
        lines.append(f"{phase.capitalize()} is bound by {_RESOURCE_NAMES[res]} ({share:.0%} of its time).")
    full = [t for t in rep.memory.tiers if t.capacity_bytes and t.total_bytes >= 0.97 * t.capacity_bytes]
    for t in full:
        lines.append(f"{t.tier.upper() if t.tier != 'disk' else 'Disk'} memory is full "
                     f"({format_bytes(t.total_bytes)} of {format_bytes(t.capacity_bytes)}): more of it would help.")
    greedy = float(np.min(ub)) if np.isfinite(ub).any() else float("inf")
    if np.isfinite(greedy) and greedy > st.best_score * 1.005:
        lines.append(f"{greedy / st.best_score:.2f}× better than the best greedy fill-the-GPU-first placement.")
    return lines


def _infeasible(req: OffloadRequest, table: OffloadTable) -> tuple[str, list[str]]:
    """Name the binding tier of the leanest row and the cheapest fixes."""
    least = table.mem_const + table.mem_coef.min(axis=-1).sum(axis=-1)  # (R, J): each class on its cheapest tier
    i = int(np.argmin((least / np.maximum(table.capacity, 1)).max(axis=1)))
    cap = table.capacity
    gpu_need = least[i, :2].max()
    suggestions = []
    if gpu_need > cap[0]:
        reason = (f"GPU memory: even the smallest GPU batch needs {format_bytes(gpu_need)} of buffers > "
                  f"{format_bytes(cap[0])}")
        suggestions.append("shorten --prompt-len (the prefill buffers grow with its square)")
    else:
        # the CPU form holds each class in full: weights + KV cache + hidden states of the leanest block
        total = float(table.mem_coef[i, 2, :, CPU].sum())
        reason = (f"CPU memory + disk: weights, KV cache and hidden states of the smallest block need "
                  f"{format_bytes(total)} > {format_bytes(cap[2])} CPU + {format_bytes(cap[3])} disk")
        suggestions.append(f"give the run about {format_bytes(total - cap[2])} of disk (--disk) or more host memory "
                           "(--cpu-mem)")
    if not req.allow_compression:
        suggestions.append("--allow-compression (4-bit weights and KV cache take 28% of the bytes)")
    return reason, suggestions
