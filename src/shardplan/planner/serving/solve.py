"""``plan_inference``: the serving layout (TP, PP, EP, replicas, batch) chosen by CP-SAT over the cost table.

Pipeline: request → layouts with tp·pp·replicas = GPUs (``valid_tp``, ``valid_ep``) → each layout's
largest batch (``infer_cost`` at batch 1: memory does not depend on the batch) → rows (layout, batch):
every batch 1..max, or a geometric grid plus the exact max when that exceeds the row budget → one
``infer_cost`` over all rows → numpy drops rows over memory or the TTFT/TPOT limits → CP-SAT selects
(``select``: one boolean per row, exactly one, integer objective from ``scaling``) → the chosen layout
re-evaluated by ``estimate_inference`` (the reported numbers).

Objectives: ``throughput`` maximises output tokens/s over all GPUs (CP-SAT minimises
``max(u) − u_r`` with ``u = to_int_throughput``); ``latency`` minimises one request's end-to-end time
(µs). ``--max-batch`` gives every layout exactly its largest batch. ``--pareto`` lists the
(TPOT, throughput) frontier of the table, each point re-evaluated.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.core.layouts import check_gpus, divisors
from shardplan.costmodel.core.result import ResultHead, Status
from shardplan.costmodel.serving.cost import InferCost, InferRows, infer_cost
from shardplan.costmodel.serving.report import (
    InferMemory,
    InferMetrics,
    InferPlanOut,
    InferReport,
    PhaseLayerRow,
    estimate_inference,
    valid_ep,
    valid_tp,
)
from shardplan.errors import ShardplanError
from shardplan.planner.core.pins import require_allowed
from shardplan.planner.core.scaling import (
    TIME_UNIT_S,
    from_int_throughput,
    from_int_time,
    to_int_throughput,
    to_int_time,
)
from shardplan.planner.core.select import brute_force, explain_infeasible, select
from shardplan.planner.serving.explain import memory_reason, pareto_front, slo_reason
from shardplan.planner.serving.knobs import InferObjective
from shardplan.planner.serving.request import InferRequest
from shardplan.units import format_seconds


class InferSolverOut(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Status = Field(description="CP-SAT status: optimal, feasible (time limit) or infeasible.")
    wall_time_s: float
    build_s: float = Field(description="Enumerating and costing the table (numpy).")
    solve_s: float = Field(description="CP-SAT model building and solving.")
    candidates: int = Field(description="Rows (layout, batch) costed.")
    feasible: int = Field(description="Rows that fit memory and meet the TTFT/TPOT limits.")
    objective: float = Field(description="tokens/s (throughput) or seconds (latency), unscaled from CP-SAT.")
    objective_unit: Literal["tokens/s", "s"]
    best_bound: float
    gap: float


class InferAlternative(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int
    plan: InferPlanOut
    metrics: InferMetrics


class InferPlan(ResultHead):
    num_gpus: int
    prompt_len: int
    gen_len: int
    objective: str
    plan: InferPlanOut | None = None
    metrics: InferMetrics | None = None
    memory: InferMemory | None = None
    prefill_layers: list[PhaseLayerRow] = Field(default_factory=list)
    decode_layers: list[PhaseLayerRow] = Field(default_factory=list)
    solver: InferSolverOut
    alternatives: list[InferAlternative] = Field(default_factory=list)
    pareto: list[InferAlternative] = Field(default_factory=list, description="Throughput–TPOT frontier.")
    explanation: list[str] = Field(default_factory=list)


def _check_pins(req: InferRequest) -> None:
    """Each pinned value must be possible on its own (the combination is checked by enumeration)."""
    m, n = req.model, req.num_gpus

    require_allowed("tp", req.tp, [t for t in valid_tp(m) if n % t == 0])
    require_allowed("pp", req.pp, [p for p in divisors(n) if p <= m.num_layers])
    require_allowed("ep", req.ep, [e for e in divisors(m.moe.num_experts) if n % e == 0] if m.moe else [1])
    if req.batch is not None and req.max_batch:
        raise ShardplanError("give --batch B or --max-batch, not both", field="batch")


def layouts(req: InferRequest) -> list[tuple[int, int, int, int]]:
    """Every (tp, pp, ep, replicas) with tp·pp·replicas = GPUs; TP within a node unless pinned or allowed."""
    m, n = req.model, req.num_gpus
    max_tp = n if req.cross_node_tp or req.tp else min(n, req.system.gpus_per_node)
    out = []
    for tp in valid_tp(m):
        if n % tp or tp > max_tp or (req.tp is not None and tp != req.tp):
            continue
        for pp in divisors(n // tp):
            if pp > m.num_layers or (req.pp is not None and pp != req.pp):
                continue
            replicas = n // (tp * pp)
            for ep in valid_ep(m, replicas):
                if req.ep is None or ep == req.ep:
                    out.append((tp, pp, ep, replicas))
    return out


def batch_grid(max_b: int, budget: int) -> np.ndarray:
    """Batches 1..max_b, or (beyond ``budget`` values) a geometric grid that always holds max_b.

    A layout that holds no sequence keeps one row (batch 1) so infeasibility can be explained."""
    if max_b < 1:
        return np.ones(1, dtype=np.int64)
    if max_b <= budget:
        return np.arange(1, max_b + 1, dtype=np.int64)
    grid = np.unique(np.round(np.geomspace(1, max_b, max(budget - 1, 2))).astype(np.int64))
    return np.union1d(grid, [max_b])


def build_rows(req: InferRequest) -> tuple[InferRows, np.ndarray]:
    """Rows (layout, batch) to cost, and each layout's largest batch."""
    lays = layouts(req)
    if not lays:
        raise ShardplanError(f"no layout with these pins uses exactly {req.num_gpus} GPUs (tp·pp·replicas = --gpus; "
                             "tp divides the heads; ep divides the experts and the replicas)", field="gpus")
    base = InferRows(*(np.array(c, dtype=np.int64) for c in zip(*lays, strict=True)),
                     batch=np.ones(len(lays), dtype=np.int64))
    max_b = infer_cost(req.model, req.system, req.workload, base).max_batch.astype(np.int64)
    budget = max(1, req.max_rows // len(lays))
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    for i, (tp, pp, ep, dp) in enumerate(lays):
        if req.batch is not None:
            bs = np.array([req.batch], dtype=np.int64)
        elif req.max_batch:
            bs = np.array([max(int(max_b[i]), 1)], dtype=np.int64)
        else:
            bs = batch_grid(int(max_b[i]), budget)
        for col, v in zip(cols, (tp, pp, ep, dp), strict=False):
            col.append(np.full(len(bs), v, dtype=np.int64))
        cols[4].append(bs)
    return InferRows(*(np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in cols)), max_b


def tie_rank(rows: InferRows) -> np.ndarray:
    """Deterministic preference among equal objectives: shallower pipeline, smaller TP, less EP, smaller batch."""
    order = np.lexsort((rows.batch, rows.ep, rows.tp, rows.pp))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows))
    return rank


def admissible(req: InferRequest, cost: InferCost) -> dict[str, np.ndarray]:
    """Violations per requirement: ``out[name][r]`` is True when row r breaks it."""
    out = {"gpu_memory": ~cost.fits}
    if req.max_ttft_s is not None:
        out["ttft_limit"] = cost.ttft_s > req.max_ttft_s
    if req.max_tpot_s is not None:
        out["tpot_limit"] = cost.tpot_s > req.max_tpot_s
    return out


def primary_objective(req: InferRequest, cost: InferCost, idx: np.ndarray) -> np.ndarray:
    """Integer objective to minimise over rows ``idx``: throughput shortfall, or latency in µs."""
    if req.objective == InferObjective.LATENCY:
        return to_int_time(cost.e2e_s[idx], TIME_UNIT_S)
    u = to_int_throughput(cost.tokens_per_s[idx])
    return u.max(initial=0) - u


def _alt(rank: int, rep: InferReport) -> InferAlternative:
    return InferAlternative(rank=rank, plan=rep.plan, metrics=rep.metrics)


def plan_inference(req: InferRequest) -> InferPlan:
    """Plan serving: the optimal layout and batch under the cost model, with alternatives or the frontier."""
    t0 = time.perf_counter()
    check_gpus(req.system, req.num_gpus)
    _check_pins(req)
    rows, _ = build_rows(req)
    cost = infer_cost(req.model, req.system, req.workload, rows)
    violations = admissible(req, cost)
    ok = ~np.logical_or.reduce(list(violations.values()))
    feasible = np.flatnonzero(ok)
    build_s = time.perf_counter() - t0
    common = dict(model=req.model.name, hardware=req.system.name, num_gpus=req.num_gpus,
                  prompt_len=req.workload.prompt_len, gen_len=req.workload.gen_len, objective=str(req.objective))
    unit: Literal["tokens/s", "s"] = "s" if req.objective == InferObjective.LATENCY else "tokens/s"
    if len(feasible) == 0:
        return _infeasible(req, cost, violations, common, build_s, t0, unit)

    primary = primary_objective(req, cost, feasible)
    rank = tie_rank(rows.take(feasible))
    hint = brute_force(primary, rank)[0]
    sel = select(primary, rank, k=req.top_k, time_limit_s=req.time_limit_s, seed=req.seed, hint=hint,
                 label=lambda i: _label(rows, int(feasible[i])))
    chosen = [int(feasible[i]) for i in sel.indices]
    n = len(feasible)
    if req.objective == InferObjective.LATENCY:
        obj, bound = from_int_time(sel.objective[0] // n), from_int_time(sel.bound[0] / n)
    else:
        top = int(to_int_throughput(cost.tokens_per_s[feasible]).max())
        obj, bound = from_int_throughput(top - sel.objective[0] // n), from_int_throughput(top - sel.bound[0] / n)
    gap = abs(obj - bound) / obj if obj else 0.0

    def report(i: int) -> InferReport:
        return estimate_inference(req.model, req.system, req.num_gpus, req.workload, rows.row(i))

    best = report(chosen[0])
    alts = [_alt(k, report(i)) for k, i in enumerate(chosen[1:], start=2)]
    front = []
    if req.pareto:
        sub = pareto_front(cost.tpot_s[feasible], cost.tokens_per_s[feasible], rank)
        front = [_alt(k, report(int(feasible[i]))) for k, i in enumerate(sub, start=1)]
    solver = InferSolverOut(status=sel.statuses[0], wall_time_s=0.0, build_s=build_s, solve_s=sel.build_s + sel.solve_s,
                            candidates=len(rows), feasible=n, objective=obj, objective_unit=unit, best_bound=bound,
                            gap=gap)
    plan = InferPlan(status=sel.statuses[0], plan=best.plan, metrics=best.metrics, memory=best.memory,
                     prefill_layers=best.prefill_layers, decode_layers=best.decode_layers, solver=solver,
                     alternatives=alts, pareto=front, explanation=_explain(req, best, cost, feasible), **common)
    wall = time.perf_counter() - t0
    return plan.model_copy(update={"solver": solver.model_copy(update={"wall_time_s": wall})})


def _label(rows: InferRows, i: int) -> str:
    return f"pick[tp={rows.tp[i]},pp={rows.pp[i]},ep={rows.ep[i]},replicas={rows.dp[i]},batch={rows.batch[i]}]"


def _explain(req: InferRequest, best: InferReport, cost: InferCost, feasible: np.ndarray) -> list[str]:
    m, mem = best.metrics, best.memory
    lines = [f"KV cache: {mem.kv_cache_tokens:,} token slots per replica hold {m.max_batch_size} sequences of "
             f"{req.workload.prompt_len + req.workload.gen_len} tokens; the plan runs {best.plan.batch_size}."]
    bound = {r.bound for r in best.decode_layers if r.kind in ("attention", "mlp", "moe")}
    lines.append(f"Decode steps are {'/'.join(sorted(bound))}-bound: TPOT {format_seconds(m.tpot_s)}, "
                 f"TTFT {format_seconds(m.ttft_s)} over {m.prefill_chunks} prefill chunk(s).")
    lines.append(f"{len(feasible):,} of {len(cost.rows):,} (layout, batch) rows fit"
                 + (" and meet the latency limits." if req.max_ttft_s or req.max_tpot_s else " in memory."))
    return lines


def _infeasible(req: InferRequest, cost: InferCost, violations: dict[str, np.ndarray], common: dict,
                build_s: float, t0: float, unit: Literal["tokens/s", "s"]) -> InferPlan:
    """No row meets every requirement: name the binding ones (CP-SAT assumptions) and the cheapest fixes."""
    core = explain_infeasible(violations)
    fits = cost.fits
    if "gpu_memory" in core or not fits.any():
        reason = memory_reason(req, cost)
        fixes = _memory_fixes(req)
    else:
        reason, fixes = slo_reason(req, cost, fits)
    solver = InferSolverOut(status="infeasible", wall_time_s=time.perf_counter() - t0, build_s=build_s, solve_s=0.0,
                            candidates=len(cost.rows), feasible=0, objective=0.0, objective_unit=unit,
                            best_bound=0.0, gap=0.0)
    return InferPlan(status="infeasible", reason=reason, suggestions=fixes, solver=solver,
                     explanation=[f"Requirements that cannot all hold: {', '.join(core) or 'gpu_memory'}."], **common)


def _memory_fixes(req: InferRequest) -> list[str]:
    """Cheaper datatypes that fit on these GPUs, and the smallest GPU count (whole nodes) that fits."""
    w, m = req.workload, req.model
    out = []
    for text, upd in (("--kv-dtype fp8", {"kv_dtype": "fp8"}), ("--weight-dtype fp8", {"weight_dtype": "fp8"}),
                      ("--weight-dtype int4", {"weight_dtype": "int4"})):
        if (upd.get("weight_dtype") and (w.weights(m) == upd["weight_dtype"] or w.dtype == "fp8")) or \
                (upd.get("kv_dtype") and w.kv() == "fp8"):
            continue
        sub = req.model_copy(update={"workload": w.model_copy(update=upd), "batch": None, "max_batch": True})
        if bool(_any_fit(sub)):
            out.append(f"{text} fits on {req.num_gpus} GPUs")
    node, n = req.system.gpus_per_node, max(req.num_gpus, 1)
    for _ in range(7):
        n = n * 2 if n >= node else node
        if req.system.max_nodes and n > node * req.system.max_nodes:
            break
        if req.system.inter_node is None and n > node:
            break
        if _any_fit(req.model_copy(update={"num_gpus": n, "batch": None, "max_batch": True})):
            out.append(f"use {n} GPUs")
            break
    return out or ["no layout fits even on many more GPUs: shorten --prompt-len/--gen-len or quantise"]


def _any_fit(req: InferRequest) -> bool:
    try:
        _rows, max_b = build_rows(req)
    except ShardplanError:
        return False
    return bool((max_b >= 1).any())
