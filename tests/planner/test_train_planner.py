"""Planner behaviour: pins, top-k, batch choice, determinism, infeasibility and its fixes."""

import dataclasses

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.solve import TrainRequest, plan_training


def request(**kw) -> TrainRequest:
    base = dict(model=get_model("llama-3.1-8b"), system=get_system("dgx-h100"), num_gpus=16,
                workload=TrainWorkload(seq_len=4096, global_batch=64))
    base.update(kw)
    return TrainRequest(**base)


def test_pins_are_respected_and_cost_is_not_lower_than_free() -> None:
    free = plan_training(request())
    pinned = plan_training(request(tp=2, recompute=Recompute.SELECTIVE))
    assert pinned.plan.tp == 2 and pinned.plan.recompute == "selective"
    assert pinned.metrics.step_time_s >= free.metrics.step_time_s


def test_top_k_returns_distinct_layouts_in_order() -> None:
    plan = plan_training(request(top_k=5))
    layouts = [plan.plan] + [a.plan for a in plan.alternatives]
    keys = {(p.tp, p.pp, p.dp, p.cp, p.microbatch_size, p.interleave, p.recompute, p.zero_stage,
             p.sequence_parallel) for p in layouts}
    assert len(keys) == 5
    times = [plan.metrics.step_time_s] + [a.step_time_s for a in plan.alternatives]
    assert times == sorted(times)


def test_same_request_same_answer() -> None:
    a = plan_training(request(top_k=3)).model_dump(mode="json")
    b = plan_training(request(top_k=3)).model_dump(mode="json")
    for d in (a, b):  # wall-clock timings are the only fields allowed to differ
        for k in ("wall_time_s", "build_s", "solve_s"):
            d["solver"].pop(k)
    assert a == b


def test_max_global_batch_picks_the_best_throughput_at_or_below_the_cap() -> None:
    req = request(max_global_batch=100, fixed_global_batch=False,
                  workload=TrainWorkload(seq_len=4096, global_batch=100))
    plan = plan_training(req)
    assert plan.plan.global_batch <= 100
    assert plan.plan.global_batch % plan.plan.dp == 0
    # any fixed batch planned separately is not better per token
    for b in (32, 64, 96):
        fixed = plan_training(request(workload=TrainWorkload(seq_len=4096, global_batch=b)))
        if fixed.status != "infeasible":
            assert plan.metrics.tokens_per_s >= fixed.metrics.tokens_per_s * (1 - 1e-6)


def test_estimate_of_the_chosen_layout_reproduces_the_plan() -> None:
    plan = plan_training(request())
    p = plan.plan
    lay = TrainLayout(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep, cp=p.cp, microbatch=p.microbatch_size,
                      interleave=p.interleave, recompute=Recompute(p.recompute), recompute_layers=p.recompute_layers,
                      sequence_parallel=p.sequence_parallel, zero_stage=p.zero_stage,
                      offload_optimizer=p.offload.optimizer, offload_weights=p.offload.weights,
                      offload_activations=p.offload.activations)
    rep = estimate_training(get_model("llama-3.1-8b"), get_system("dgx-h100"), 16,
                            TrainWorkload(seq_len=4096, global_batch=64), lay)
    assert rep.metrics.step_time_s == pytest.approx(plan.metrics.step_time_s, rel=1e-12)


def test_too_big_a_model_is_an_infeasible_result_with_the_gpus_it_needs() -> None:
    req = request(model=get_model("llama-3.1-405b"), num_gpus=8)
    plan = plan_training(req)
    assert plan.status == "infeasible" and plan.plan is None
    assert "GPU memory" in plan.reason
    need = [s for s in plan.suggestions if s.startswith("use at least")]
    assert need, plan.suggestions
    n = int(need[0].split()[3])
    assert plan_training(dataclasses.replace(req) if False else req.model_copy(update={"num_gpus": n}),
                         explain=False).status == "optimal"


def test_bad_pins_are_bad_input() -> None:
    with pytest.raises(ShardplanError, match="allowed"):
        plan_training(request(tp=3))
    with pytest.raises(ShardplanError, match="exactly 16 GPUs"):
        plan_training(request(tp=8, pp=4, dp=2))
