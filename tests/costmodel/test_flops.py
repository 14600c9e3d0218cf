"""Itemised FLOPs against independent closed forms (Narayanan et al. 2021, arXiv 2104.04473)."""

import pytest

from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models.catalog import megatron_gpt
from shardplan.models.params import param_breakdown

CASES = [(2304, 24, 24, 1, 1, 32), (12288, 96, 96, 8, 8, 64), (20480, 105, 128, 8, 35, 280)]


@pytest.mark.parametrize(("h", "layers", "heads", "tp", "pp", "batch"), CASES)
def test_executed_flops_equal_eq3_with_full_recompute(h, layers, heads, tp, pp, batch) -> None:
    """Eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration with full recompute (unfused attention
    computes the whole s×s score matrix, as the paper counts)."""
    s, V = 2048, 51200
    model = megatron_gpt("m", layers=layers, hidden=h, heads=heads, source="")
    work = TrainWorkload(seq_len=s, global_batch=batch)
    lay = TrainLayout(tp=tp, pp=pp, dp=1, recompute=Recompute.FULL)
    cost = train_cost(model, get_system("dgx-a100-80gb"), work, LayoutArrays.from_layouts([lay], batch))
    eq3 = 96 * batch * s * layers * h * h * (1 + s / (6 * h) + V / (16 * layers * h))
    assert float(cost.hardware_flops[0]) == pytest.approx(eq3, rel=1e-12)


@pytest.mark.parametrize(("h", "layers", "heads", "tp", "pp", "batch"), CASES)
def test_model_flops_match_72bslh2(h, layers, heads, tp, pp, batch) -> None:
    """Model FLOPs 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)); ours also counts biases and norms (+0.01%)."""
    s, V = 2048, 51200
    model = megatron_gpt("m", layers=layers, hidden=h, heads=heads, source="")
    cost = train_cost(model, get_system("dgx-a100-80gb"), TrainWorkload(seq_len=s, global_batch=batch),
                      LayoutArrays.from_layouts([TrainLayout(tp=tp, pp=pp)], batch))
    closed = 72 * batch * s * layers * h * h * (1 + s / (6 * h) + V / (12 * layers * h))
    assert float(cost.model_flops[0]) == pytest.approx(closed, rel=2e-3)


def test_forward_flops_are_2n_plus_attention_per_token() -> None:
    """Forward GEMM FLOPs per token = 2·(layer weights) + 2·V·h + attention 4·s·h per layer (PaLM App. B)."""
    s = 2048
    model = megatron_gpt("m", layers=24, hidden=2304, heads=24, source="")
    cost = train_cost(model, get_system("dgx-a100-80gb"), TrainWorkload(seq_len=s, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    k = cost.kinds
    fwd = 24 * (k["attention"].fwd.flops[0] + k["mlp"].fwd.flops[0]) + k["head"].fwd.flops[0]
    b = param_breakdown(model)
    weights = b["attention/qkv"] + b["attention/out"] + b["mlp/dense"]
    biases = 24 * (3 * 2304 + 2304 + 4 * 2304 + 2304)  # biases add no GEMM FLOPs
    expected = s * (2 * (weights - biases) + 2 * 51200 * 2304 + 24 * 4 * s * 2304)
    assert float(fwd) == pytest.approx(expected, rel=1e-12)
