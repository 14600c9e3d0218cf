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
    report_row,
    valid_ep,
    valid_tp,
)
from shardplan.errors import ShardplanError
from shardplan.planner.core.pins import require_allowed
from shardplan.planner.core.scaling import (
    THROUGHPUT_UNIT,
    TIME_UNIT_S,
    from_int_throughput,
    from_int_time,
    objective_unit,
    to_int_throughput,
    to_int_time,
)
from shardplan.planner.core.select import brute_force, explain_infeasible, select
from shardplan.planner.serving.explain import memory_reason, pareto_front, rate_reason, slo_reason
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
    if req.workload.mode == "continuous":  # the engine runs at most max_num_seqs sequences at once
        max_b = np.minimum(max_b, req.workload.max_num_seqs)
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


def bounded_ttft(req: InferRequest, cost: InferCost) -> np.ndarray:
    """The TTFT statistic the limit bounds: the mean, or the 90th percentile under the offered load."""
    if req.slo_statistic == "p90" and cost.steady is not None:
        return cost.steady.ttft_p90_s
    return cost.ttft_s


def best_per_layout(rows: InferRows, primary: np.ndarray, rank: np.ndarray, k: int) -> np.ndarray:
    """Indices of each layout's ``k`` best rows by (objective, tie rank): the table's ``k`` best plans are among
    them, so the other rows are dominated and never reach CP-SAT."""
    _, layout = np.unique(np.stack([rows.tp, rows.pp, rows.ep, rows.dp]), axis=1, return_inverse=True)
    order = np.lexsort((rank, primary, layout))
    first = np.r_[0, np.flatnonzero(np.diff(layout[order])) + 1]
    pos = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    return np.sort(order[pos < k])


def admissible(req: InferRequest, cost: InferCost) -> dict[str, np.ndarray]:
    """Violations per requirement: ``out[name][r]`` is True when row r breaks it."""
    out = {"gpu_memory": ~cost.fits}
    if cost.steady is not None and req.workload.request_rate is not None:
        out["request_rate"] = cost.steady.utilisation >= 1.0
    if req.max_ttft_s is not None:
        out["ttft_limit"] = bounded_ttft(req, cost) > req.max_ttft_s
    if req.max_tpot_s is not None:
        out["tpot_limit"] = cost.tpot_s > req.max_tpot_s
    return out


def by_latency(req: InferRequest) -> bool:
    """Latency decides: asked for, or an offered load fixes every admissible row's throughput at rate·gen."""
    return req.objective == InferObjective.LATENCY or req.workload.request_rate is not None


def objective_values(req: InferRequest, cost: InferCost) -> np.ndarray:
    """The float objective of every row: end-to-end latency (s) or throughput (tokens/s)."""
    return cost.e2e_s if by_latency(req) else cost.tokens_per_s


def primary_objective(req: InferRequest, cost: InferCost, idx: np.ndarray) -> tuple[np.ndarray, float]:
    """Integer objective to minimise over rows ``idx`` and its unit: throughput shortfall, or latency.

    The unit is 1 µs / 0.001 tokens/s, coarsened by powers of ten where the table's largest value would
    overflow CP-SAT's exact range (``scaling.objective_unit``)."""
    vals = objective_values(req, cost)[idx]
    top = float(vals.max(initial=0.0))
    if by_latency(req):
        unit = objective_unit(top, len(idx), TIME_UNIT_S)
        return to_int_time(vals, unit), unit
    unit = objective_unit(top, len(idx), THROUGHPUT_UNIT)
    u = to_int_throughput(vals, unit)
    return u.max(initial=0) - u, unit


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
    unit: Literal["tokens/s", "s"] = "s" if by_latency(req) else "tokens/s"
    if len(feasible) == 0:
        return _infeasible(req, cost, violations, common, build_s, t0, unit)

    primary_all, unit_value = primary_objective(req, cost, feasible)
    rank_all = tie_rank(rows.take(feasible))
    keep = best_per_layout(rows.take(feasible), primary_all, rank_all, req.top_k)
    sub = feasible[keep]
    primary, rank = primary_all[keep], np.argsort(np.argsort(rank_all[keep])).astype(np.int64)
    hint = brute_force(primary, rank)[0]
    sel = select(primary, rank, k=req.top_k, time_limit_s=req.time_limit_s, seed=req.seed, hint=hint,
                 label=lambda i: _label(rows, int(sub[i])))
    chosen = [int(sub[i]) for i in sel.indices]
    n = len(sub)
    if by_latency(req):
        obj, bound = from_int_time(sel.objective[0] // n, unit_value), from_int_time(sel.bound[0] / n, unit_value)
    else:
        top = int(to_int_throughput(cost.tokens_per_s[feasible], unit_value).max())
        obj = from_int_throughput(top - sel.objective[0] // n, unit_value)
        bound = from_int_throughput(top - sel.bound[0] / n, unit_value)
    gap = abs(obj - bound) / obj if obj else 0.0

    def report(i: int) -> InferReport:
        return estimate_inference(req.model, req.system, req.num_gpus, req.workload, rows.row(i))

    best = report(chosen[0])
    alts = [_alt(k, report(i)) for k, i in enumerate(chosen[1:], start=2)]
    front = []
    if req.pareto:
        front_idx = pareto_front(cost.tpot_s[feasible], cost.tokens_per_s[feasible], rank_all)
        # table rows are evaluate() of their layouts (same infer_cost): report them without re-costing
        front = [_alt(k, report_row(cost, int(feasible[i]), model=req.model, system=req.system, work=req.workload,
                                    num_gpus=req.num_gpus)) for k, i in enumerate(front_idx, start=1)]
    solver = InferSolverOut(status=sel.statuses[0], wall_time_s=0.0, build_s=build_s, solve_s=sel.build_s + sel.solve_s,
                            candidates=len(rows), feasible=len(feasible), objective=obj, objective_unit=unit,
                            best_bound=bound,
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
    # a requirement no row meets is a core by itself (no CP-SAT needed); otherwise ask CP-SAT's assumptions
    alone = [name for name, broken in violations.items() if bool(broken.all())]
    core = alone[:1] or explain_infeasible(violations)
    fits = cost.fits
    if "gpu_memory" in core or not fits.any():
        reason = memory_reason(req, cost)
        fixes = _memory_fixes(req)
    else:
        reason, fixes = rate_reason(req, cost, fits) if "request_rate" in core else slo_reason(req, cost, fits)
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
