"""MoE parallel folding (Megatron-Core; Liu et al. 2025, arXiv 2504.14960): expert TP and EP refold a stage's
tp·cp·dp ranks, EP may exceed dp·cp, expert-data-parallel ranks follow."""

import numpy as np
import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts, validate_layout
from shardplan.costmodel.training.step import train_cost
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation.runs import modern

QWEN = get_model("qwen3-235b-a22b")
WORK = TrainWorkload(seq_len=4096, global_batch=2048, dtype="fp8", attention="flash")
FOLDED = TrainLayout(tp=2, pp=8, dp=16, ep=32, etp=1, interleave=4, sequence_parallel=True, zero_stage=1,
                     recompute=Recompute.NONE)


def test_ep_beyond_dp_cp_needs_expert_tp_to_fold() -> None:
    """tp 2 · dp 16 = 32 ranks per stage: ep 32 fits only with etp 1 (etp·ep must divide tp·cp·dp)."""
    with pytest.raises(ShardplanError, match=r"etp·ep \(2·32\) must divide tp·cp·dp \(32\)"):
        validate_layout(QWEN, 256, WORK, TrainLayout(tp=2, pp=8, dp=16, ep=32))
    validate_layout(QWEN, 256, WORK, FOLDED)


def test_folded_expert_shards_by_hand() -> None:
    """Qwen3-235B (128 experts of FFN 1536, h 4096, SwiGLU): with ep 32 and etp 1 a GPU holds 4 whole experts per
    MoE layer, 4·3·4096·1536 = 75,497,472 parameters; edp = 2·1·16/(1·32) = 1, so ZeRO-1 cannot shard them."""
    rows = LayoutArrays.from_layouts([FOLDED], WORK.global_batch)
    cost = train_cost(QWEN, get_system("dgx-h100"), WORK, rows)
    assert float(cost.kinds["moe"].params.expert[0]) == 4 * 3 * 4096 * 1536
    assert float(rows.edp[0]) == 1.0
    # the same layout unfolded (ep 16 inside dp·cp, etp = tp = 2): 8 experts split in two
    unfolded = LayoutArrays.from_layouts([TrainLayout(tp=2, pp=8, dp=16, ep=16, interleave=4,
                                                      sequence_parallel=True)], WORK.global_batch)
    cost2 = train_cost(QWEN, get_system("dgx-h100"), WORK, unfolded)
    assert float(cost2.kinds["moe"].params.expert[0]) == 8 * 3 * 4096 * 1536 / 2
    assert float(unfolded.edp[0]) == 1.0  # 2·16/(2·16)


def test_expert_flops_per_gpu_do_not_depend_on_expert_tp() -> None:
    """Expert TP only moves work between ranks: per GPU, tokens ×etp/tp and width ÷etp leave the FLOPs as they are."""
    a = LayoutArrays.from_layouts([TrainLayout(tp=2, pp=8, dp=16, ep=16, interleave=4, sequence_parallel=True),
                                   TrainLayout(tp=2, pp=8, dp=16, ep=16, etp=1, interleave=4,
                                               sequence_parallel=True)], WORK.global_batch)
    cost = train_cost(QWEN, get_system("dgx-h100"), WORK, a)
    fc1 = next(op for op in cost.kinds["moe"].fwd_ops if op.name == "moe.experts.fc1")
    assert fc1.flops[0] == pytest.approx(fc1.flops[1], rel=1e-12)


def test_planner_space_holds_folded_layouts() -> None:
    space = enumerate_layouts(QWEN, WORK, SpaceRequest(num_gpus=256, tp=2, pp=8, dp=16, microbatch=1,
                                                       interleave=4, recompute=Recompute.NONE,
                                                       sequence_parallel=True, zero_stage=1))
    r = space.rows
    folded = (r.ep == 32) & (r.etp == 1)
    assert folded.any() and not ((r.ep == 32) & (r.etp == 2)).any()
    assert np.all((r.tp * r.cp * r.dp) % (r.etp * r.ep) == 0)


def test_estimate_reports_the_folded_layout() -> None:
    rep = estimate_training(QWEN, get_system("dgx-h100"), 256, WORK, FOLDED)
    assert rep.plan.etp == 1 and rep.plan.ep == 32


def test_validate_qwen3_235b_layouts_evaluate() -> None:
    """The three Megatron-Bridge Qwen3-235B runs (tp 2, ep 32, dp 16) no longer fail 'ep must divide dp·cp'; nor
    do Megatron-MoE-ModelZoo's (EP 32 at TP 2, EP 8 at TP 4)."""
    cases = [c for c in modern() if "qwen3-235b" in c.id]
    assert len(cases) == 10 and sum(c.id.startswith("mbridge") for c in cases) == 3
    for c in cases:
        out = c.predict()  # a value, or (value, why infeasible)
        assert (out[0] if isinstance(out, tuple) else out) > 0
