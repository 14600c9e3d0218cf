"""CP-SAT returns the brute-force optimum over the same cost table, and reports the cost model's numbers.

Random small instances (hypothesis): model shape × hardware × GPU count × batch × pins. For each, the
planner's choice must equal the numpy brute force (argmin of step time, ties broken by the same rank),
and ``estimate_training`` of the returned layout must match the solver's objective within 0.1%.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.costmodel.training.layout import Recompute, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models.spec import MlpKind, ModelSpec, MoESpec
from shardplan.planner.core.select import brute_force
from shardplan.planner.training.solve import (
    TrainRequest,
    distinct_best,
    plan_training,
    primary_objective,
    tie_rank,
)


@st.composite
def instances(draw: st.DrawFn) -> TrainRequest:
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([64, 128]))
    moe = None
    if draw(st.booleans()) and draw(st.booleans()):
        moe = MoESpec(num_experts=draw(st.sampled_from([4, 8])), experts_per_token=2,
                      expert_ffn_hidden_size=draw(st.sampled_from([512, 1024])))
    model = ModelSpec(
        name="rand", num_layers=draw(st.sampled_from([4, 6, 8, 12, 16])), hidden_size=heads * head_dim,
        num_heads=heads, num_kv_heads=draw(st.sampled_from([heads, heads // 4, 1])),
        ffn_hidden_size=draw(st.sampled_from([2, 4])) * heads * head_dim,
        mlp=draw(st.sampled_from(list(MlpKind))), vocab_size=draw(st.sampled_from([1000, 32000, 128000])),
        moe=moe,
    )
    system = get_system(draw(st.sampled_from(["dgx-a100-80gb", "dgx-h100", "rtx4090-pc", "mi300x-8", "l40s-8"])))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if g <= system.gpus_per_node or
                                 (g % system.gpus_per_node == 0 and system.inter_node is not None)]))
    batch = draw(st.sampled_from([8, 16, 32, 48]))
    seq = draw(st.sampled_from([512, 2048, 8192]))
    pins = {}
    if draw(st.booleans()):
        pins["recompute"] = draw(st.sampled_from(list(Recompute)))
    return TrainRequest(model=model, system=system, num_gpus=gpus,
                        workload=TrainWorkload(seq_len=seq, global_batch=batch), top_k=2, **pins)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=instances())
def test_cp_sat_equals_brute_force(req: TrainRequest) -> None:
    plan = plan_training(req, explain=False)
    # Rebuild the same table and run the brute force over the feasible distinct rows.
    from shardplan.costmodel.training.space import enumerate_layouts
    from shardplan.costmodel.training.table import build_train_table
    from shardplan.planner.training.request import space_request

    space = enumerate_layouts(req.model, req.workload, space_request(req))
    table = build_train_table(req.model, req.system, req.workload, space.rows,
                              partial_recompute=req.recompute is None)
    offloaded = (table.rows.f_opt + table.rows.f_w + table.rows.f_act) > 0
    fits = table.fits & ~offloaded if (table.fits & ~offloaded).any() else table.fits
    feasible = np.flatnonzero(fits)
    if len(feasible) == 0:
        assert plan.status == "infeasible"
        return
    primary = primary_objective(table, np.arange(len(table)), per_sequence=False)
    cand = feasible[distinct_best(table, feasible, primary[feasible], tie_rank(table.rows)[feasible])]
    best = brute_force(primary[cand], tie_rank(table.rows.take(cand)), k=2)
    assert plan.status == "optimal"
    r = table.rows
    i = int(cand[best[0]])
    got = plan.plan
    assert (got.tp, got.pp, got.dp, got.ep, got.cp, got.microbatch_size, got.interleave, got.zero_stage,
            got.sequence_parallel) == (r.tp[i], r.pp[i], r.dp[i], r.ep[i], r.cp[i], r.mb[i], r.v[i], r.zero[i],
                                       bool(r.sp[i]))
    assert got.recompute == ["none", "selective", "full"][int(r.rc[i])]
    # The reported step time is the cost model's evaluation, and agrees with the solver's objective.
    assert plan.metrics.step_time_s == pytest.approx(float(table.step_time_s[i]), rel=1e-9)
    assert plan.solver.objective == pytest.approx(plan.metrics.step_time_s, rel=1e-3, abs=2e-6)
    if len(best) > 1:
        assert len(plan.alternatives) == 1
        j = int(cand[best[1]])
        assert plan.alternatives[0].step_time_s == pytest.approx(float(table.step_time_s[j]), rel=1e-9)
