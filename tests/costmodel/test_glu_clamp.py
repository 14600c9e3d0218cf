"""A clamped GLU (gpt-oss: gate ≤ 7, up within ±7) under Megatron-Core's TEGroupedMLP: the clamps and a cat run as
eager kernels before the fused activation (megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl
at core_v0.15.0). Per element of the activation's output: 8 passes forward (16 B at 16 bit), 11 passes and 8 B of
masks backward (30 B), and 4 B more kept for backward unless ``moe_act`` is recomputed (core.passes ``glu_clamp``).
Not under the fused-op path (Transformer Engine's op fuser) nor a compiled activation (AutoModel), nor in serving."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.routing import ep_imbalance
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import layer_activations
from shardplan.costmodel.training.recompute_modules import module_bytes
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.models.hf import spec_from_hf_config

TOKENS = 2 * 4096  # microbatch 2 × sequence 4096 on one GPU (TP 1)


def _ctx(model: str, expert_mlp: str = "te_grouped") -> Ctx:
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"expert_mlp": expert_mlp})})
    work = TrainWorkload(seq_len=4096, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=2, zero_stage=1)], 64)
    return Ctx(get_model(model), system, work, rows)


def _ops(ctx: Ctx) -> tuple[list, list]:
    moe = kind_costs(ctx)["moe"]
    return moe.fwd_ops, moe.bwd_ops


def _one(ops: list, name: str) -> float:
    (op,) = [o for o in ops if o.name == name]
    return float(np.ravel(op.nbytes)[0])


def test_gpt_oss_clamps_every_routed_copy_as_eager_kernels() -> None:
    ctx = _ctx("gpt-oss-120b")
    fwd, bwd = _ops(ctx)
    assert ctx.model.activation_clamp == 7.0
    # activation outputs: 2 sequences × 4096 tokens × top-4 copies × width 2880, at the busiest EP rank's load
    elements = TOKENS * 4 * 2880 * float(ep_imbalance(8, TOKENS * 4))
    assert _one(fwd, "moe.experts.clamp") == pytest.approx(16.0 * elements)
    assert _one(bwd, "moe.experts.clamp.bwd") == pytest.approx(30.0 * elements)
    names = [o.name for o in fwd]
    assert names.index("moe.experts.fc1") < names.index("moe.experts.clamp") < names.index("moe.experts.act")


@pytest.mark.parametrize(("expert_mlp", "bias"), [("compiled", True), ("fused_ops", False)])
def test_fused_or_compiled_activations_clamp_in_place(expert_mlp: str, bias: bool) -> None:
    fwd, bwd = _ops(_ctx("gpt-oss-120b", expert_mlp))
    assert not any("clamp" in o.name for o in fwd + bwd)
    # AutoModel still adds its FC2 bias after the grouped GEMM; the fused op path scales it inside
    assert any(o.name == "moe.experts.fc2_bias" for o in fwd) is bias


def test_models_without_a_clamp_have_no_such_op() -> None:
    fwd, bwd = _ops(_ctx("qwen3-30b-a3b"))
    assert get_model("qwen3-30b-a3b").activation_clamp is None
    assert not any("clamp" in o.name for o in fwd + bwd)


def test_the_clamps_keep_the_fc1_output_unless_moe_act_is_recomputed() -> None:
    eager, compiled = _ctx("gpt-oss-120b"), _ctx("gpt-oss-120b", "compiled")
    extra = TOKENS * 4 * 2880 * 4.0  # per routed copy: FC1 output of 2 × 2880 values at 2 B
    kept = layer_activations(eager, "moe").none - layer_activations(compiled, "moe").none
    assert float(np.ravel(kept)[0]) == pytest.approx(extra)
    freed = module_bytes(eager, "moe")["moe_act"] - module_bytes(compiled, "moe")["moe_act"]
    assert float(np.ravel(freed)[0]) == pytest.approx(extra)


def test_the_hf_config_sets_the_clamp() -> None:
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
           "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128, "swiglu_limit": 5.5}
    assert spec_from_hf_config(cfg, name="oss").activation_clamp == 5.5
