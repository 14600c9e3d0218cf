"""Transformer Engine's ring attention (``AttnFuncWithCPAndKVP2P``) passes K/V around the CP ring in forward and, in
backward, K/V together with their accumulated gradients: twice the bytes, beside the backward attention kernels."""

from __future__ import annotations

import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.evaluate import _checked
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model


def test_the_backward_ring_carries_kv_and_their_gradients() -> None:
    model, system = get_model("llama-3.1-8b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=32768, global_batch=8)
    layout = _checked(model, system, 8, work, TrainLayout(tp=1, cp=2, dp=4, microbatch=1, zero_stage=1))
    cost = train_cost(model, system, work, LayoutArrays.from_layouts([layout], 8))
    kind = cost.kinds["attention"]
    ops = {o.name: o for o in kind.fwd_ops + kind.bwd_ops}
    fwd, bwd = ops["attn.cp_ring"], ops["attn.cp_ring.bwd"]
    # by hand: the sequence's K and V, 32768 tokens × 8 KV heads × 128 × 2 tensors × 2 B = 128 MiB, around two ranks
    kv = 32768 * 8 * 128 * 2 * 2.0
    assert float(fwd.nbytes[0]) == kv and float(bwd.nbytes[0]) == 2 * kv
    ring = float(comm.all_gather_time(system, kv, 2, 1))
    # at 32k tokens the attention kernels outlast the ring both ways: only the overlap slowdown of its time shows
    slowdown = system.software.overlap_slowdown
    assert float(fwd.time[0]) == pytest.approx(slowdown * ring, rel=1e-12)
    assert float(bwd.time[0]) == pytest.approx(slowdown * 2 * ring, rel=1e-12)
