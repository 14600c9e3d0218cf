"""CP-SAT's choice equals the numpy brute force over the same serving table (random small instances)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardplan.costmodel.serving.cost import InferWorkload, infer_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.core.select import brute_force, select
from shardplan.planner.serving.knobs import InferObjective
from shardplan.planner.serving.solve import (
    InferRequest,
    admissible,
    build_rows,
    plan_inference,
    primary_objective,
    tie_rank,
)

MODELS = ["opt-6.7b", "llama-3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen3-30b-a3b"]


@settings(max_examples=100, deadline=None)
@given(model=st.sampled_from(MODELS), gpus=st.sampled_from([1, 2, 4, 8]), prompt=st.integers(16, 4096),
       gen=st.integers(1, 512), objective=st.sampled_from(list(InferObjective)),
       tpot_ms=st.one_of(st.none(), st.floats(2.0, 60.0)), rows=st.integers(20, 400))
def test_cpsat_equals_brute_force(model: str, gpus: int, prompt: int, gen: int, objective: InferObjective,
                                  tpot_ms: float | None, rows: int) -> None:
    req = InferRequest(model=get_model(model), system=get_system("dgx-a100-80gb"), num_gpus=gpus,
                       workload=InferWorkload(prompt_len=prompt, gen_len=gen), objective=objective,
                       max_tpot_s=None if tpot_ms is None else tpot_ms / 1e3, max_rows=rows)
    table, _ = build_rows(req)
    cost = infer_cost(req.model, req.system, req.workload, table)
    ok = ~np.logical_or.reduce(list(admissible(req, cost).values()))
    feasible = np.flatnonzero(ok)
    if len(feasible) == 0:
        assert plan_inference(req).status == "infeasible"
        return
    primary = primary_objective(req, cost, feasible)
    rank = tie_rank(table.take(feasible))
    sel = select(primary, rank, k=1)
    assert sel.statuses == ["optimal"]
    assert sel.indices == brute_force(primary, rank)
    i = int(feasible[sel.indices[0]])
    plan = plan_inference(req)
    p = plan.plan
    assert (p.tp, p.pp, p.ep, p.replicas, p.batch_size) == (int(table.tp[i]), int(table.pp[i]), int(table.ep[i]),
                                                            int(table.dp[i]), int(table.batch[i]))
    # the numpy optimum over the float column, up to the objective's integer resolution
    col = cost.e2e_s if objective == "latency" else -cost.tokens_per_s
    best = float(col[feasible].min())
    assert abs(float(col[i]) - best) <= 1e-6 * max(1.0, abs(best)) + 1e-3
