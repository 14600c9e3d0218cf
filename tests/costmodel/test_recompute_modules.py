"""Megatron-LM's selective recompute modules, per layer: bytes freed and forward work rerun, by hand.

GPT-3 175B (h 12288, 96 heads, FFN 4h GeLU, dropout), TP 8 with sequence parallelism, one 2,048-token microbatch in
bf16 (2 bytes): T = 2048 tokens per GPU. DeepSeek-V3's MoE layer (top-8 of 256 experts of FFN 2048, one shared
expert of FFN 2048, SwiGLU) at TP 2 without sequence parallelism, 4,096 tokens.
"""

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_activations
from shardplan.costmodel.training.recompute_modules import module_bytes, module_times
from shardplan.costmodel.training.stages import kind_cost
from shardplan.hardware import get_system
from shardplan.hardware.spec import AttentionKernel
from shardplan.models import get_model


def _ctx(model: str, tp: int, sp: bool, seq: int, attention: AttentionKernel | None = None) -> Ctx:
    work = TrainWorkload(seq_len=seq, global_batch=8, attention=attention)
    lay = TrainLayout(tp=tp, pp=1, dp=1, sequence_parallel=sp)
    return Ctx(get_model(model), get_system("dgx-a100-80gb"), work, LayoutArrays.from_layouts([lay], 8))


def test_gpt3_layer_module_bytes() -> None:
    ctx = _ctx("gpt3-175b", 8, True, 2048, AttentionKernel.UNFUSED)
    attn, mlp = module_bytes(ctx, "attention"), module_bytes(ctx, "mlp")
    T, h, t = 2048, 12288, 8
    assert attn["layernorm"][0] == T * 2 * h / t == 6_291_456  # the QKV input (input_layernorm's output), ÷t SP
    assert mlp["layernorm"][0] == T * 2 * h / t  # the FC1 input (pre_mlp_layernorm's output)
    assert mlp["mlp"][0] == T * 2 * (4 * h / t) * 2 == 50_331_648  # FC1 output and GeLU output, 4h/t each
    # core attention (unfused): Korthikanti et al. 2022 Table 2's 5·a·s/h term, ÷t: 5·a·s²·b/t bytes
    assert attn["core_attn"][0] == 5 * 96 * 2048**2 / t == 251_658_240
    # the Korthikanti total with TP and SP, s·b·h·(34 + 5·a·s/h)/t, holds what the modules free and what stays
    total = layer_activations(ctx, "attention").none[0] + layer_activations(ctx, "mlp").none[0]
    assert total == pytest.approx(2048 * h * (34 + 5 * 96 * 2048 / h) / t, rel=1e-12)
    assert attn["core_attn"][0] + attn["layernorm"][0] + mlp["layernorm"][0] + mlp["mlp"][0] < total


def test_flash_attention_frees_nothing_with_core_attn_but_reruns_the_kernel() -> None:
    """Flash attention keeps no scores, so core_attn frees nothing; Megatron-Core still checkpoints core attention
    (attention.py ``checkpoint_core_attention`` at d98e8a6: selective granularity with core_attn, whatever the
    kernel), so its recompute reruns the flash forward kernel: the op's own forward time."""
    ctx = _ctx("gpt3-175b", 8, True, 2048, AttentionKernel.FLASH)
    assert module_bytes(ctx, "attention")["core_attn"][0] == 0.0
    k = kind_cost(ctx, "attention")
    flash = sum(float(op.time[0]) for op in k.fwd_ops if op.name.endswith(".flash"))
    got = module_times("attention", k.fwd_ops, {"core_attn": np.zeros(1)})["core_attn"][0]
    assert flash > 0 and got == pytest.approx(flash, rel=1e-12)


def test_gpt3_mlp_recompute_reruns_the_mlp_forward() -> None:
    ctx = _ctx("gpt3-175b", 8, True, 2048)
    k = kind_cost(ctx, "mlp")
    times = module_times("mlp", k.fwd_ops, module_bytes(ctx, "mlp"), ctx)
    flops = sum(float(op.flops[0]) for op in k.fwd_ops if op.name in ("mlp.fc1", "mlp.fc2"))
    assert flops == 2 * (2 * 2048 * 12288 * 4 * 12288 / 8)  # two GEMMs, 2·T·h·4h/t each
    peak = ctx.system.gpu.peak_flops["bf16"]
    assert times["mlp"][0] >= flops / peak  # no faster than the GEMMs at peak
    # everything of the MLP block but its norm and residual: GEMMs, GeLU, the SP all-gather and reduce-scatter
    inner = sum(float(op.time[0]) for op in k.fwd_ops if op.name not in ("mlp.norm", "mlp.residual"))
    assert times["mlp"][0] == pytest.approx(inner, rel=1e-12)
    norm = next(op for op in k.fwd_ops if op.name == "mlp.norm")
    # the norm reads and writes T·h/t elements in bf16 (and its weight): its time is an HBM pass, microseconds
    assert times["layernorm"][0] == float(norm.time[0])
    assert float(norm.nbytes[0]) >= 2 * 2048 * 12288 / 8 * 2


def test_deepseek_moe_modules() -> None:
    ctx = _ctx("deepseek-v3", 2, False, 4096)
    got = module_bytes(ctx, "moe")
    T, t, F = 4096, 2, 2048
    assert got["moe_act"][0] == T * 8 * 1.0 * 2 * F / t  # each routed copy's SwiGLU output (the FC2 input)
    assert got["shared_experts"][0] == T * 2 * F / t * 3  # shared expert: gate and up (2F) and SwiGLU output (F)
    assert got["layernorm"][0] == T * 2 * 7168  # no SP: the full hidden per token
    # the whole MoE layer frees at least its experts' and shared expert's activations
    assert got["moe"][0] > got["moe_act"][0] + got["shared_experts"][0]
    k = kind_cost(ctx, "moe")
    times = module_times("moe", k.fwd_ops, got, ctx)
    act = next(op for op in k.fwd_ops if op.name == "moe.experts.act")
    assert times["moe_act"][0] == float(act.time[0]) > 0
    shared = sum(float(op.time[0]) for op in k.fwd_ops if op.name.startswith("moe.shared."))
    assert times["shared_experts"][0] == pytest.approx(shared, rel=1e-12)
    # the whole layer reruns its all-to-alls too: more than its expert GEMMs
    gemms = sum(float(op.time[0]) for op in k.fwd_ops if op.name in ("moe.experts.fc1", "moe.experts.fc2"))
    assert times["moe"][0] > gemms + float(act.time[0])


def test_pinned_module_set_moves_memory_and_time_by_the_module_terms() -> None:
    """GPT-3 TP8 PP8 (12 layers per stage), selective with core_attn + mlp against the default: the first stage
    stores 12 layers' MLP activations less per microbatch in flight, holds one layer's as a transient during its
    backward, and reruns 12 MLP forwards per microbatch."""
    from shardplan.costmodel.training.space import validate_layout
    from shardplan.costmodel.training.step import train_cost
    from shardplan.errors import ShardplanError
    from shardplan.models import get_model as gm

    spec, system = gm("gpt3-175b"), get_system("dgx-a100-80gb")
    work = TrainWorkload(seq_len=2048, global_batch=64)
    base = TrainLayout(tp=8, pp=8, dp=1, recompute="selective", sequence_parallel=True)
    mods = TrainLayout(tp=8, pp=8, dp=1, recompute="selective", sequence_parallel=True,
                       recompute_modules=("core_attn", "mlp"))
    validate_layout(spec, 64, work, mods)
    rows = LayoutArrays.from_layouts([base, mods], 64)
    assert rows.row(0).recompute_modules is None and rows.row(1).recompute_modules == ("core_attn", "mlp")
    cost = train_cost(spec, system, work, rows)
    first = cost.stages[0]
    ctx = Ctx(spec, system, work, rows.take(np.array([1])))
    mlp_bytes = float(module_bytes(ctx, "mlp")["mlp"][0])
    mlp_time = float(module_times("mlp", kind_cost(ctx, "mlp").fwd_ops, {"mlp": np.zeros(1)})["mlp"][0])
    inflight = float(first.inflight[0])  # 1F1B: min(m, p) = 8 microbatches on the first stage
    assert inflight == 8
    assert first.activations[0] - first.activations[1] == pytest.approx(12 * mlp_bytes * inflight - mlp_bytes,
                                                                        rel=1e-9)
    assert first.recompute_s[1] - first.recompute_s[0] == pytest.approx(12 * mlp_time, rel=1e-9)
    assert cost.step_time_s[1] > cost.step_time_s[0]
    with pytest.raises(ShardplanError, match="needs --recompute selective"):
        validate_layout(spec, 64, work, TrainLayout(tp=8, pp=8, dp=1, recompute="full", recompute_modules=("mlp",)))
    with pytest.raises(ShardplanError, match="MoE model") as err:
        validate_layout(spec, 64, work, TrainLayout(tp=8, pp=8, dp=1, recompute="selective",
                                                    recompute_modules=("moe_act",)))
    assert err.value.field == "recompute_modules"


def test_per_layer_rows_carry_the_module_set_as_the_stage_rows_do() -> None:
    # Mixtral-8x7B, TP 2 (SP), EP 4, microbatch 1 × 4096: moe_act drops each routed copy's FC2 input, T·k·F·2/t bytes
    # per layer (hand count: 4096·2·14336·2/2), and reruns the experts' activation; the per-layer table must show
    # both, and its recompute time × layer count is the stage's recompute time.
    from shardplan.costmodel.training.evaluate import estimate_training
    from shardplan.costmodel.training.layout import Recompute

    model, system = get_model("mixtral-8x7b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=4096, global_batch=64)
    base = dict(tp=2, pp=2, dp=4, ep=4, microbatch=1, recompute=Recompute.SELECTIVE, sequence_parallel=True)
    plain = estimate_training(model, system, 16, work, TrainLayout(**base))
    moe_act = estimate_training(model, system, 16, work, TrainLayout(**base, recompute_modules=("moe_act",)))
    rows = {(r.stage, r.kind): r for r in plain.layers}
    for r in moe_act.layers:
        if r.kind != "moe":
            continue
        assert rows[(r.stage, "moe")].activations_bytes - r.activations_bytes == 4096 * 2 * 14336 * 2 / 2
        assert r.recompute_time_s > rows[(r.stage, "moe")].recompute_time_s
    for st in moe_act.stages:
        layer_rc = sum(r.count * r.recompute_time_s for r in moe_act.layers if r.stage == st.stage)
        assert layer_rc == pytest.approx(st.recompute_time_s, rel=1e-9)


def test_core_attn_rerun_includes_the_context_parallel_ring() -> None:
    """Under CP, Transformer Engine's attention exchanges K/V inside its forward (context_parallel.py
    ``AttnFuncWithCPAndKVP2P.forward`` at d0067d0), so core_attn's checkpointed rerun repeats the ring as well as the
    flash kernel: the selective phase is their two forward times."""
    from shardplan.costmodel.training.evaluate import normalize

    work = TrainWorkload(seq_len=32768, global_batch=8, attention=AttentionKernel.FLASH)
    lay = normalize(TrainLayout(tp=8, cp=2, dp=4, sequence_parallel=True))
    ctx = Ctx(get_model("llama-3.1-70b"), get_system("dgx-h100"), work, LayoutArrays.from_layouts([lay], 8))
    k = kind_cost(ctx, "attention")
    ring = sum(float(op.time[0]) for op in k.fwd_ops if op.name.endswith(".cp_ring"))
    flash = sum(float(op.time[0]) for op in k.fwd_ops if op.name.endswith(".flash"))
    assert ring > 0 and flash > 0
    assert float(k.selective.time[0]) == pytest.approx(flash + ring, rel=1e-12)


@pytest.mark.parametrize("modules", [("core_attn",), ("layernorm", "moe_act"), ("core_attn", "layernorm")])
def test_hfu_counts_core_attention_rerun_only_when_core_attn_is_recomputed(modules: tuple[str, ...]) -> None:
    """HFU − MFU is the forward work recompute reruns (Korthikanti et al. 2022 §6.3): with core_attn in the set, one
    attention forward in the model convention, 4·s·d FLOPs per token per query head dim (QKᵀ and PV, the full s×s
    matrix) per attention layer, by hand; the norm and the routed experts' activation add no matmul work; without
    core_attn nothing is rerun that counts, and HFU = MFU."""
    from shardplan.costmodel.training.evaluate import estimate_training

    model = get_model("mixtral-8x7b")
    work = TrainWorkload(seq_len=4096, global_batch=64)
    lay = TrainLayout(tp=2, pp=1, dp=4, ep=4, microbatch=1, recompute="selective", recompute_modules=modules,
                      sequence_parallel=True)
    m = estimate_training(model, get_system("dgx-h100"), 8, work, lay).metrics
    assert m.hfu >= m.mfu
    tokens = 64 * 4096
    attn = model.num_layers * 4 * 4096 * model.num_heads * model.head_size * tokens  # QKᵀ and PV over s×s
    peak = get_system("dgx-h100").gpu.peak("bf16") * 8 * m.step_time_s
    want = attn / peak if "core_attn" in modules else 0.0
    assert m.hfu - m.mfu == pytest.approx(want, rel=1e-6, abs=1e-12)
