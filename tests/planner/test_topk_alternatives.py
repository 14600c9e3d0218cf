"""`--top-k` alternatives print the per-stage plan of exactly the layout they name: each row's numbers are
`estimate train` of that layout with its stage layers (and per-stage recompute), re-evaluated here."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.costmodel.training.report import TrainPlanOut
from shardplan.costmodel.training.stage_report import estimate_split
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.solve import TrainRequest, plan_training

SYSTEM = get_system("dgx-h100")


def _layout(p: TrainPlanOut) -> TrainLayout:
    lay = TrainLayout(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep, cp=p.cp, microbatch=p.microbatch_size,
                      interleave=p.interleave, recompute=p.recompute, recompute_layers=p.recompute_layers,
                      sequence_parallel=p.sequence_parallel, zero_stage=p.zero_stage,
                      offload_optimizer=p.offload.optimizer, offload_weights=p.offload.weights,
                      offload_activations=p.offload.activations)
    return lay


CASES = [  # model, GPUs, global batch, pins; Llama-3.1-405B's alternatives gain from per-stage recompute
    ("llama-3.1-70b", 64, 256, {}),
    ("llama-3.1-70b", 64, 256, {"pp": 4, "recompute": "full"}),
    ("llama-3.1-405b", 16384, 2048, {"cp": 1}),  # CP 1: layouts that need recompute on some stages
]


@pytest.mark.parametrize(("name", "gpus", "batch", "pins"), CASES)
def test_every_top_k_row_is_the_estimate_of_the_layout_it_names(name: str, gpus: int, batch: int, pins: dict) -> None:
    model = get_model(name)
    req = TrainRequest(model=model, system=SYSTEM, num_gpus=gpus, workload=TrainWorkload(seq_len=8192,
                       global_batch=batch), top_k=6, offload="off", **pins)
    plan = plan_training(req)
    assert plan.plan is not None and plan.metrics is not None and len(plan.alternatives) == 5
    rows = [(plan.plan, plan.metrics.step_time_s)] + [(a.plan, a.step_time_s) for a in plan.alternatives]
    names = {(p.tp, p.pp, p.dp, p.cp, p.microbatch_size, p.interleave, p.recompute, p.sequence_parallel, p.zero_stage)
             for p, _ in rows}
    assert len(names) == len(rows)  # distinct layouts, the plan's own not repeated
    piped = [p for p, _ in rows[1:] if p.pp > 1]
    assert piped and all(p.stage_layers is not None and sum(p.stage_layers) == model.num_layers for p in piped)
    gains = 0  # alternatives that gain from their per-stage split: faster than it evenly, or fitting only so
    for i, (p, step) in enumerate(rows):
        assert p.stage_offload_activations is None or not any(p.stage_offload_activations)
        work = TrainWorkload(seq_len=8192, global_batch=p.global_batch)
        uniform = estimate_training(model, SYSTEM, gpus, work, _layout(p))
        est = uniform if p.stage_layers is None else estimate_split(model, SYSTEM, gpus, work, _layout(p),
                                                                     p.stage_layers, p.stage_recompute_layers)
        assert est.status != "infeasible"
        assert step == pytest.approx(est.metrics.step_time_s, rel=5e-3)
        if uniform.status != "infeasible":  # the same layout split evenly, the plan's recompute count on every rank
            assert step <= uniform.metrics.step_time_s * (1 + 1e-9)  # the per-stage optimum is never worse
        gains += i > 0 and (uniform.status == "infeasible" or step < uniform.metrics.step_time_s * (1 - 1e-3))
    assert gains > 1 or name != "llama-3.1-405b"  # the alternatives too, not only the plan, gain per stage
    steps = [a.step_time_s for a in plan.alternatives]
    assert steps == sorted(steps) and steps[0] >= plan.metrics.step_time_s
    assert [a.rank for a in plan.alternatives] == [2, 3, 4, 5, 6]
