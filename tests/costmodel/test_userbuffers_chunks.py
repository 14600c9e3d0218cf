"""Transformer Engine's userbuffers run the GEMMs beside a sequence-parallel collective as chunks
(TransformerEngine@d0067d0 comm_gemm_overlap.cpp ``split_overlap_ag``: tp GEMMs of tokens/tp rows;
``split_overlap_rs``: num_splits = 4 GEMMs of out_features/4 columns), each a kernel of its own. Checked by hand
against ``gemm_time`` of one chunk's shape for Llama-3.1-70B at TP 8 on H100 (fp8 and bf16), and against the whole
GEMM where userbuffers are off or cannot run (MLA models, NVFP4)."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import gemm_time
from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.tp_overlap import overlap_tp
from shardplan.hardware import get_system
from shardplan.models import get_model

SEQ = 4096
H, HEADS, KV, D, FFN = 8192, 64, 8, 128, 28672  # Llama-3.1-70B


def _ctx(*, tp: int = 8, sp: bool = True, method: str = "userbuffers", share: float = 0.5,
         dtype: str = "bf16") -> Ctx:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"tp_overlap_method": method, "tp_comm_overlap": share})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=1, recompute=Recompute.NONE, sequence_parallel=sp)],
                                     global_batch=1)
    return Ctx(get_model("llama-3.1-70b"), base.model_copy(update={"software": sw}),
               TrainWorkload(seq_len=SEQ, global_batch=1, dtype=dtype), rows)


def _t(ops: list, name: str) -> float:
    return float(next(op.time[0] for op in ops if op.name == name))


def _by_hand(ctx: Ctx, m: float, n: float, k: float, chunks: int, dtype: str) -> float:
    """``chunks`` GEMMs of m/chunks rows, each reading the whole (k×n) weight."""
    a = 1.0 if dtype == "fp8" else 2.0
    rows = m / chunks
    nbytes = a * rows * k + a * k * n + 2.0 * rows * n
    return chunks * float(gemm_time(ctx.gpu, 2 * rows * n * k, nbytes, dtype, m=rows, n=n, k=k))


def _by_columns(ctx: Ctx, m: float, n: float, k: float, chunks: int, dtype: str) -> float:
    """``chunks`` GEMMs of n/chunks columns, each reading the whole (m×k) input and its share of the weight."""
    a = 1.0 if dtype == "fp8" else 2.0
    cols = n / chunks
    nbytes = a * m * k + a * k * cols + 2.0 * m * cols
    return chunks * float(gemm_time(ctx.gpu, 2 * m * cols * k, nbytes, dtype, m=m, n=cols, k=k))


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_forward_gemms_run_as_ring_and_pipeline_chunks(dtype: str) -> None:
    ctx = _ctx(dtype=dtype)
    attn, mlp = L.attention_ops(ctx), L.mlp_ops(ctx)
    qkv_cols = (HEADS + 2 * KV) * D / 8
    # ring exchange: 8 GEMMs of 512 rows; pipelined reduce-scatter: 4 GEMMs of 2,048 output columns
    assert _t(attn, "attn.qkv") == pytest.approx(_by_hand(ctx, SEQ, qkv_cols, H, 8, dtype), rel=1e-9)
    assert _t(mlp, "mlp.fc1") == pytest.approx(_by_hand(ctx, SEQ, 2 * FFN / 8, H, 8, dtype), rel=1e-9)
    assert _t(attn, "attn.out") == pytest.approx(_by_columns(ctx, SEQ, H, HEADS * D / 8, 4, dtype), rel=1e-9)
    assert _t(mlp, "mlp.fc2") == pytest.approx(_by_columns(ctx, SEQ, H, FFN / 8, 4, dtype), rel=1e-9)
    # each chunk pays its own launch and runs at its smaller shape's efficiency: never faster than the whole GEMM
    whole = L.attention_ops(_ctx(dtype=dtype, share=0.0))
    assert _t(attn, "attn.qkv") > _t(whole, "attn.qkv") * 1.5  # 512×1,280×8,192 chunks on a 132-SM H100


def test_backward_input_gradient_of_row_parallel_layers_runs_in_tp_chunks() -> None:
    ctx, off = _ctx(), _ctx(share=0.0)
    on_b, off_b = backward(ctx, L.mlp_ops(ctx)), backward(off, L.mlp_ops(off))
    # fc2_dgrad (ring exchange of the output gradient): 8 GEMMs of 512 rows, dX = dY·Wᵀ over inner N = hidden
    rows = SEQ / 8
    nbytes = 2.0 * (rows * H + H * FFN / 8) + 2.0 * rows * FFN / 8
    by_hand = 8 * float(gemm_time(ctx.gpu, 2 * rows * H * FFN / 8, nbytes, "bf16", m=rows, n=FFN / 8, k=H))
    assert _t(on_b, "mlp.fc2.dgrad") == pytest.approx(by_hand, rel=1e-9)
    # the column-parallel layer's gradients and every weight gradient run whole beside bulk collectives
    for name in ("mlp.fc1.dgrad", "mlp.fc1.wgrad", "mlp.fc2.wgrad"):
        assert _t(on_b, name) == pytest.approx(_t(off_b, name), rel=1e-12), name


@pytest.mark.parametrize("kw", [{"share": 0.0}, {"method": "share"}, {"sp": False}, {"tp": 1, "sp": False}])
def test_whole_gemms_where_userbuffers_are_off(kw: dict) -> None:
    """No overlap, torchtitan-style async TP ('share'), no sequence parallelism or no TP: one GEMM each."""
    ctx = _ctx(**kw)
    tp = kw.get("tp", 8)
    n = (HEADS + 2 * KV) * D / tp
    assert _t(L.attention_ops(ctx), "attn.qkv") == pytest.approx(_by_hand(ctx, SEQ, n, H, 1, "bf16"), rel=1e-9)


def test_routed_and_shared_experts_keep_whole_gemms() -> None:
    """The model prices userbuffers on the dense layers only: a MoE layer's routed experts (``is_expert``: TE runs
    no userbuffers for them) and its shared experts (Megatron builds them with the fc1/fc2 buffers; left whole, as
    the module says) run whole GEMMs (Qwen3-Next-80B-A3B: one shared expert, no MLA)."""
    base = get_system("dgx-h100")
    rows = LayoutArrays.from_layouts([TrainLayout(tp=4, dp=2, ep=2, recompute=Recompute.NONE,
                                                  sequence_parallel=True)], global_batch=2)
    model = get_model("qwen3-next-80b-a3b")
    assert model.moe is not None and model.moe.num_shared_experts > 0
    sw = base.software.model_copy(update={"tp_comm_overlap": 0.0})
    a = L.moe_ops(Ctx(model, base, TrainWorkload(seq_len=SEQ, global_batch=2), rows))
    b = L.moe_ops(Ctx(model, base.model_copy(update={"software": sw}), TrainWorkload(seq_len=SEQ, global_batch=2),
                      rows))
    names = [op.name for op in a if op.kind == "gemm"]
    assert "moe.shared.fc1" in names and "moe.experts.fc1" in names
    for op, ref in zip(a, b, strict=True):
        if op.kind == "gemm":
            assert float(op.time[0]) == pytest.approx(float(ref.time[0]), rel=1e-12), op.name


@pytest.mark.parametrize(("model", "dtype"), [("deepseek-v3", "fp8"), ("llama-3.1-70b", "fp4")])
def test_no_userbuffers_under_mla_or_nvfp4_so_the_collectives_block(model: str, dtype: str) -> None:
    """Megatron-Core turns TP comm overlap off once it builds an MLA projection (buffer names other than
    qkv/proj/fc1/fc2), and TE's userbuffers take no NVFP4 tensor: whole GEMMs, and each SP collective shows whole."""
    base = get_system("dgx-b200" if dtype == "fp4" else "dgx-h100")
    rows = LayoutArrays.from_layouts([TrainLayout(tp=4, dp=1, recompute=Recompute.NONE, sequence_parallel=True)],
                                     global_batch=1)
    work = TrainWorkload(seq_len=SEQ, global_batch=1, dtype=dtype)
    ctx = Ctx(get_model(model), base, work, rows)
    off = Ctx(get_model(model), base.model_copy(update={"software": base.software.model_copy(
        update={"tp_comm_overlap": 0.0})}), work, rows)
    for kind, build in (("attention", L.attention_ops), ("mlp", L.mlp_ops)):
        raw, ref = build(ctx), build(off)
        shown = overlap_tp(ctx, kind, raw, backward=False)
        assert [float(o.time[0]) for o in shown] == pytest.approx([float(o.time[0]) for o in ref], rel=1e-12)
        assert any(o.kind == "comm" and float(o.time[0]) > 0 for o in shown)


def test_ring_exchange_reduce_scatter_runs_tp_row_chunks_and_shows_its_last() -> None:
    """Megatron-Bridge's fp8 configurations reduce-scatter proj/FC2 by ring exchange (``tp_overlap_rs``): 8 GEMMs of
    512 rows each reading the whole weight (CommOverlapP2PBase::split_overlap_rs), then the reduce kernel exposed."""
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"tp_overlap_rs": "ring_exchange"})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=8, dp=1, recompute=Recompute.NONE, sequence_parallel=True)],
                                     global_batch=1)
    ctx = Ctx(get_model("llama-3.1-70b"), base.model_copy(update={"software": sw}),
              TrainWorkload(seq_len=SEQ, global_batch=1, dtype="fp8"), rows)
    raw = L.mlp_ops(ctx)
    fc2 = _t(raw, "mlp.fc2")
    assert fc2 == pytest.approx(_by_hand(ctx, SEQ, H, FFN / 8, 8, "fp8"), rel=1e-9)
    rs = _t(raw, "mlp.tp_reducescatter")
    exposed = max(rs - fc2 * 7 / 8, 0.0)
    # then one kernel reduces the 8 received partial sums: reads the bf16 [4096, 8192] activation, writes its 1/8
    reduce = float(ctx.mem_time(np.asarray(SEQ * H * 2.0 * (1 + 1 / 8))))
    assert _t(overlap_tp(ctx, "mlp", raw, backward=False), "mlp.tp_reducescatter") == pytest.approx(
        exposed + 0.189 * (rs - exposed) + reduce)


def test_megatron_bridge_fp8_records_reduce_scatter_by_ring_exchange() -> None:
    from shardplan.validation.optimum import load_records_tuned
    from shardplan.validation.stacks import stack_software

    bridge = [r for r in load_records_tuned() if "Megatron-Bridge" in str(r["source"].get("container_or_version"))]
    fp8 = [r for r in bridge if r["precision"] == "fp8"]
    bf16 = [r for r in bridge if r["precision"] == "bf16"]
    assert fp8 and bf16
    assert all(stack_software(r)["tp_overlap_rs"] == "ring_exchange" for r in fp8)
    assert all("tp_overlap_rs" not in stack_software(r) for r in bf16)  # TE's default: the pipelined one
