"""Other frameworks' whole-layer recompute policies, per layer: bytes kept and forward work rerun, by hand.

Llama-3.1-8B (h 4096, 32 heads, 8 KV heads of 128, SwiGLU FFN 14336, no dropout) at TP 2 with sequence
parallelism, one 4,096-token microbatch in bf16 (2 bytes) with flash attention: T = 4096 tokens per GPU; per GPU 16
query heads, 4 KV heads, FFN 7168.

- torchtitan_op (torchtitan@1ea476e9f parallelize_llama.py ``_custom_policy``): a block's aten.mm calls are wq, wk,
  wv, wo, w1, w3, w2; odd ones (wq, wv, w1, w2) are saved, even ones (wk, wo, w3) rerun; SDPA outputs and the TP
  reduce-scatters are saved; every other op is rerun but the last residual add.
- maxtext_save_dot_except_mlpwi (MaxText@c653be3 layers/models.py): keeps the layer input, Q and K after the
  rotary, V, out_proj and mlpwo; reruns the norms, the attention core (``context``), the residual before the MLP,
  the MLP's wi GEMMs and activation.
"""

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_activations
from shardplan.costmodel.training.recompute_modules import module_costs
from shardplan.costmodel.training.stages import kind_cost
from shardplan.hardware import get_system
from shardplan.hardware.spec import AttentionKernel
from shardplan.models import get_model

T, H, E = 4096, 4096, 2  # tokens per GPU, hidden, bytes per bf16 value
Q_COLS, KV_COLS, F = 16 * 128, 4 * 128, 7168  # per GPU at TP 2: query and KV-head widths, FFN width
ROW = T * E * H / 2  # one [T, h] tensor outside the TP regions, ÷2 under sequence parallelism


def _ctx() -> Ctx:
    """torchtitan as its published runs ran it: non-reentrant checkpoint with PyTorch's early stop (before
    torchtitan 25413d224; without it the residual add reruns too: test_recompute_early_stop)."""
    work = TrainWorkload(seq_len=4096, global_batch=8, attention=AttentionKernel.FLASH)
    lay = TrainLayout(tp=2, pp=1, dp=1, sequence_parallel=True)
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"recompute_early_stop": True})})
    return Ctx(get_model("llama-3.1-8b"), system, work, LayoutArrays.from_layouts([lay], 8))


def _kept(ctx: Ctx, kind: str, policy: str) -> float:
    cost = module_costs(ctx, kind, kind_cost(ctx, kind).fwd_ops)[policy]
    return float(layer_activations(ctx, kind).none[0] - cost.freed[0])


def _op_time(ctx: Ctx, kind: str, shares: dict[str, float]) -> float:
    return sum(share * float(op.time[0]) for op in kind_cost(ctx, kind).fwd_ops for name, share in shares.items()
               if op.name == name)


def test_torchtitan_op_keeps_odd_matmuls_sdpa_and_reduce_scatters() -> None:
    ctx = _ctx()
    # layer input, wq output (Q), wv output (V), SDPA output and fp32 log-sum-exp per head, attention reduce-scatter
    attn = ROW + T * E * Q_COLS + T * E * KV_COLS + T * E * Q_COLS + T * 4 * 16 + ROW
    assert _kept(ctx, "attention", "torchtitan_op") == attn == 71_565_312
    # w1 output (T·f/t), w2 output (the row-parallel GEMM's full-width partial sums), the MLP's reduce-scatter
    mlp = T * E * F + T * E * H + ROW
    assert _kept(ctx, "mlp", "torchtitan_op") == mlp == 109_051_904


def test_torchtitan_op_reruns_wk_wo_w3_and_the_elementwise_ops() -> None:
    ctx = _ctx()
    attn = module_costs(ctx, "attention", kind_cost(ctx, "attention").fwd_ops)["torchtitan_op"]
    mlp = module_costs(ctx, "mlp", kind_cost(ctx, "mlp").fwd_ops)["torchtitan_op"]
    wk, wo, w3 = 2 * T * H * KV_COLS, 2 * T * Q_COLS * H, 2 * T * H * F
    assert attn.flops[0] == wk + wo == 85_899_345_920
    assert mlp.flops[0] == w3 == 240_518_168_576
    k_share = KV_COLS / (Q_COLS + 2 * KV_COLS)  # wk's share of the fused QKV GEMM
    attn_ops = {"attn.norm": 1, "attn.tp_allgather": 1, "attn.qkv": k_share, "attn.rope": 1, "attn.out": 1,
                "attn.tp_allreduce": 1, "attn.residual": 1}  # not attn.flash, not attn.tp_reducescatter
    assert attn.time[0] == pytest.approx(_op_time(ctx, "attention", attn_ops), rel=1e-12)
    mlp_ops = {"mlp.norm": 1, "mlp.tp_allgather": 1, "mlp.fc1": 0.5, "mlp.act": 1}  # not fc2, RS, residual
    assert mlp.time[0] == pytest.approx(_op_time(ctx, "mlp", mlp_ops), rel=1e-12)


def test_maxtext_policy_keeps_projections_and_reruns_attention_core_and_wi() -> None:
    ctx = _ctx()
    assert _kept(ctx, "attention", "maxtext_save_dot_except_mlpwi") == ROW + T * E * (Q_COLS + 2 * KV_COLS) + ROW
    assert _kept(ctx, "mlp", "maxtext_save_dot_except_mlpwi") == ROW  # mlpwo
    fwd = kind_cost(ctx, "attention").fwd_ops
    attn = module_costs(ctx, "attention", fwd)["maxtext_save_dot_except_mlpwi"]
    flash = next(op for op in fwd if op.name == "attn.flash")
    assert attn.flops[0] == flash.flops[0] > 0  # the attention core's forward (context is rematerialised)
    attn_ops = {"attn.norm": 1, "attn.tp_allgather": 1, "attn.flash": 1, "attn.residual": 1}
    assert attn.time[0] == pytest.approx(_op_time(ctx, "attention", attn_ops), rel=1e-12)
    mlp = module_costs(ctx, "mlp", kind_cost(ctx, "mlp").fwd_ops)["maxtext_save_dot_except_mlpwi"]
    assert mlp.flops[0] == 2 * T * H * 2 * F  # wi_0 and wi_1
    mlp_ops = {"mlp.norm": 1, "mlp.tp_allgather": 1, "mlp.fc1": 1, "mlp.act": 1}
    assert mlp.time[0] == pytest.approx(_op_time(ctx, "mlp", mlp_ops), rel=1e-12)


@pytest.mark.parametrize("policy", ["torchtitan_op", "maxtext_save_dot_except_mlpwi"])
def test_pinned_policy_moves_stage_memory_time_and_hfu_by_its_terms(policy: str) -> None:
    """The whole model under the policy against no recompute: activations fall by 32 layers' freed bytes, the step
    gains the rerun forward, HFU counts the rerun FLOPs and MFU does not."""
    model, system = get_model("llama-3.1-8b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=4096, global_batch=8, attention=AttentionKernel.FLASH)
    base = dict(tp=2, pp=1, dp=4, microbatch=2, sequence_parallel=True)
    none = estimate_training(model, system, 8, work, TrainLayout(**base, recompute=Recompute.NONE))
    pol = estimate_training(model, system, 8, work, TrainLayout(**base, recompute=Recompute.SELECTIVE,
                                                                recompute_modules=(policy,)))
    ctx = Ctx(model, system, work, LayoutArrays.from_layouts([TrainLayout(**base)], 8))
    costs = {k: module_costs(ctx, k, kind_cost(ctx, k).fwd_ops)[policy] for k in ("attention", "mlp")}
    block = sum(float(c.freed[0]) for c in costs.values())
    # one microbatch in flight without PP; the recomputed block is live during its backward (attention + MLP), but
    # the LM head's fp32 logits (8,192 tokens · 128,256/2 vocabulary · 4 B = 2.1 GB) stay the larger transient
    assert block < 8192 * 128256 / 2 * 4
    assert none.memory.activations_bytes - pol.memory.activations_bytes == pytest.approx(32 * block, rel=1e-9)
    assert pol.metrics.mfu == pytest.approx(none.metrics.mfu * none.metrics.step_time_s / pol.metrics.step_time_s)
    assert pol.metrics.hfu > pol.metrics.mfu
    assert pol.plan.recompute_modules == [policy]
    assert np.isfinite(pol.metrics.step_time_s) and pol.metrics.step_time_s > none.metrics.step_time_s
