"""Activation memory per layer equals Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, exactly.

GPT layers (MHA, 4h GeLU MLP, dropout, 16-bit activations, unfused attention as in the paper), for the
four models of its Table 3, every parallelism/recompute recipe of Table 2.
"""

import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_activations
from shardplan.hardware import get_system
from shardplan.models.catalog import megatron_gpt

# (hidden h, heads a, layers) of Korthikanti et al. Table 3
MODELS = {"22B": (6144, 64, 48), "175B": (12288, 96, 96), "530B": (20480, 128, 105), "1T": (25600, 160, 128)}
S, B, T = 2048, 1, 8


def per_layer(name: str, **layout) -> float:
    h, a, layers = MODELS[name]
    model = megatron_gpt(name, layers=layers, hidden=h, heads=a, source="")
    work = TrainWorkload(seq_len=S, global_batch=8, dtype="fp16")
    rows = LayoutArrays.from_layouts([TrainLayout(microbatch=B, dp=1, **layout)], 8)
    ctx = Ctx(model, get_system("dgx-a100-80gb"), work, rows)
    att, mlp = layer_activations(ctx, "attention"), layer_activations(ctx, "mlp")
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}[
        layout.get("recompute", Recompute.NONE)]
    return float(getattr(att, mode)[0] + getattr(mlp, mode)[0])


@pytest.mark.parametrize("name", MODELS)
def test_table2_every_recipe(name: str) -> None:
    h, a, _ = MODELS[name]
    sbh = S * B * h
    t = T
    assert per_layer(name) == pytest.approx(sbh * (34 + 5 * a * S / h), rel=1e-12)  # no parallelism
    assert per_layer(name, tp=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * S / (h * t)), rel=1e-12)
    assert per_layer(name, tp=t, sequence_parallel=True) == pytest.approx(
        sbh * (34 / t + 5 * a * S / (h * t)), rel=1e-12)
    assert per_layer(name, tp=t, recompute=Recompute.SELECTIVE) == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert per_layer(name, tp=t, sequence_parallel=True, recompute=Recompute.SELECTIVE) == pytest.approx(
        sbh * 34 / t, rel=1e-12)
    assert per_layer(name, tp=t, recompute=Recompute.FULL) == pytest.approx(2 * sbh, rel=1e-12)


def test_selective_saves_what_the_paper_says_for_gpt3() -> None:
    """§6.1: selective recompute saves 70% of GPT-3's activation memory (TP=8, SP on both sides)."""
    with_sp = per_layer("175B", tp=8, sequence_parallel=True)
    sel = per_layer("175B", tp=8, sequence_parallel=True, recompute=Recompute.SELECTIVE)
    assert 1 - sel / with_sp == pytest.approx(0.70, abs=0.01)


def test_flash_attention_stores_no_scores() -> None:
    """Flash attention keeps no s×s tensors: 'none' equals 'selective' up to the fp32 log-sum-exp."""
    h, a, layers = MODELS["22B"]
    model = megatron_gpt("22B", layers=layers, hidden=h, heads=a, source="")
    work = TrainWorkload(seq_len=S, global_batch=8, attention="flash")
    rows = LayoutArrays.from_layouts([TrainLayout(tp=8, microbatch=1)], 8)
    acts = layer_activations(Ctx(model, get_system("dgx-a100-80gb"), work, rows), "attention")
    # per token: norm input, QKV input (2 B each), dropout mask (1 B) unsplit = 5h; Q, K, V, output-projection
    # input split over TP = 2·4·h/8 = h; log-sum-exp fp32 per local head = 4·a/8.
    assert float(acts.none[0]) == pytest.approx(S * (6 * h + 4 * a / 8), rel=1e-12)
    assert float(acts.none[0] - acts.selective[0]) == 0.0
