"""Sequence-parallel TP collectives overlapped with the GEMMs beside them (Transformer Engine userbuffers as NeMo
configures them on H100; nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py at 26005325), checked by hand
from the raw collective and GEMM times of one Llama-3.1-70B MLP layer at TP8."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.ops import COMM, GEMM
from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.tp_overlap import overlap_tp
from shardplan.hardware import get_system
from shardplan.models import get_model

SLOW = 0.189  # Lee et al. 2025: compute overlapped with communication runs 18.9% slower


def _ctx(method: str = "userbuffers", share: float = 0.5) -> Ctx:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"tp_overlap_method": method, "tp_comm_overlap": share})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=8, dp=1, recompute=Recompute.NONE, sequence_parallel=True)],
                                     global_batch=1)
    return Ctx(get_model("llama-3.1-70b"), base.model_copy(update={"software": sw}),
               TrainWorkload(seq_len=8192, global_batch=1), rows)


def _t(ops: list, name: str) -> float:
    return float(next(op.time[0] for op in ops if op.name == name))


def _shown(t: float, exposed: float) -> float:
    return exposed + SLOW * (t - exposed)


def test_forward_ring_exchange_all_gather_and_pipelined_reduce_scatter() -> None:
    ctx = _ctx()
    raw = L.mlp_ops(ctx)
    out = overlap_tp(ctx, "mlp", raw, backward=False)
    ag, rs = _t(raw, "mlp.tp_allgather"), _t(raw, "mlp.tp_reducescatter")
    fc1, fc2 = _t(raw, "mlp.fc1"), _t(raw, "mlp.fc2")
    # ring exchange over 8 ranks: 7 of 8 GEMM chunks run while shards arrive
    assert _t(out, "mlp.tp_allgather") == pytest.approx(_shown(ag, max(ag - fc1 * 7 / 8, 0.0)))
    # pipelined in 4 splits: at least the last split's reduce-scatter shows
    assert _t(out, "mlp.tp_reducescatter") == pytest.approx(_shown(rs, max(rs - fc2 * 3 / 4, rs / 4)))
    assert _t(out, "mlp.tp_reducescatter") >= rs / 4
    # GEMMs untouched
    assert [op.time[0] for op in out if op.kind == GEMM] == [op.time[0] for op in raw if op.kind == GEMM]


def test_backward_collectives_hide_behind_the_other_gradient_gemm() -> None:
    ctx = _ctx()
    raw = backward(ctx, L.mlp_ops(ctx))
    out = overlap_tp(ctx, "mlp", raw, backward=True)
    ag, rs = _t(raw, "mlp.tp_allgather.bwd"), _t(raw, "mlp.tp_reducescatter.bwd")
    g_after = _t(raw, "mlp.fc1.dgrad")  # the GEMM after the all-gather's mirror
    g_before = _t(raw, "mlp.fc2.wgrad")  # the GEMM before the reduce-scatter's mirror
    assert _t(out, "mlp.tp_allgather.bwd") == pytest.approx(_shown(ag, max(ag - g_after, 0.0)))
    assert _t(out, "mlp.tp_reducescatter.bwd") == pytest.approx(_shown(rs, max(rs - g_before, 0.0)))


def test_share_rule_and_blocking_collectives() -> None:
    ctx = _ctx("share", 0.5)
    raw = L.attention_ops(ctx)
    out = overlap_tp(ctx, "attention", raw, backward=False)
    ag = _t(raw, "attn.tp_allgather")
    assert _t(out, "attn.tp_allgather") == pytest.approx(_shown(ag, ag / 2))
    blocking = _ctx("userbuffers", 0.0)
    raw = L.attention_ops(blocking)
    assert [op.time[0] for op in overlap_tp(blocking, "attention", raw, backward=False)] == \
        [op.time[0] for op in raw]


def test_moe_layers_keep_the_share_rule() -> None:
    """Userbuffers cover Transformer Engine's dense layers only; other kinds keep the share rule."""
    ctx = _ctx()
    raw = L.attention_ops(ctx)
    comm = [i for i, op in enumerate(raw) if op.kind == COMM and ".tp_allgather" in op.name]
    out = overlap_tp(ctx, "moe", raw, backward=False)
    t = float(raw[comm[0]].time[0])
    assert float(out[comm[0]].time[0]) == pytest.approx(_shown(t, t * 0.5))
    assert np.isfinite([op.time[0] for op in out]).all()
