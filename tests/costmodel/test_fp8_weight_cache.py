"""Transformer Engine's quantized weight copies kept across a step's microbatches (``SoftwareSpec.fp8_weight_cache``):
Megatron-Core passes ``is_first_microbatch`` to its TE layers (extensions/transformer_engine.py@d98e8a6 TELinear,
TEGroupedLinear, unless ``disable_parameter_transpose_cache``) and TE keeps the quantized weight in
``_fp8_workspaces`` (module/linear.py, grouped_linear.py at d0067d0). With 16-bit primary weights that copy sits
beside them: on Hopper a row-wise and a transposed fp8 copy, 2 B per weight; with fp8 primary weights it is the
weight itself. Hand counts of Llama 3.1 8B's layer parameters (config.json: hidden 4096, 32 layers, 32 heads, 8 KV
heads, FFN 14336, vocabulary 128256)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layers import mlp_ops
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.spec import SystemSpec
from shardplan.models import get_model

H, L, FFN, KV = 4096, 32, 14336, 1024
# per layer: QKV, output projection, gate/up and down, two RMSNorm weights
LAYER = H * (H + 2 * KV) + H * H + 3 * H * FFN + 2 * H
LAYOUT = TrainLayout(tp=1, pp=1, dp=8, microbatch=1, recompute=Recompute.FULL, zero_stage=1)
WORK = TrainWorkload(seq_len=4096, global_batch=64, dtype="fp8")


def _system(name: str = "dgx-h100", **software: object) -> SystemSpec:
    system = get_system(name)
    return system.model_copy(update={"software": system.software.model_copy(update=software)})


def _weights(system: SystemSpec, work: TrainWorkload = WORK, layout: TrainLayout = LAYOUT) -> float:
    report = estimate_training(get_model("llama-3.1-8b"), system, 8, work, layout)
    return report.memory.weights_bytes


@pytest.mark.parametrize(("gpu", "scaling", "per_weight"), [
    ("dgx-h100", "current", 2.0),  # Hopper: FP8 GEMMs in TN layout only, a transposed copy beside the row-wise one
    ("dgx-h100", "delayed", 2.0),
    ("dgx-b200", "current", 1.0),  # Blackwell: per-tensor FP8 GEMMs take any layout, one copy
    ("dgx-b200", "mxfp8", 2.0 + 2 / 32),  # MXFP8: row- and column-wise copies, an e8m0 scale per 32 each
])
def test_copies_beside_or_in_place_of_sixteen_bit_weights(gpu: str, scaling: str, per_weight: float) -> None:
    """Against bf16 training (every weight 2 B): without fp8 primary weights every layer weight gains its quantized
    copies; with them (ZeRO 1) the copies replace its 16 bits. The embedding and the LM head (outside the recipe) stay
    16-bit either way."""
    bf16 = _weights(_system(gpu), TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16"))
    kept = _weights(_system(gpu, fp8_param_gather=False, fp8_scaling=scaling))
    primary = _weights(_system(gpu, fp8_param_gather=True, fp8_scaling=scaling))
    assert kept - bf16 == pytest.approx(per_weight * L * LAYER, rel=1e-9)
    assert primary - bf16 == pytest.approx((per_weight - 2.0) * L * LAYER, rel=1e-9, abs=1.0)


def test_no_cache_without_it_or_outside_fp8() -> None:
    """A stack that casts the weight in every microbatch keeps nothing; bf16 training has nothing to keep."""
    base = _weights(_system(fp8_param_gather=True))
    assert _weights(_system(fp8_param_gather=False, fp8_weight_cache=False)) == pytest.approx(base, rel=1e-12)
    bf16 = TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16")
    assert _weights(_system(fp8_param_gather=False), bf16) == pytest.approx(_weights(_system(), bf16), rel=1e-12)


def test_fp8_primary_weights_need_the_distributed_optimizer() -> None:
    """Megatron runs --fp8-param-gather only with the distributed optimizer or Megatron-FSDP (arguments.py l.1095-1097
    at d98e8a6): at ZeRO 0 the weights stay 16-bit and the copies are cached beside them, 2 B per layer weight on
    Hopper; ZeRO 0 holds whole weights, so the weights' own bytes are those of ZeRO 1."""
    zero0 = dataclasses.replace(LAYOUT, zero_stage=0)
    assert _weights(_system(fp8_param_gather=True), layout=zero0) - _weights(_system(fp8_param_gather=True)) \
        == pytest.approx(2.0 * L * LAYER, rel=1e-9)


def test_stacks_without_it() -> None:
    """torchtitan (torchao's Float8Linear) and PyTorch FSDP keep no quantized copy; Megatron keeps it."""
    system = _system(fp8_param_gather=False)
    assert framework_system(system, "torchtitan").software.fp8_weight_cache is False
    assert framework_system(system, "fsdp").software.fp8_weight_cache is False
    assert framework_system(system, "megatron").software.fp8_weight_cache is True


def test_weight_cast_per_microbatch_without_the_cache() -> None:
    """FC1's cast kernel reads the 16-bit input and weight twice (current scaling) and writes both fp8 copies (Hopper):
    6 B per element; the weight's part is paid once a step with the cache (÷ 8 microbatches here), in every
    microbatch without it."""
    rows = LayoutArrays.from_layouts([LAYOUT], global_batch=64)
    tokens = 4096

    def fc1_cast(system: SystemSpec) -> float:
        ctx = Ctx(get_model("llama-3.1-8b"), system, WORK, rows)
        [op] = [o for o in mlp_ops(ctx) if o.name == "mlp.fc1.fp8_cast"]
        return float(np.asarray(op.nbytes)[0])

    weight = H * 2 * FFN  # gate and up, one GEMM
    assert fc1_cast(_system()) == pytest.approx(6.0 * (tokens * H + weight / 8), rel=1e-12)
    assert fc1_cast(_system(fp8_weight_cache=False)) == pytest.approx(6.0 * (tokens * H + weight), rel=1e-12)


@pytest.mark.parametrize(("gpu", "scaling", "per_element"), [
    ("dgx-b200", "current", 4.0 + 1.0),  # two reads (amax, cast), one copy: per-tensor FP8 GEMMs take any layout
    ("dgx-b200", "mxfp8", 2.0 + 2 * (1.0 + 1 / 32)),  # one read, row- and column-wise copies with their scales
])
def test_weight_cast_on_blackwell(gpu: str, scaling: str, per_element: float) -> None:
    """The same FC1 cast on a B200: current scaling writes one copy, MXFP8 two with an e8m0 scale per 32 each."""
    rows = LayoutArrays.from_layouts([LAYOUT], global_batch=64)
    ctx = Ctx(get_model("llama-3.1-8b"), _system(gpu, fp8_scaling=scaling), WORK, rows)
    [op] = [o for o in mlp_ops(ctx) if o.name == "mlp.fc1.fp8_cast"]
    assert float(np.asarray(op.nbytes)[0]) == pytest.approx(per_element * (4096 * H + H * 2 * FFN / 8), rel=1e-12)


def test_layer_rows_add_up_to_the_stages_with_mtp() -> None:
    """One truth: each stage's weights in the per-layer table (count × per-layer bytes) are the stage table's, the
    cache included, with MTP on the last stage (whose own embedding copy keeps no quantized copy); also for fp8
    primary weights on a B200 (1 B a layer weight) with 40% of the weights offloaded."""
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype="fp8", mtp_layers=1)
    layout = TrainLayout(tp=1, pp=2, dp=8, ep=8, microbatch=1, recompute=Recompute.FULL, zero_stage=1)
    offloaded = dataclasses.replace(layout, offload_weights=0.4)
    for system, lay in ((_system(fp8_param_gather=False), layout), (_system("dgx-b200"), offloaded)):
        report = estimate_training(get_model("qwen3-30b-a3b"), system, 16, work, lay)
        for stage in report.stages:
            rows = [r for r in report.layers if r.stage == stage.stage]
            assert sum(r.count * r.weights_bytes for r in rows) == pytest.approx(stage.weights_bytes, rel=1e-9)
    report = estimate_training(get_model("qwen3-30b-a3b"), _system(fp8_param_gather=False), 16, work, layout)
    [head] = [r for r in report.layers if r.kind == "head+mtp"]
    cold = estimate_training(get_model("qwen3-30b-a3b"), _system(fp8_param_gather=False, fp8_weight_cache=False), 16,
                             work, layout)
    [head_cold] = [r for r in cold.layers if r.kind == "head+mtp"]
    model = get_model("qwen3-30b-a3b")  # untied: the LM head, the final norm, and the last stage's embedding copy
    lm_head = embedding = model.vocab_size * model.hidden_size  # for the MTP lookup keep no quantized copy
    assert head.weights_bytes - head_cold.weights_bytes == pytest.approx(
        2.0 * (head.params - lm_head - embedding - model.hidden_size), rel=1e-12)


@pytest.mark.parametrize(("layout", "work"), [
    (LAYOUT, WORK),  # fp8 primary weights on a B200: 1 B a layer weight
    # ZeRO 3 under PP (FSDP2) keeps whole weights gathered beside their shards, which offload cannot move
    (TrainLayout(tp=1, pp=2, dp=4, microbatch=1, recompute=Recompute.FULL, zero_stage=3),
     TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16")),
])
def test_an_offloaded_share_frees_that_share_of_what_offload_can_move(layout: TrainLayout,
                                                                     work: TrainWorkload) -> None:
    """The offload fill reads a share's saving as that share of ``weights_on_gpu_if_kept``: offloading half the
    weights frees exactly half of it, fp8 primary weights' difference from 16 bits included, ZeRO-3-under-PP's
    gathered weights left out."""
    from shardplan.costmodel.training.step import train_cost

    layouts = [dataclasses.replace(layout, offload_weights=f) for f in (0.0, 0.5)]
    rows = LayoutArrays.from_layouts(layouts, global_batch=64)
    cost = train_cost(get_model("llama-3.1-8b"), _system("dgx-b200", fp8_param_gather=True), work, rows)
    st = cost.stages[0]
    assert float(st.weights[0] - st.weights[1]) == pytest.approx(0.5 * float(st.weights_on_gpu_if_kept[0]), rel=1e-12)
