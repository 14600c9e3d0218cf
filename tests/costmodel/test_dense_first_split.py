"""A pinned pipeline split may spread an MoE model's dense-first layers over the first ranks, as Megatron places
layers in order: each rank is costed with the dense layers its range holds, and the split a plan prints (the cost
model's even split) is one ``estimate train --stage-layers`` takes and prices as the plan did."""

from __future__ import annotations

import re

import numpy as np
import pytest

from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stage_report import estimate_split
from shardplan.costmodel.training.stage_split import dense_first_per_rank, evaluate_split
from shardplan.hardware import get_system
from shardplan.models import get_model

DSV3 = get_model("deepseek-v3")  # 61 layers, the first 3 dense
PP32 = [1] + [2] * 29 + [1, 1]  # the even split of 61 layers over 32 ranks (pipeline_sim.uniform_split)


def test_dense_first_layers_follow_the_layer_order() -> None:
    assert DSV3.moe.first_dense_layers == 3
    assert dense_first_per_rank(DSV3, PP32)[:3] == [1, 2, 0] and sum(dense_first_per_rank(DSV3, PP32)) == 3
    assert dense_first_per_rank(DSV3, [4] * 15 + [1]) == [3] + [0] * 15
    assert dense_first_per_rank(DSV3, [2, 1] + [2] * 29) == [2, 1] + [0] * 29
    assert dense_first_per_rank(get_model("llama-3.1-8b"), [16, 16]) == [0, 0]


def _layout(pp: int) -> TrainLayout:
    return TrainLayout(tp=2, pp=pp, dp=2048 // (2 * pp * 2), cp=2, ep=8, etp=1, microbatch=1,
                       recompute=Recompute.SELECTIVE, recompute_modules=["layernorm", "moe_act"],
                       sequence_parallel=True, zero_stage=1)


def test_a_rank_of_dense_layers_carries_no_experts() -> None:
    """Rank 1 of the PP 32 split holds layers 1 and 2, both dense: no expert weights, a shorter microbatch than
    rank 2's two MoE layers; rank 2 onwards as before."""
    system, work = get_system("dgx-h100"), TrainWorkload(seq_len=8192, global_batch=1024)
    sc = evaluate_split(DSV3, system, work, _layout(32), PP32)
    moe = [int(x) for x in sc.costs.stage.shape.moe_layers]
    assert moe[:3] == [0, 0, 2] and sum(moe) == DSV3.num_layers - 3
    assert sc.per_mb_s[1] < 0.8 * sc.per_mb_s[2]
    assert sc.memory_bytes[1] < sc.memory_bytes[2]


def test_a_split_with_every_dense_layer_on_rank_zero_is_costed_as_before() -> None:
    """Where rank 0 holds the dense-first layers (what the per-stage search keeps), the explicit per-rank count is
    the old rule's: the same per-rank times and memory to the bit."""
    from shardplan.costmodel.training.stage_split import layout_kinds, rank_costs

    system, work = get_system("dgx-h100"), TrainWorkload(seq_len=8192, global_batch=1024)
    lay, split = _layout(16), [4] * 15 + [1]
    kinds = layout_kinds(DSV3, system, work, lay)
    args = (DSV3, system, work, lay, np.arange(16), np.array(split), np.array(split), np.zeros(16, dtype=int), kinds)
    old, new = rank_costs(*args), rank_costs(*args, np.array(dense_first_per_rank(DSV3, split)))
    assert list(old.per_mb_s) == list(new.per_mb_s) and list(old.memory_bytes) == list(new.memory_bytes)


def test_the_plans_split_re_estimates_to_the_plans_step(run_cli) -> None:
    """DeepSeek-V3 on 2,048 H100 at PP 32: the plan names its layout in full (ETP included) and its split; the
    estimate of exactly that line, split included, gives the plan's step time."""
    r = run_cli("train", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus", "2048", "-b", "1024", "-s", "8192",
                "--pp", "32", "--cp", "2", "--json")
    assert r.code == 0, r.err
    plan, step = r.json()["plan"], r.json()["metrics"]["step_time_s"]
    assert plan["stage_layers"] == PP32 and plan["etp"] is not None
    text = run_cli("train", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus", "2048", "-b", "1024", "-s", "8192",
                   "--pp", "32", "--cp", "2")
    line = re.search(r"Plan: (.*?)\n• ", text.out, re.S)
    assert line is not None and f"ETP={plan['etp']}" in line.group(1)
    system, work = get_system("dgx-h100"), TrainWorkload(seq_len=8192, global_batch=1024)
    lay = TrainLayout(tp=plan["tp"], pp=32, dp=plan["dp"], cp=2, ep=plan["ep"], etp=plan["etp"],
                      microbatch=plan["microbatch_size"], interleave=plan["interleave"],
                      recompute=Recompute(plan["recompute"]), recompute_modules=plan["recompute_modules"],
                      sequence_parallel=plan["sequence_parallel"], zero_stage=plan["zero_stage"])
    rep = estimate_split(DSV3, system, 2048, work, lay, plan["stage_layers"])
    assert rep.status == "feasible"
    assert rep.metrics.step_time_s == pytest.approx(step, rel=5e-3)
