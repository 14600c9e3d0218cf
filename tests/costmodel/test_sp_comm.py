"""The sequence-parallel collectives around a TP region (``training.sp_comm``), against Transformer Engine v2.7's
layers read by hand (layernorm_linear.py l.226-258 and l.390-392/640-665, linear.py l.1614-1637, quantizer.cpp
l.524-530): under fp8 the input is quantized before it is gathered (1 B an element, MXFP8 with a scale per 32), under
current scaling after an amax all-reduce over the TP group; the backward reduce-scatters the 16-bit input gradient,
gathers the saved input shard again for the weight gradient beside the data-gradient GEMM, and gathers the output
gradient (quantized, its amax reduced) before the row-parallel data gradient."""

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layers import attention_ops
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.tp_overlap import overlap_tp
from shardplan.hardware import get_system
from shardplan.models import get_model

SEQ, TP = 8192, 4


def _ctx(dtype: str, scaling: str = "current", regather: bool = True, tp_overlap: float = 0.5) -> Ctx:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"fp8_scaling": scaling, "sp_input_regather": regather,
                                          "tp_comm_overlap": tp_overlap})
    system = base.model_copy(update={"software": sw})
    work = TrainWorkload(seq_len=SEQ, global_batch=8, dtype=dtype)
    lay = TrainLayout(tp=TP, dp=2, microbatch=1, sequence_parallel=True)
    return Ctx(get_model("llama-3.1-70b"), system, work, LayoutArrays.from_layouts([lay], 8))


def _named(ops: list, suffix: str) -> list:
    return [op for op in ops if op.name.endswith(suffix)]


@pytest.mark.parametrize(("dtype", "scaling", "per_element", "grad_out", "amax"), [
    ("bf16", "current", 2.0, 2.0, False),
    ("fp8", "current", 1.0, 1.0, True),
    ("fp8", "delayed", 1.0, 1.0, False),
    ("fp8", "mxfp8", 1.0 + 1 / 32, 2 * (1.0 + 1 / 32), False),  # the output gradient's row- and column-wise copies
])
def test_the_gathered_input_and_output_gradient_move_the_recipes_bytes(dtype: str, scaling: str, per_element: float,
                                                                       grad_out: float, amax: bool) -> None:
    """Llama-3.1-70B at 8,192 tokens, TP 4: the attention block gathers 8,192 × 8,192 elements forward (and again
    backward for the weight gradient), reduce-scatters the 16-bit input gradient, gathers the output gradient."""
    ctx = _ctx(dtype, scaling)
    fwd = attention_ops(ctx)
    bwd = backward(ctx, fwd)
    elements = SEQ * 8192
    assert float(_named(fwd, "attn.tp_allgather")[0].nbytes[0]) == pytest.approx(elements * per_element)
    assert float(_named(bwd, "attn.tp_allgather.bwd")[0].nbytes[0]) == pytest.approx(elements * 2.0)  # dX, 16 bit
    assert float(_named(bwd, "attn.tp_regather.bwd")[0].nbytes[0]) == pytest.approx(elements * per_element)
    assert float(_named(fwd, "attn.tp_reducescatter")[0].nbytes[0]) == pytest.approx(elements * 2.0)
    assert float(_named(bwd, "attn.tp_reducescatter.bwd")[0].nbytes[0]) == pytest.approx(elements * grad_out)
    assert float(_named(fwd, "attn.tp_regather")[0].time[0]) == 0.0  # nothing forward
    amax_ops = _named(fwd, "attn.tp_amax_allreduce")
    assert len(amax_ops) == (2 if amax else 0)  # the input's (forward), the output gradient's (backward)
    if amax:
        one = float(comm.all_reduce_time(ctx.system, np.array([4.0]), np.array([TP]), np.array([1]))[0])
        assert 5e-6 < one < 50e-6  # an NCCL all-reduce of one float inside a node: latency alone
        fwd_t = [float(op.time[0]) for op in amax_ops]
        bwd_t = [float(op.time[0]) for op in _named(bwd, "attn.tp_amax_allreduce.bwd")]
        assert fwd_t == pytest.approx([one, 0.0]) and bwd_t == pytest.approx([0.0, one])


def test_the_regather_hides_behind_the_data_gradient_gemm() -> None:
    """Whatever the overlap settings, the re-gather shows only where it outlasts the QKV data-gradient GEMM, plus
    the compute its hidden part slows (``overlap_slowdown``): here the GEMM is longer, so 0.189 of it shows."""
    for overlap in (0.0, 0.5):
        ctx = _ctx("bf16", tp_overlap=overlap)
        raw = backward(ctx, attention_ops(ctx))
        t = float(_named(raw, "attn.tp_regather.bwd")[0].time[0])
        dgrad = float(_named(raw, "attn.qkv.dgrad")[0].time[0])
        shown = float(_named(overlap_tp(ctx, "attention", raw, backward=True), "attn.tp_regather.bwd")[0].time[0])
        assert dgrad > t > 0
        assert shown == pytest.approx(ctx.system.software.overlap_slowdown * t)


def test_pytorch_sequence_parallelism_saves_the_gathered_input() -> None:
    """DTensor's colwise linear keeps the gathered input for its weight gradient: no re-gather."""
    ctx = _ctx("bf16", regather=False)
    assert not _named(attention_ops(ctx), "attn.tp_regather")


def test_layers_outside_the_recipe_gather_sixteen_bits() -> None:
    """The LM head runs outside the fp8 recipe: its input gathered in 16 bit, no amax all-reduce."""
    from shardplan.costmodel.training.layers import head_ops

    ops = head_ops(_ctx("fp8"))
    assert float(_named(ops, "head.tp_allgather")[0].nbytes[0]) == pytest.approx(SEQ * 8192 * 2.0)
    assert not _named(ops, "head.tp_amax_allreduce")


def test_pytorch_sequence_parallelism_keeps_the_gathered_input_in_memory() -> None:
    """Where the input is not gathered again (``sp_input_regather`` off) the saved QKV and FC1 inputs are whole, not
    the local shard: the attention and MLP layers each hold T·h·2·(1 − 1/tp) more bytes."""
    from shardplan.costmodel.training.memory import layer_activations

    on, off = _ctx("bf16"), _ctx("bf16", regather=False)
    extra = SEQ * 8192 * 2.0 * (1 - 1 / TP)
    for kind in ("attention", "mlp"):
        assert float(layer_activations(off, kind).none[0] - layer_activations(on, kind).none[0]) == \
            pytest.approx(extra)


def test_mla_gathers_its_latents_and_runs_its_down_projections_on_the_local_shard() -> None:
    """DeepSeek-V3 at TP 2 with SP (Megatron-Core multi_latent_attention.py@d98e8a6): the replicated down projections
    run on the rank's 4,096 of 8,192 tokens, the up projections gather the latents (q 1,536, kv 512) and the rotary
    key (64) is gathered on its own; nothing gathers the 7,168-wide hidden state. Without SP the down projections
    run on all 8,192 tokens on every rank."""
    base = get_system("dgx-h100")
    work = TrainWorkload(seq_len=SEQ, global_batch=8, dtype="bf16")

    def ops(sp: bool) -> list:
        lay = TrainLayout(tp=2, dp=4, microbatch=1, sequence_parallel=sp)
        return attention_ops(Ctx(get_model("deepseek-v3"), base, work, LayoutArrays.from_layouts([lay], 8)))

    sp, plain = ops(True), ops(False)
    q_down = _named(sp, "attn.q_down")[0]
    assert float(q_down.flops[0]) == pytest.approx(2.0 * (SEQ / 2) * 7168 * 1536)
    assert float(_named(plain, "attn.q_down")[0].flops[0]) == pytest.approx(2.0 * SEQ * 7168 * 1536)
    gathered = {op.name: float(op.nbytes[0]) for op in sp if op.name.endswith(".tp_allgather")}
    assert gathered == pytest.approx({"attn.q_up.tp_allgather": SEQ * 1536 * 2.0,
                                      "attn.k_pe.tp_allgather": SEQ * 64 * 2.0,
                                      "attn.kv_up.tp_allgather": SEQ * 512 * 2.0})
    regathered = sorted(op.name for op in sp if op.name.endswith(".tp_regather"))
    assert regathered == ["attn.kv_up.tp_regather", "attn.q_up.tp_regather"]  # the rotary key is not a linear input


def test_mla_before_megatron_core_0_14_and_under_dtensor_gathers_the_hidden_state() -> None:
    """``mla_local_down`` off (Megatron-LM 7094270c6f's column-parallel down projections, which DGX Cloud's v25.05.05
    DeepSeek-V3 runs pin; PyTorch DTensor TP): the 7,168-wide hidden state is gathered and the down projections run on
    all 8,192 tokens; no latent is gathered."""
    from shardplan.validation.optimum import parse_run, tuned_record

    run = parse_run(tuned_record("dgxc-v25.05.05-deepseek-v3-512gpu-h100-bf16"))
    assert not run.system.software.mla_local_down
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"mla_local_down": False})})
    work = TrainWorkload(seq_len=SEQ, global_batch=8, dtype="bf16")
    lay = TrainLayout(tp=2, dp=4, microbatch=1, sequence_parallel=True)
    ops = attention_ops(Ctx(get_model("deepseek-v3"), system, work, LayoutArrays.from_layouts([lay], 8)))
    gathered = {op.name: float(op.nbytes[0]) for op in ops if op.name.endswith(".tp_allgather")}
    assert gathered == pytest.approx({"attn.tp_allgather": SEQ * 7168 * 2.0})
    assert float(_named(ops, "attn.q_down")[0].flops[0]) == pytest.approx(2.0 * SEQ * 7168 * 1536)
