"""``plan_inference``: tight max batch, SLOs respected by the estimate, pareto frontier, infeasible results."""

from __future__ import annotations

import itertools

import pytest

from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
from shardplan.costmodel.serving.report import estimate_inference
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.serving.knobs import InferObjective
from shardplan.planner.serving.solve import InferRequest, plan_inference

W = InferWorkload(prompt_len=2048, gen_len=256)


def _req(model: str = "llama-3.1-70b", gpus: int = 8, **kw) -> InferRequest:
    return InferRequest(model=get_model(model), system=get_system("dgx-h100"), num_gpus=gpus,
                        workload=kw.pop("workload", W), **kw)


def _estimate(req: InferRequest, plan) -> object:
    p = plan.plan
    lay = InferLayout(tp=p.tp, pp=p.pp, ep=p.ep, replicas=p.replicas, batch=p.batch_size)
    return estimate_inference(req.model, req.system, req.num_gpus, req.workload, lay)


def test_max_batch_plan_is_tight() -> None:
    req = _req(max_batch=True)
    plan = plan_inference(req)
    assert plan.status == "optimal"
    b = plan.plan.batch_size
    assert b == plan.metrics.max_batch_size
    assert _estimate(req, plan).status == "feasible"
    more = plan.plan.model_copy(update={"batch_size": b + 1})
    assert _estimate(req, plan.model_copy(update={"plan": more})).status == "infeasible"


@pytest.mark.parametrize(("ttft", "tpot"), [(None, 0.02), (2.0, None), (3.0, 0.03)])
def test_slo_plans_respect_their_slos(ttft: float | None, tpot: float | None) -> None:
    req = _req(max_ttft_s=ttft, max_tpot_s=tpot)
    plan = plan_inference(req)
    assert plan.status == "optimal"
    est = _estimate(req, plan)
    assert est.status == "feasible"
    assert ttft is None or est.metrics.ttft_s <= ttft
    assert tpot is None or est.metrics.tpot_s <= tpot
    assert est.metrics == plan.metrics


def test_objective_matches_the_estimate() -> None:
    for objective in InferObjective:
        req = _req(objective=objective, max_tpot_s=0.05)
        plan = plan_inference(req)
        est = _estimate(req, plan)
        value = est.metrics.e2e_latency_s if objective == "latency" else est.metrics.tokens_per_s
        assert plan.solver.objective == pytest.approx(value, rel=1e-3)


def test_latency_objective_picks_a_single_sequence() -> None:
    plan = plan_inference(_req(objective=InferObjective.LATENCY))
    assert plan.plan.batch_size == 1 and plan.plan.tp == 8


def test_pareto_points_are_non_dominated() -> None:
    plan = plan_inference(_req(pareto=True))
    pts = [(p.metrics.tpot_s, p.metrics.tokens_per_s) for p in plan.pareto]
    assert len(pts) >= 5
    for (t0, r0), (t1, r1) in itertools.pairwise(pts):
        assert t1 > t0 * 1.0 and r1 > r0  # higher TPOT only for more throughput
    best = max(r for _, r in pts)
    assert best == pytest.approx(plan.metrics.tokens_per_s)


def test_too_large_a_model_is_infeasible_with_fixes() -> None:
    plan = plan_inference(_req("llama-3.1-405b", gpus=2))
    assert plan.status == "infeasible" and plan.plan is None
    assert plan.reason.startswith("GPU memory")
    assert any("GPUs" in s for s in plan.suggestions)


def test_unreachable_tpot_is_infeasible_naming_tpot() -> None:
    plan = plan_inference(_req(max_tpot_s=0.001))
    assert plan.status == "infeasible"
    assert plan.reason.startswith("TPOT")
    assert plan.suggestions[0].startswith("--max-tpot-ms")


def test_bad_pin_names_the_field() -> None:
    with pytest.raises(ShardplanError) as e:
        plan_inference(_req(tp=3))
    assert e.value.field == "tp"
