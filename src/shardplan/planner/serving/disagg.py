"""``plan_disaggregated``: prefill and decode workers chosen by CP-SAT, beside the best aggregated plan.

Rows: every worker layout (``tp`` within a node unless cross-node TP is allowed, ``pp`` a power of two,
``ep`` a divisor of the expert count for MoE models (the worker is ``ep`` replicas of ``tp·pp`` GPUs, one EP
group), ``tp·pp·ep < --gpus``) × a batch grid, costed by ``costmodel.serving.disagg``; numpy drops rows that do
not fit or break the TTFT (prefill rows: prefill + KV transfer) or TPOT (decode rows) limit, then keeps, per worker size
(GPUs), the row serving the most requests/s — the objective depends on a worker only through its GPUs and
capacity, so the others are dominated.

CP-SAT model (one prefill row i, one decode row j, worker counts ``n_p``, ``n_d``; ``μ`` in integer units of
``RATE_UNIT`` requests/s rounded down, GPUs exact):

    R ≤ Σ_i μ_i a_i,   R ≤ Σ_j μ_j b_j                   served requests/s
    U = Σ_i g_i a_i + Σ_j g_j b_j ≤ --gpus                GPUs used
    R ≥ ⌈--request-rate⌉                                  when an offered load is given

with ``a_i`` the prefill workers of row i, nonzero for exactly one row (likewise ``b_j``): linear, so every
Dinkelbach step is a small integer linear program (``solve_disagg`` encodes the counts).

Goodput per GPU ``R/U`` is a ratio: Dinkelbach's method maximises ``R·U_k − R_k·U`` from the incumbent
``(R_k, U_k)`` until no plan beats its ratio (exact: each step strictly improves an integer ratio over a finite
set), then a last solve maximises ``R`` among plans with that ratio. ``brute_force_disagg`` enumerates the same
integer model for the exactness test.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
from pydantic import Field

from shardplan.costmodel.core.layouts import check_gpus
from shardplan.costmodel.core.result import Out, ResultHead, Status
from shardplan.costmodel.serving.cost import InferRows, infer_cost
from shardplan.costmodel.serving.disagg import WorkerTable, decode_workers, prefill_workers
from shardplan.costmodel.serving.report import InferMetrics, InferPlanOut, valid_ep, valid_tp
from shardplan.errors import ShardplanError
from shardplan.planner.core.scaling import objective_unit
from shardplan.planner.serving.request import InferRequest
from shardplan.planner.serving.solve import batch_grid, plan_inference

RATE_UNIT = 1e-6  # requests/s resolution of worker capacities (coarsened if the model's sums would overflow)
PP_CHOICES = (1, 2, 4, 8, 16)
COUNT_LITERALS = 128  # (row, worker count) literals per kind up to which solve_disagg enumerates the counts


class WorkerOut(Out):
    tp: int
    pp: int
    ep: int = Field(1, description="Expert parallelism: the worker is ep attention-DP replicas of tp·pp GPUs sharing "
                    "the routed experts (one EP group); 1 for dense models.")
    workers: int
    batch_size: int = Field(description="Per replica (ep of them per worker): prefill: prompts per batch; decode: "
                            "sequences in flight.")


class DisaggPlanOut(Out):
    prefill: WorkerOut
    decode: WorkerOut


class DisaggMetrics(Out):
    ttft_s: float = Field(description="Prefill of the worker's batch plus the KV transfer (from admission).")
    tpot_s: float = Field(description="One decode round of a decode worker at the mean context.")
    tokens_per_s: float = Field(description="Output tokens/s: min(prefill, decode capacity) · gen.")
    tokens_per_s_per_gpu: float = Field(description="Per GPU used (the objective).")
    requests_per_s: float
    max_batch_size: int = Field(description="Largest batch a decode worker's replica's KV cache holds.")
    e2e_latency_s: float
    kv_transfer_s: float
    gpus_used: int
    prefill_capacity_requests_per_s: float
    decode_capacity_requests_per_s: float


class AggregatedOut(Out):
    plan: InferPlanOut | None
    metrics: InferMetrics | None
    tokens_per_s_per_gpu: float


class DisaggSolverOut(Out):
    status: Status
    wall_time_s: float
    candidates: int = Field(description="Worker rows costed (prefill + decode).")
    kept: int = Field(description="Rows left after limits and dominance (one per worker size and kind).")
    dinkelbach_steps: int


class InferDisaggPlan(ResultHead):
    num_gpus: int
    prompt_len: int
    gen_len: int
    plan: DisaggPlanOut | None = None
    metrics: DisaggMetrics | None = None
    aggregated: AggregatedOut | None = None
    winner: str | None = Field(None, description="disaggregated or aggregated: the higher goodput per GPU.")
    solver: DisaggSolverOut
    explanation: list[str] = Field(default_factory=list)


def worker_eps(req: InferRequest) -> list[int]:
    """EP degrees a worker may take: a worker of ``ep`` replicas is one EP group, so ``valid_ep`` over ``ep``
    replicas must allow ``ep`` itself (the divisors of the expert count; 1 for dense models)."""
    m = req.model
    return valid_ep(m, m.moe.num_experts if m.moe else 1)


def worker_rows(req: InferRequest, kind: str) -> InferRows:
    """Worker layouts (tp, pp, ep; ep replicas of tp·pp GPUs) × batches (a grid up to each layout's largest)."""
    m, n = req.model, req.num_gpus
    max_tp = n if req.cross_node_tp else min(n, req.system.gpus_per_node)
    lays = [(tp, pp, ep) for tp in valid_tp(m) for pp in PP_CHOICES for ep in worker_eps(req)
            if tp <= max_tp and pp <= m.num_layers and tp * pp * ep < n]
    if not lays:
        raise ShardplanError("--disaggregate needs at least 2 GPUs (one prefill and one decode worker)", field="gpus")
    tp0, pp0, ep0 = (np.array(c, dtype=np.int64) for c in zip(*lays, strict=True))
    base = InferRows(tp0, pp0, ep0, ep0, np.ones(len(lays), dtype=np.int64))
    w = req.workload.model_copy(update={"gen_len": 1} if kind == "prefill" else {})
    max_b = infer_cost(m, req.system, w.model_copy(update={"mode": "static"}), base).max_batch.astype(np.int64)
    cols: list[list[np.ndarray]] = [[], [], [], []]
    for (tp, pp, ep), mb in zip(lays, max_b, strict=True):
        bs = batch_grid(min(int(mb), req.workload.max_num_seqs), 24)  # the engine's cap on sequences in flight
        for col, v in zip(cols, (tp, pp, ep), strict=False):
            col.append(np.full(len(bs), v))
        cols[3].append(bs)
    tp_, pp_, ep_, b_ = (np.concatenate(c).astype(np.int64) for c in cols)
    return InferRows(tp_, pp_, ep_, ep_, b_)


def _table(req: InferRequest, kind: str, rows: InferRows) -> WorkerTable:
    same_node = req.num_gpus <= req.system.gpus_per_node
    if kind == "prefill":
        return prefill_workers(req.model, req.system, req.workload, rows, same_node)
    return decode_workers(req.model, req.system, req.workload, rows)


def best_per_size(t: WorkerTable, ok: np.ndarray) -> WorkerTable:
    """Per worker size (GPUs), the admissible row with the largest capacity (ties: smaller pp, ep, tp, batch)."""
    idx = np.flatnonzero(ok)
    order = idx[np.lexsort((t.batch[idx], t.tp[idx], t.ep[idx], t.pp[idx], -t.capacity_rps[idx], t.gpus[idx]))]
    _, first = np.unique(t.gpus[order], return_index=True)
    return t.take(order[first])


def _units(x: np.ndarray, unit: float) -> list[int]:
    return [int(v) for v in np.floor(np.round(x / unit, 6)).astype(np.int64)]


def brute_force_disagg(gp: list[int], mp: list[int], gd: list[int], md: list[int], n: int, need: int = 0
                       ) -> tuple[Fraction, int]:
    """Best (R/U, R) over every (i, j, n_p, n_d) of the integer model: the exactness reference."""
    best = (Fraction(0), 0)
    for g1, m1 in zip(gp, mp, strict=True):
        for g2, m2 in zip(gd, md, strict=True):
            for a in range(1, (n - g2) // g1 + 1):
                for b in range(1, (n - a * g1) // g2 + 1):
                    r = min(a * m1, b * m2)
                    if r >= need and r > 0:
                        best = max(best, (Fraction(r, a * g1 + b * g2), r))
    return best


def solve_disagg(gp: list[int], mp: list[int], gd: list[int], md: list[int], n: int, need: int = 0,
                 time_limit_s: float = 10.0) -> tuple[int, int, int, int, int, int, int, bool] | None:
    """CP-SAT (Dinkelbach) over the integer model: (i, j, n_p, n_d, R, U, steps, proven optimal), or None if
    infeasible.

    GPUs and capacities are linear in the worker counts. Up to ``COUNT_LITERALS`` literals per kind every
    (row, count) pair is a literal (exactly one per kind), which CP-SAT proves in milliseconds; beyond, one integer
    count per row (``a_i ≤ ⌊n/g_i⌋·x_i``, ``a_i ≥ x_i``), solved without presolve (which turns that form into a
    search bisecting R's domain for seconds)."""
    from ortools.sat.python import cp_model

    top = max(max(mp), max(md)) * n
    model = cp_model.CpModel()
    small = sum(n // g for g in gp) <= COUNT_LITERALS and sum(n // g for g in gd) <= COUNT_LITERALS

    def kind(name: str, g: list[int], m: list[int]) -> tuple[list, cp_model.LinearExpr, cp_model.LinearExpr]:
        """Per row its worker count (an expression), and the kind's GPUs and capacity."""
        if small:
            lits = [[model.new_bool_var(f"{name}[{i}]x{k}") for k in range(1, n // gi + 1)] for i, gi in enumerate(g)]
            model.add_exactly_one([v for row in lits for v in row])
            cnt = [sum(k * v for k, v in enumerate(row, start=1)) for row in lits]
        else:
            sel = [model.new_bool_var(f"{name}[{i}]") for i in range(len(g))]
            cnt = [model.new_int_var(0, n // gi, f"{name}_workers[{i}]") for i, gi in enumerate(g)]
            model.add_exactly_one(sel)
            for c, v, gi in zip(cnt, sel, g, strict=True):
                model.add(c <= (n // gi) * v)
                model.add(c >= v)
        return cnt, sum(gi * c for gi, c in zip(g, cnt, strict=True)), sum(mi * c for mi, c in zip(m, cnt, strict=True))

    a, u_p, c_p = kind("prefill", gp, mp)
    b, u_d, c_d = kind("decode", gd, md)
    r = model.new_int_var(max(need, 1), top, "R")
    model.add(r <= c_p)
    model.add(r <= c_d)
    u = model.new_int_var(2, n, "U")
    model.add(u == u_p + u_d)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.cp_model_presolve = small
    proven = True

    def run() -> bool:
        nonlocal proven
        status = solver.solve(model)
        proven = proven and status == cp_model.OPTIMAL
        return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    def snapshot() -> tuple[int, int, int, int, int, int]:
        i = next(k for k, c in enumerate(a) if solver.value(c) > 0)
        j = next(k for k, c in enumerate(b) if solver.value(c) > 0)
        return i, j, solver.value(a[i]), solver.value(b[j]), solver.value(r), solver.value(u)

    model.maximize(r)  # a first incumbent
    if not run():
        return None
    best = snapshot()
    steps = 1
    while True:
        model.maximize(r * best[5] - u * best[4])
        if not run():
            break
        steps += 1
        if solver.objective_value <= 0:
            break
        best = snapshot()
    model.add(r * best[5] - u * best[4] >= 0)  # keep the best ratio, then serve the most
    model.maximize(r * (n + 1) - u)
    if run():
        best = snapshot()
    return (*best, steps + 1, proven)


def plan_disaggregated(req: InferRequest) -> InferDisaggPlan:
    """Prefill/decode workers maximising goodput per GPU under the limits, and the best aggregated plan."""
    t0 = time.perf_counter()
    check_gpus(req.system, req.num_gpus)
    if req.workload.gen_len < 2:
        raise ShardplanError("--disaggregate needs --gen-len ≥ 2 (a decode phase)", field="gen-len")
    w, n = req.workload, req.num_gpus
    pre = _table(req, "prefill", worker_rows(req, "prefill"))
    dec = _table(req, "decode", worker_rows(req, "decode"))
    ok_p = pre.fits & (pre.latency_s <= (req.max_ttft_s or np.inf))
    ok_d = dec.fits & (dec.latency_s <= (req.max_tpot_s or np.inf))
    common = dict(model=req.model.name, hardware=req.system.name, num_gpus=n, prompt_len=w.prompt_len,
                  gen_len=w.gen_len)
    agg = _aggregated(req)
    if not ok_p.any() or not ok_d.any():
        what = "prefill (TTFT incl. KV transfer)" if not ok_p.any() else "decode (TPOT)"
        solver = DisaggSolverOut(status="infeasible", wall_time_s=time.perf_counter() - t0,
                                 candidates=len(pre) + len(dec), kept=0, dinkelbach_steps=0)
        return InferDisaggPlan(status="infeasible", reason=f"no {what} worker fits in memory and meets the limit",
                               suggestions=["relax --max-ttft-ms / --max-tpot-ms, or use more GPUs"], solver=solver,
                               aggregated=agg, **common)
    bp, bd = best_per_size(pre, ok_p), best_per_size(dec, ok_d)
    top = float(max(bp.capacity_rps.max(), bd.capacity_rps.max())) * n
    unit = objective_unit(top * n, 1, RATE_UNIT)
    mp, md = _units(bp.capacity_rps, unit), _units(bd.capacity_rps, unit)
    need = int(np.ceil(round(w.request_rate / unit, 6))) if w.request_rate else 0
    out = solve_disagg([int(g) for g in bp.gpus], mp, [int(g) for g in bd.gpus], md, n, need, req.time_limit_s)
    status = "infeasible" if out is None else "optimal" if out[7] else "feasible"
    solver = DisaggSolverOut(status=status, wall_time_s=0.0,
                             candidates=len(pre) + len(dec), kept=len(bp) + len(bd),
                             dinkelbach_steps=out[6] if out else 0)
    if out is None:
        solver = solver.model_copy(update={"wall_time_s": time.perf_counter() - t0})
        return InferDisaggPlan(status="infeasible", reason=f"request rate: no split of {n} GPUs serves "
                               f"{w.request_rate:g} requests/s under the limits", solver=solver, aggregated=agg,
                               suggestions=["lower --request-rate, or use more GPUs"], **common)
    i, j, a, b, _r, u, _, _ = out
    plan, metrics = _report(req, bp, bd, i, j, a, b)
    winner = "disaggregated" if agg is None or metrics.tokens_per_s_per_gpu > agg.tokens_per_s_per_gpu \
        else "aggregated"
    lines = [f"Disaggregated: {a} prefill worker(s) of {int(bp.gpus[i])} GPU(s) feed {b} decode worker(s) of "
             f"{int(bd.gpus[j])} GPU(s) ({u} of {n} GPUs); prefill serves {metrics.prefill_capacity_requests_per_s:.3g}"
             f" and decode {metrics.decode_capacity_requests_per_s:.3g} requests/s.",
             f"KV transfer per request: {metrics.kv_transfer_s * 1e3:.3g} ms."]
    if agg is not None:
        lines.append(f"Aggregated best: {agg.tokens_per_s_per_gpu:,.1f} vs disaggregated "
                     f"{metrics.tokens_per_s_per_gpu:,.1f} tokens/s per GPU: {winner} wins"
                     + (" (prefill no longer slows decode steps, and each phase runs its own layout)."
                        if winner == "disaggregated" else " (one pool shares prefill and decode without idle GPUs "
                        "or KV transfers)."))
    solver = solver.model_copy(update={"wall_time_s": time.perf_counter() - t0})
    return InferDisaggPlan(status=status, plan=plan, metrics=metrics, aggregated=agg, winner=winner,
                           solver=solver, explanation=lines, **common)


def _report(req: InferRequest, bp: WorkerTable, bd: WorkerTable, i: int, j: int, a: int, b: int
            ) -> tuple[DisaggPlanOut, DisaggMetrics]:
    """Float metrics of the chosen workers (the cost tables' rows, unscaled)."""
    w = req.workload
    cap_p, cap_d = a * float(bp.capacity_rps[i]), b * float(bd.capacity_rps[j])
    rps = min(cap_p, cap_d) if not w.request_rate else w.request_rate
    gpus = a * int(bp.gpus[i]) + b * int(bd.gpus[j])
    one = np.ones(1, dtype=np.int64)
    dec_rows = InferRows(bd.tp[j:j + 1], bd.pp[j:j + 1], bd.ep[j:j + 1], bd.ep[j:j + 1], one)
    max_b = int(infer_cost(req.model, req.system, w.model_copy(update={"mode": "static"}), dec_rows).max_batch[0])
    ttft, tpot = float(bp.latency_s[i]), float(bd.latency_s[j])
    plan = DisaggPlanOut(prefill=_worker(bp, i, a), decode=_worker(bd, j, b))
    metrics = DisaggMetrics(ttft_s=ttft, tpot_s=tpot, tokens_per_s=rps * w.gen_len,
                            tokens_per_s_per_gpu=rps * w.gen_len / gpus, requests_per_s=rps, max_batch_size=max_b,
                            e2e_latency_s=ttft + (w.gen_len - 1) * tpot, kv_transfer_s=float(bp.transfer_s[i]),
                            gpus_used=gpus, prefill_capacity_requests_per_s=cap_p,
                            decode_capacity_requests_per_s=cap_d)
    return plan, metrics


def _worker(t: WorkerTable, i: int, workers: int) -> WorkerOut:
    return WorkerOut(tp=int(t.tp[i]), pp=int(t.pp[i]), ep=int(t.ep[i]), workers=workers, batch_size=int(t.batch[i]))


def _aggregated(req: InferRequest) -> AggregatedOut | None:
    agg = plan_inference(req.model_copy(update={"pareto": False, "top_k": 1}))
    if agg.plan is None or agg.metrics is None:
        return None
    return AggregatedOut(plan=agg.plan, metrics=agg.metrics,
                         tokens_per_s_per_gpu=agg.metrics.tokens_per_s / req.num_gpus)
