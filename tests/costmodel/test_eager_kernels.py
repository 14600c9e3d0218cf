"""Eager PyTorch elementwise kernels (``SoftwareSpec.elementwise_kernels``/``norm_kernel``) against hand counts.

Independent sources: the kernels each framework line launches, counted by hand from the source cited in
``core.passes`` (torchtitan's RMSNorm and SwiGLU, Megatron-Core's fused cross entropy), byte by byte for a small
shape; the inventory's fused formulas written out by hand for a dense and an MoE layer; and the measured
throughput of torchtitan's 64-A100 Llama-3-8B run (docs/performance.md@1ea476e9f).
"""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core.ops import MEM
from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation.runs import load_records, modern_setup


def _ctx(model: str, seq: int = 4, **software: object) -> Ctx:
    system = get_system("dgx-h100")
    system = system.model_copy(update={"software": system.software.model_copy(update=software)})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, dp=1, recompute=Recompute.NONE, sequence_parallel=False)],
                                     global_batch=1)
    return Ctx(get_model(model), system, TrainWorkload(seq_len=seq, global_batch=1), rows)


def test_composite_rmsnorm_bytes_by_hand() -> None:
    """torchtitan's RMSNorm over 4 tokens × 8 channels (32 bf16 values, fp32 intermediates), kernel by kernel."""
    n, bf16, fp32 = 4 * 8, 2, 4
    fwd = [n * (bf16 + fp32),  # x.float()
           n * (fp32 + fp32),  # .pow(2)
           n * fp32,  # .mean(-1) (writes one value per row: 4 rows, not counted per element)
           n * (fp32 + fp32),  # x * rsqrt(...) (reads x; the per-row factor is a broadcast)
           n * (fp32 + bf16),  # .type_as(x)
           n * (bf16 + bf16)]  # * weight
    bwd = [n * bf16 * 2,  # grad_x of ·weight: g·w (read g, write)
           n * bf16 * 3 + n * bf16,  # grad_w: g·y (read g and y, write) then the sum over tokens (read)
           n * (bf16 + fp32),  # type_as backward: cast g to fp32
           n * fp32 * 2,  # g·rsqrt (read g, write)
           n * fp32 * 3 + n * fp32,  # g·x (read both, write) and its sum over the row (read)
           n * fp32,  # mean backward: the expanded gradient ÷ h (write)
           n * fp32 * 2 + n * fp32 * 2 + n * fp32 * 3,  # pow backward: x.pow(1), ·2, g·(…)
           n * fp32 * 3,  # the fp32 x feeds pow and mul: its two gradients summed
           n * (fp32 + bf16)]  # .float() backward: cast to bf16
    ctx = _ctx("llama-3.1-8b", norm_kernel="composite")
    op = inv.norm(ctx, "norm", 4.0, 8.0)
    assert float(op.nbytes[0]) == sum(fwd) == 36 * n
    [back] = backward(ctx, [op])
    assert float(back.nbytes[0]) == sum(bwd) == 92 * n
    # against the fused kernel: read and write in forward, 1.5× that backward
    fused = inv.norm(_ctx("llama-3.1-8b"), "norm", 4.0, 8.0)
    assert float(fused.nbytes[0]) == 2 * bf16 * n
    assert float(backward(ctx, [fused])[0].nbytes[0]) == 1.5 * 2 * bf16 * n


def test_eager_swiglu_rope_and_loss_by_hand() -> None:
    """Llama-3.1-8B, 4 tokens: SwiGLU silu then mul (5 passes; backward two products and silu_backward, 9 passes),
    rotary of 32 q + 8 k heads of 128 in fp32 (cast, complex product, cast back: 20 B per element each way), the
    loss's fp32 cast and log-softmax (22 B per logit forward, 26 B backward)."""
    T, ffn, V = 4, 14336, 128256
    ctx = _ctx("llama-3.1-8b", elementwise_kernels="eager")
    ops = {op.name: op for op in L.mlp_ops(ctx) + L.attention_ops(ctx) + L.head_ops(ctx) if op.kind == MEM}
    bwd = {op.name.removesuffix(".bwd"): op for op in backward(ctx, list(ops.values()))}
    assert float(ops["mlp.act"].nbytes[0]) == T * ffn * (2 + 2 + (2 + 2 + 2))
    assert float(bwd["mlp.act"].nbytes[0]) == T * ffn * 2 * (3 + 3 + 3)
    rope = T * (32 + 8) * 128
    assert float(ops["attn.rope"].nbytes[0]) == rope * ((2 + 4) + (4 + 4) + (4 + 2))
    assert float(bwd["attn.rope"].nbytes[0]) == rope * ((2 + 4) + (4 + 4) + (4 + 2))
    assert float(ops["head.cross_entropy"].nbytes[0]) == T * V * ((2 + 4) + (3 * 4 + 4))
    assert float(bwd["head.cross_entropy"].nbytes[0]) == T * V * (4 + (4 + 4 + 4 + 4) + (4 + 2))
    # the residual add and the norm (norm_kernel fused) run the same kernels as the fused stack
    assert float(ops["attn.residual"].nbytes[0]) == T * 4096 * 3 * 2
    assert float(ops["attn.norm"].nbytes[0]) == T * 4096 * 2 * 2


def test_fused_cross_entropy_is_megatrons_fused_kernels() -> None:
    """Megatron-Core fused_vocab_parallel_cross_entropy per bf16 logit: cast + max (read 2 B, write 4 B), shift +
    exp in place (8 B), divide in place (8 B); backward copies the fp32 softmax (torch.compile keeps the mutation of
    its input), reads the copy, writes the bf16 gradient and the product back over the softmax."""
    T, V = 4, 128256
    ctx = _ctx("llama-3.1-8b")
    [op] = [o for o in L.head_ops(ctx) if o.name == "head.cross_entropy"]
    assert float(op.nbytes[0]) == T * V * (2 + 4 + 8 + 8)
    assert float(backward(ctx, [op])[0].nbytes[0]) == T * V * ((4 + 4) + 4 + 2 + 4)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_default_stack_prices_layer_ops_as_fused_formulas(model: str) -> None:
    """A default system (fused) prices every elementwise op of a dense and an MoE layer exactly by the fused
    formulas, forward and backward (1.5×): the new fields leave every layer number where it was."""
    ctx = _ctx(model, seq=4096)
    m, T, h = ctx.model, 4096.0, ctx.model.hidden_size
    ops = L.attention_ops(ctx) + (L.moe_ops(ctx) if m.moe else L.mlp_ops(ctx))
    mem = {op.name: op for op in ops if op.kind == MEM}
    expect = {"attn.norm": T * h * 2 * 2, "attn.residual": T * h * 3 * 2,
              "attn.rope": T * (m.num_heads + m.kv_heads) * m.head_size * 2 * 2}
    if m.moe:
        expect["moe.experts.act"] = T * m.moe.experts_per_token * m.moe.expert_ffn_hidden_size * 3 * 2
    else:
        expect["mlp.act"] = T * m.ffn_hidden_size * 3 * 2
    for name, nbytes in expect.items():
        assert float(mem[name].nbytes[0]) == nbytes, name
    for op in backward(ctx, list(mem.values())):
        fwd = mem[op.name.removesuffix(".bwd")]
        assert np.array_equal(op.nbytes, 1.5 * fwd.nbytes)
        assert np.array_equal(op.time, ctx.mem_time(1.5 * fwd.nbytes))
    explicit = _ctx(model, seq=4096, elementwise_kernels="fused", norm_kernel="fused")
    again = L.attention_ops(explicit) + (L.moe_ops(explicit) if m.moe else L.mlp_ops(explicit))
    assert all(np.array_equal(a.time, b.time) for a, b in zip(ops, again, strict=True))


def test_torchtitan_a100_record_moves_toward_measured() -> None:
    """torchtitan Llama-3-8B on 64 A100 (2,973 tokens/s per GPU measured): pricing its eager kernels and fp32
    gradient reduce-scatter, as its recipe ran, brings the pinned prediction closer to the measurement."""
    rec = next(r for r in load_records("modern_training_runs")
               if r["id"] == "torchtitan-llama-3-8b-64gpu-a100-fsdp-selective-op-bf16")
    setup = modern_setup(rec)
    assert setup is not None
    model, system, n, work, layout, _, measured = setup
    assert system.software.elementwise_kernels == "eager" and work.grad_reduce_dtype == "fp32"
    fused = system.model_copy(update={"software": system.software.model_copy(update={"elementwise_kernels": "fused"})})
    eager_tps = estimate_training(model, system, n, work, layout).metrics.tokens_per_s / n
    fused_tps = estimate_training(model, fused, n, work, layout).metrics.tokens_per_s / n
    assert measured < eager_tps < fused_tps
    assert abs(eager_tps / measured - 1) < abs(fused_tps / measured - 1) - 0.02


def test_every_records_stack_settings_are_valid_software() -> None:
    """The software facts the validation records carry are SoftwareSpec values (a typo would otherwise pass
    through ``model_copy`` unchecked), and the eager kernels appear only where the recipe ran without compile."""
    from shardplan.hardware.spec import SoftwareSpec
    from shardplan.validation.stacks import stack_software

    records = load_records("modern_training_runs") + load_records("optimum_runs")["runs"]
    for r in records:
        sw = stack_software(r)
        SoftwareSpec(**sw)
        if sw.get("elementwise_kernels") == "eager":
            assert not r["parallel"].get("torch_compile"), r["id"]
            assert "compile" in r["software"]["kernels_source"], r["id"]


def test_varlen_unpad_copies_by_hand() -> None:
    """llm-foundry's flash path (flash-attn bert_padding): 4 tokens of Llama-3.1-8B's 32 query and 8 KV heads of 128.
    Each of q, k, v is gathered with an int64 index per element (index written 8 B and read 8 B, value read 2 B and
    written 2 B); backward zero-fills (2), rebuilds the index (8) and scatters (index 8, gradient 2, write 2). The
    output is zero-filled and written (2 + 2 + 2 B); backward indexes the gradient back (2 + 2 B)."""
    T = 4
    ctx = _ctx("llama-3.1-8b", attention_unpad=True)
    ops = {op.name: op for op in L.attention_ops(ctx) if op.kind == MEM}
    bwd = {op.name.removesuffix(".bwd"): op for op in backward(ctx, list(ops.values()))}
    qkv, out = T * (32 + 8 + 8) * 128, T * 32 * 128
    assert float(ops["attn.unpad_qkv"].nbytes[0]) == qkv * (8 + 8 + 2 + 2)
    assert float(bwd["attn.unpad_qkv"].nbytes[0]) == qkv * (2 + 8 + 8 + 2 + 2)
    assert float(ops["attn.pad_out"].nbytes[0]) == out * (2 + 2 + 2)
    assert float(bwd["attn.pad_out"].nbytes[0]) == out * (2 + 2)
    assert "attn.unpad_qkv" not in {op.name for op in L.attention_ops(_ctx("llama-3.1-8b"))}
