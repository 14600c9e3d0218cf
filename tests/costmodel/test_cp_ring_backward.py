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
    ring = float(comm.p2p_time(system, kv / 2, False))  # one step: each rank's half to the other, over NVLink
    # at 32k tokens the attention kernels outlast the ring both ways: only the overlap slowdown of its time shows
    slowdown = system.software.overlap_slowdown
    assert float(fwd.time[0]) == pytest.approx(slowdown * ring, rel=1e-12)
    assert float(bwd.time[0]) == pytest.approx(slowdown * 2 * ring, rel=1e-12)


def test_a_ring_across_nodes_waits_for_its_boundary_nic() -> None:
    """TP 2, CP 8 on two nodes: the ring's 7 steps each send one rank's K/V chunk to the next rank, and the step
    that crosses a node goes over the sending GPU's own NIC (send/recv, not a collective spread over the node's
    NICs): 7 network sends of kv/8, against a kernel of about the same length, so part of it shows."""
    model, system = get_model("llama-3.1-8b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=32768, global_batch=8)
    layout = _checked(model, system, 16, work, TrainLayout(tp=2, cp=8, dp=1, microbatch=1, zero_stage=1))
    cost = train_cost(model, system, work, LayoutArrays.from_layouts([layout], 8))
    ops = {o.name: o for o in cost.kinds["attention"].fwd_ops}
    kv = 32768 * 4 * 128 * 2 * 2.0  # 4 K/V heads per TP rank
    ring = 7 * float(comm.p2p_time(system, kv / 8, True))
    assert ring == pytest.approx(7 * (comm.SIMPLE_BASE_S + system.inter_node.latency_s
                                      + kv / 8 / comm.link_bandwidth(system, "inter")), rel=1e-9)
    flash = float(ops["attn.flash"].time[0])
    want = float(comm.with_overlap_cost(system, ring, max(ring - flash * 7 / 8, 0.0)))
    assert float(ops["attn.cp_ring"].time[0]) == pytest.approx(want, rel=1e-12)
    # an all-gather would have spread the crossing over the node's four CP ranks' NICs and hidden behind the kernel
    spread = float(comm.all_gather_time(system, kv, 8, 2))
    assert spread < flash * 7 / 8 < ring
