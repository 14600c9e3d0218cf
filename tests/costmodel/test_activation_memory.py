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


# Korthikanti et al. 2022 Fig. 7: activation memory of each technique as a percentage of the tensor-parallel
# baseline (TP=8, PP of Table 3), bar heights as read by calculon (calculon-ai/calculon calculon/llm/validation.py,
# seqsel_fig7): sequence parallel, selective recompute, both, full recompute.
FIG7 = {"22B": (66.84, 49.42, 16.18, 7.64), "175B": (62.04, 56.53, 18.49, 8.71),
        "530B": (58.31, 62.04, 20.27, 9.42), "1T": (58.31, 62.04, 20.27, 9.42)}
TABLE3 = {"22B": (1, 4), "175B": (8, 64), "530B": (35, 280), "1T": (64, 512)}  # (pipeline stages, global batch)


def _first_stage(name: str) -> tuple[list[float], list[float]]:
    """First-stage activations of the baseline and the four techniques: (stored by the transformer layers over the
    microbatches in flight — what Fig. 7 plots —, the stage's whole activation memory)."""
    from shardplan.costmodel.training.memory import embedding_activations
    from shardplan.costmodel.training.step import train_cost

    h, a, layers = MODELS[name]
    p, gb = TABLE3[name]
    model = megatron_gpt(name, layers=layers, hidden=h, heads=a, source="")
    work = TrainWorkload(seq_len=S, global_batch=gb, dtype="fp16", attention="unfused")
    base = dict(tp=T, pp=p, dp=1, microbatch=1)
    lays = [TrainLayout(**base), TrainLayout(**base, sequence_parallel=True),
            TrainLayout(**base, recompute=Recompute.SELECTIVE),
            TrainLayout(**base, recompute=Recompute.SELECTIVE, sequence_parallel=True),
            TrainLayout(**base, recompute=Recompute.FULL)]
    cost = train_cost(model, get_system("dgx-a100-80gb"), work, LayoutArrays.from_layouts(lays, gb))
    st = cost.stages[0]
    emb = embedding_activations(cost.ctx)
    stored = (st.stored_mb - emb) * st.inflight
    return [float(x) for x in stored], [float(x) for x in st.activations]


@pytest.mark.parametrize("name", MODELS)
def test_figure7_every_technique_within_10_percent(name: str) -> None:
    """Each technique's stored activation memory relative to the TP baseline is within 10% of Fig. 7 (selective,
    SP and both within 3%); full recompute keeps 2·s·b·h per layer and microbatch in flight."""
    stored, _ = _first_stage(name)
    for got, fig, tol in zip(stored[1:], FIG7[name], (0.03, 0.03, 0.03, 0.03), strict=True):
        assert 100 * got / stored[0] == pytest.approx(fig, rel=tol)


def test_full_recompute_peak_adds_one_recomputed_layer_or_the_head() -> None:
    """22B (TP=8, PP=1, 48 layers): the stage's peak under full recompute = 48 stored inputs (2·s·b·h each), the
    embedding's dropout mask (s·b·h), and the larger of two transients that never coexist: the recomputed layer
    less its stored input (Table 2's TP baseline s·b·h·(10 + 24/t + 5·a·s/(h·t)) less 2·s·b·h) or the LM head
    (norm and head inputs 2+2 B, fp32 logits 4·V/t B per token)."""
    h, a, layers = MODELS["22B"]
    sbh = S * 1 * h
    _, total = _first_stage("22B")
    layer = sbh * (10 + 24 / T + 5 * a * S / (h * T))
    head = S * (4 * h + 4 * 51200 / T)
    expected = layers * 2 * sbh + sbh + max(layer - 2 * sbh, head)
    assert total[4] == pytest.approx(expected, rel=1e-12)
