"""Serving plans at the largest valid scale never overflow CP-SAT's exact range; the frontier starts at batch 1."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.serving.cost import InferWorkload, infer_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.core.scaling import MAX_EXACT, MAX_OBJECTIVE_SUM, lexicographic, max_primary, objective_unit
from shardplan.planner.serving.knobs import InferObjective
from shardplan.planner.serving.solve import InferRequest, admissible, build_rows, plan_inference


def test_objective_unit_keeps_every_coefficient_and_their_sum_exact() -> None:
    n = 50_000
    top = 1.2e9  # tokens/s of 131,072 GPUs
    unit = objective_unit(top, n, 1e-3)
    # hand: the sum bound binds, 2^62 / n² = 1.84e9 units; 1.2e9 / 1e-3 = 1.2e12 > that, 1.2e9 / 1 fits: 1 tokens/s
    assert unit == pytest.approx(1.0)
    primary = np.floor(np.linspace(0, top, n) / unit).astype(np.int64)
    coeffs = lexicographic(primary, np.arange(n))
    assert max(coeffs) < MAX_EXACT and max(coeffs) * n < MAX_OBJECTIVE_SUM
    assert max_primary(1) == MAX_EXACT - 2  # one row: only the 2^53 bound applies
    with pytest.raises(OverflowError):
        lexicographic(np.full(n, max_primary(n) * 8, dtype=np.int64), np.arange(n))


@pytest.mark.parametrize(("model", "prompt", "gen", "objective"), [
    ("llama-3.1-8b", 1, 1, InferObjective.THROUGHPUT),
    ("falcon-40b", 2048, 256, InferObjective.THROUGHPUT),
    ("falcon-40b", 2048, 256, InferObjective.LATENCY),
])
def test_131072_gpus_plans_optimally_and_matches_the_table_optimum(model: str, prompt: int, gen: int,
                                                                     objective: InferObjective) -> None:
    req = InferRequest(model=get_model(model), system=get_system("dgx-h100"), num_gpus=131_072,
                       workload=InferWorkload(prompt_len=prompt, gen_len=gen), objective=objective)
    plan = plan_inference(req)
    assert plan.status == "optimal"
    rows, _ = build_rows(req)
    cost = infer_cost(req.model, req.system, req.workload, rows)
    ok = ~np.logical_or.reduce(list(admissible(req, cost).values()))
    if objective == InferObjective.LATENCY:
        best = float(cost.e2e_s[ok].min())
        assert plan.metrics.e2e_latency_s <= best * (1 + 1e-6) + 1e-6
    else:
        best = float(cost.tokens_per_s[ok].max())
        # the coarsened unit (≤ 1e-9 of the largest throughput per row) is the only allowed loss
        assert plan.metrics.tokens_per_s >= best * (1 - 1e-6)


def test_pareto_frontier_starts_at_batch_one_and_keeps_every_non_dominated_point() -> None:
    req = InferRequest(model=get_model("llama-3.1-8b"), system=get_system("dgx-h100"), num_gpus=2,
                       workload=InferWorkload(prompt_len=1024, gen_len=256), pareto=True)
    plan = plan_inference(req)
    pts = [(a.metrics.tpot_s, a.metrics.tokens_per_s) for a in plan.pareto]
    assert plan.pareto[0].plan.batch_size == 1
    # brute force: a point is on the frontier iff no other admissible row has ≤ TPOT and > throughput
    rows, _ = build_rows(req)
    cost = infer_cost(req.model, req.system, req.workload, rows)
    ok = np.flatnonzero(~np.logical_or.reduce(list(admissible(req, cost).values())))
    tpot, tput = cost.tpot_s[ok], cost.tokens_per_s[ok]
    nondominated = [i for i in range(len(ok)) if not np.any((tpot <= tpot[i]) & (tput > tput[i]))]
    assert len(pts) == len({(float(tpot[i]), float(tput[i])) for i in nondominated})


def test_disaggregated_plan_at_131072_gpus_stays_exact() -> None:
    from shardplan.planner.serving.disagg import plan_disaggregated

    req = InferRequest(model=get_model("llama-3.1-8b"), system=get_system("dgx-h100"), num_gpus=131_072,
                       workload=InferWorkload(prompt_len=1024, gen_len=256))
    res = plan_disaggregated(req)
    assert res.status == "optimal" and res.metrics.gpus_used <= 131_072
    p, m = res.plan, res.metrics
    # the plan's own numbers: served rate = min(prefill, decode capacity), per GPU used
    assert m.requests_per_s == pytest.approx(min(m.prefill_capacity_requests_per_s, m.decode_capacity_requests_per_s))
    assert m.gpus_used == p.prefill.workers * p.prefill.tp * p.prefill.pp + p.decode.workers * p.decode.tp * p.decode.pp
