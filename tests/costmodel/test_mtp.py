"""Multi-token-prediction modules (``TrainWorkload.mtp_layers``): what they add to the last stage's parameters must
be the catalog's own count of the MTP layers (``models.params.mtp_param_breakdown``, which the checkpoint sizes
check), their model FLOPs Megatron-LM's formula, and their time the sum of the layers they are made of."""

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_params
from shardplan.costmodel.training.stages import kind_costs, model_flops_parts
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.models.params import embedding_params, mtp_param_breakdown


def _ctx(model: str, mtp: int, **lay: int) -> Ctx:
    work = TrainWorkload(seq_len=4096, global_batch=64, mtp_layers=mtp)
    rows = LayoutArrays.from_layouts([TrainLayout(**({"dp": 1} | lay))], work.global_batch)
    return Ctx(get_model(model), get_system("dgx-h100"), work, rows)


@pytest.mark.parametrize("model", ["deepseek-v3", "glm-4.5-air", "llama-3.1-8b"])
def test_mtp_parameters_are_the_catalogs_mtp_layers(model: str) -> None:
    # one GPU holds everything (tp = ep = pp = 1): the head's extra parameters are exactly the MTP layers the
    # catalog counts; llama has no MTP in its checkpoint, so compare with its own layer shape instead
    spec = get_model(model)
    extra = {k: float(np.sum(getattr(layer_params(_ctx(model, 1), "head"), k) - getattr(layer_params(_ctx(model, 0),
                                                                                                     "head"), k)))
             for k in ("dense", "expert")}
    ref = spec if spec.mtp_layers else spec.model_copy(update={"mtp_layers": 1})
    assert extra["dense"] + extra["expert"] == pytest.approx(sum(mtp_param_breakdown(ref).values()), rel=1e-12)


def test_mtp_under_pp_keeps_an_embedding_copy_and_splits_over_tp() -> None:
    # pp > 1: the last stage looks up the shifted tokens itself (Megatron builds the embedding where mtp_process)
    spec = get_model("deepseek-v3")
    one = layer_params(_ctx("deepseek-v3", 1, pp=4), "head").dense - layer_params(_ctx("deepseek-v3", 0, pp=4),
                                                                                    "head").dense
    flat = layer_params(_ctx("deepseek-v3", 1), "head").dense - layer_params(_ctx("deepseek-v3", 0), "head").dense
    assert float(one[0] - flat[0]) == pytest.approx(embedding_params(spec))
    assert float(np.sum(layer_params(_ctx("deepseek-v3", 2), "head").expert)) == pytest.approx(
        2 * spec.moe.num_experts * 3 * spec.hidden_size * spec.moe.expert_ffn_hidden_size)


def test_mtp_model_flops_follow_megatron() -> None:
    # Megatron-LM d98e8a6 training.py num_floating_point_operations: the MTP depth counts as one more layer of the
    # last layer's kind (6 per active weight per token, attention over the whole sequence, the layer's own norms not
    # counted), its eh_proj (2h²) with enorm, hnorm and final norm (3h), and one more logits pass (6·V·h)
    spec, s = get_model("deepseek-v3"), 4096
    base, mtp = model_flops_parts(spec, s), model_flops_parts(spec, s, 1)
    parts = mtp_param_breakdown(spec, active=True)
    active = sum(parts.values()) - parts["mtp/norms"]
    m = spec.mla
    attention = 12 * s * spec.num_heads * (m.qk_head_dim + m.v_head_dim) / 2
    expect = 6 * active + attention + 6 * spec.vocab_size * spec.hidden_size
    assert mtp.total - base.total == pytest.approx(expect, rel=1e-12)


def test_mtp_time_is_its_layers_and_another_head() -> None:
    # the head with one MTP module costs, each way, the head twice plus an attention layer, a MoE layer and the
    # module's entry (embedding, norms, eh_proj), each as costed on its own
    c0, c1 = _ctx("deepseek-v3", 0, ep=8, dp=8), _ctx("deepseek-v3", 1, ep=8, dp=8)
    k0, k1 = kind_costs(c0), kind_costs(c1)
    from shardplan.costmodel.training import layers as Lyr
    from shardplan.costmodel.training.backward import backward

    entry = Lyr.mtp_entry_ops(c1)
    entry_f = sum(float(o.time[0]) for o in entry)
    entry_b = sum(float(o.time[0]) for o in backward(c1, entry))
    for phase, ex in (("fwd", entry_f), ("bwd", entry_b)):
        parts = 2 * getattr(k0["head"], phase).time + getattr(k0["attention"], phase).time \
            + getattr(k0["moe"], phase).time
        assert float(getattr(k1["head"], phase).time[0]) == pytest.approx(float(parts[0]) + ex, rel=1e-9)
    assert entry_f > 0 and entry_b > entry_f


def test_mtp_slows_the_last_stage_and_adds_its_memory() -> None:
    spec, system = get_model("deepseek-v3"), get_system("dgx-h100")
    lay = TrainLayout(tp=1, pp=8, dp=8, ep=8, interleave=1)
    out = {}
    for mtp in (0, 1):
        work = TrainWorkload(seq_len=4096, global_batch=256, mtp_layers=mtp)
        out[mtp] = train_cost(spec, system, work, LayoutArrays.from_layouts([lay], work.global_batch))
    last0, last1 = out[0].stages[-1], out[1].stages[-1]
    assert float(last1.fwd_s[0]) > float(last0.fwd_s[0]) and float(last1.activations[0]) > float(last0.activations[0])
    assert float(out[1].stages[0].fwd_s[0]) == float(out[0].stages[0].fwd_s[0])  # the first stage is untouched
    assert float(out[1].step_time_s[0]) > float(out[0].step_time_s[0])


def test_cli_prices_mtp_layers_and_rejects_out_of_range(run_cli) -> None:
    base = ["estimate", "train", "-m", "deepseek-v3", "-H", "dgx-h100", "-b", "256", "-s", "4096", "-g", "64",
            "--pp", "8", "--ep", "8", "--json"]
    steps = []
    for n in (0, 1):
        res = run_cli(*base, "--mtp-layers", str(n))
        assert res.code == 0, res.err
        assert res.json()["plan"]["mtp_layers"] == n  # the layout names what its numbers price
        steps.append(res.json()["metrics"]["step_time_s"])
    assert steps[1] > steps[0]
    bad = run_cli(*base, "--mtp-layers", "17")
    assert bad.code == 2 and "--mtp-layers" in bad.err and "Traceback" not in bad.err


def test_tied_embeddings_keep_one_copy_on_the_last_stage() -> None:
    # tied: under PP the head already holds the word embedding the MTP lookup uses, so the MTP adds the same
    # parameters as without PP; untied (deepseek-v3, above) adds its own copy
    def extra(pp: int) -> float:
        return float((layer_params(_ctx("gpt-7.5b", 1, pp=pp), "head").dense
                      - layer_params(_ctx("gpt-7.5b", 0, pp=pp), "head").dense)[0])

    assert extra(4) == pytest.approx(extra(1), rel=1e-12)


def test_uneven_split_layer_table_keeps_the_mtp_head_row() -> None:
    # the per-layer rows of an uneven split (stage_report) must include the head+mtp row: the last stage's rows,
    # times their counts, add up to the stage's forward time
    from shardplan.costmodel.training.stage_report import estimate_split

    spec, system = get_model("deepseek-v3"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=4096, global_batch=256, mtp_layers=1)
    lay = TrainLayout(tp=1, pp=8, dp=8, ep=8)
    rep = estimate_split(spec, system, 64, work, lay, [8, 8, 8, 8, 8, 8, 8, 5])
    last = [row for row in rep.layers if row.stage == rep.stages[-1].stage]
    assert any(row.kind == "head+mtp" for row in last)
    assert sum(row.fwd_time_s * row.count for row in last) == pytest.approx(rep.stages[-1].fwd_time_s, rel=0.02)


def test_fp8_weight_gathers_by_framework() -> None:
    # Megatron's fp8 recipes gather fp8 primary weights (1 B); torchtitan, FSDP and AutoModel gather 16-bit ones
    from shardplan.costmodel.training.dp_sync import gathered_bytes
    from shardplan.costmodel.training.frameworks import framework_system

    def gathered(dtype: str, framework: str | None) -> float:
        work = TrainWorkload(seq_len=4096, global_batch=64, dtype=dtype)
        rows = LayoutArrays.from_layouts([TrainLayout(dp=8, zero_stage=3)], work.global_batch)
        return gathered_bytes(Ctx(get_model("llama-3.1-8b"), framework_system(get_system("dgx-h100"), framework),
                                  work, rows))

    assert gathered("fp8", None) == 1.0 and gathered("fp8", "megatron") == 1.0 and gathered("bf16", None) == 2.0
    assert all(gathered("fp8", f) == 2.0 for f in ("torchtitan", "fsdp", "automodel"))
