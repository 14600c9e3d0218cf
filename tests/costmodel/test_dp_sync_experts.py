"""Data-parallel collectives over the two groups Megatron-Core builds: dense parameters over the dp·cp ranks, expert
parameters over the expert-data-parallel ranks outside the EP group (parallel_state.py: expert order tp-ep-dp-pp).
Checked by hand against the link rates of the preset: with EP 8 filling a node, each GPU moves its experts' share
over its own NIC, where the dense share of a node spreads over all eight."""

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import multi_tensor_time
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import dp_collective, optimizer_bytes_per_param, optimizer_time
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model

H100 = get_system("dgx-h100")
QWEN = get_model("qwen3-30b-a3b")
WORK = TrainWorkload(seq_len=4096, global_batch=256, dtype="bf16", attention="flash")


def _cost(model, layout: TrainLayout):
    rows = LayoutArrays.from_layouts([layout], WORK.global_batch)
    return train_cost(model, H100, WORK, rows), rows


def test_expert_reduce_scatter_uses_one_nic_per_gpu_by_hand() -> None:
    """EP 8 inside a node, 4 nodes: experts' gradients reduce-scatter over 4 ranks one per node (each GPU's own
    NIC: (n−1)/n·S_e / NIC rate); the dense share over 32 ranks, eight per node (a ring's (n−1)/n·S_d/8 through
    each NIC)."""
    lay = TrainLayout(tp=1, pp=1, dp=32, ep=8, recompute=Recompute.FULL, zero_stage=1)
    cost, rows = _cost(QWEN, lay)
    st = cost.stages[0]
    ctx = Ctx(QWEN, H100, WORK, rows)
    g = 4.0  # fp32 gradients
    s_e, s_d = float(st.expert_params[0]) * g, float(st.params[0] - st.expert_params[0]) * g
    inter = comm.link_bandwidth(H100, "inter")
    intra = comm.link_bandwidth(H100, "intra")
    lat_i, lat_n = H100.intra_node.latency_s, H100.inter_node.latency_s
    # ring steps (NCCL tuning.cc): experts 3, all across the network; dense 31, 3 across it and 28 inside a node
    want_e = 3 / 4 * s_e / inter + comm.SIMPLE_BASE_S + 3 * lat_n
    want_d = max(31 / 32 * s_d / 8 / inter, 7 / 8 * s_d / intra) + comm.SIMPLE_BASE_S + 28 * lat_i + 3 * lat_n
    got = float(dp_collective(ctx, comm.reduce_scatter_time, st, g, rows.tp)[0])
    assert got == pytest.approx(want_e + want_d, rel=1e-6)
    # the expert share alone is far above what pooling a node's eight NICs would give
    pooled = float(comm.reduce_scatter_time(H100, np.array(s_e + s_d), np.array(32.0), np.array(1)))
    assert got > 2 * pooled


def test_dense_model_unchanged_by_the_split() -> None:
    """No experts: one collective over dp·cp ranks with stride tp, as before."""
    model = get_model("llama-3.1-8b")
    cost, rows = _cost(model, TrainLayout(tp=2, pp=1, dp=16, recompute=Recompute.SELECTIVE, zero_stage=1))
    st = cost.stages[0]
    assert float(st.expert_params[0]) == 0.0
    ctx = Ctx(model, H100, WORK, rows)
    want = comm.all_gather_time(H100, st.params * 2.0, np.array([16.0]), rows.tp)
    assert float(dp_collective(ctx, comm.all_gather_time, st, 2.0, rows.tp)[0]) == pytest.approx(float(want[0]))


def test_expert_optimizer_shards_over_expert_data_parallel_ranks() -> None:
    """ZeRO-1 with EP 8 on 32 GPUs: dense state over 32 ranks, expert state over 4 — the Adam step's HBM traffic
    follows (param_memory shards the same way)."""
    lay = TrainLayout(tp=1, pp=1, dp=32, ep=8, recompute=Recompute.FULL, zero_stage=1)
    cost, rows = _cost(QWEN, lay)
    st = cost.stages[0]
    ctx = Ctx(QWEN, H100, WORK, rows)
    local = float(st.params[0] - st.expert_params[0]) / 32 + float(st.expert_params[0]) / 4
    per = optimizer_bytes_per_param(WORK)
    buffer = float(st.params[0]) * 4.0  # zeroing the whole fp32 gradient buffer under ZeRO-1
    # both stream at the optimizer's multi-tensor bandwidth (0.72 of HBM peak measured on Hopper)
    want = multi_tensor_time(H100.gpu, np.array(local * per)) + multi_tensor_time(H100.gpu, np.array(buffer))
    assert float(optimizer_time(ctx, st)[0]) == pytest.approx(float(want), rel=1e-9)
    pooled = (multi_tensor_time(H100.gpu, np.array(float(st.params[0]) / 32 * per))
              + multi_tensor_time(H100.gpu, np.array(buffer)))
    assert float(optimizer_time(ctx, st)[0]) > 1.5 * float(pooled)


def test_folded_experts_synchronise_at_dp_1_by_hand() -> None:
    """TP 4, EP 2 with expert TP 1 on one node (PP 2, DP 1): the experts' data-parallel group still has
    tp·dp/(etp·ep) = 2 ranks (stride etp·ep = 2, one node), so their gradients are reduced although DP is 1."""
    lay = TrainLayout(tp=4, pp=2, dp=1, ep=2, etp=1, recompute=Recompute.FULL, zero_stage=1)
    cost, rows = _cost(QWEN, lay)
    st = cost.stages[0]
    assert float(rows.edp[0]) == 2.0 and float(st.expert_params[0]) > 0
    ctx = Ctx(QWEN, H100, WORK, rows)
    s_e = float(st.expert_params[0]) * 4.0
    want = 1 / 2 * s_e / comm.link_bandwidth(H100, "intra")
    assert float(dp_collective(ctx, comm.reduce_scatter_time, st, 4.0, rows.tp)[0]) == pytest.approx(want, rel=1e-3)
    assert float(cost.dp_exposed_s[0]) > 0.0


def test_expert_group_stride_follows_expert_tp_not_attention_tp() -> None:
    """TP 8 with expert TP 1 and EP 4 on two nodes (DP 2): edp = 8·2/4 = 4 ranks at stride 4, two per node — the
    ring's (n−1)/n of the share goes through two NICs per node, half each, not all of it over one."""
    lay = TrainLayout(tp=8, pp=1, dp=2, ep=4, etp=1, recompute=Recompute.FULL, zero_stage=1)
    cost, rows = _cost(QWEN, lay)
    st = cost.stages[0]
    ctx = Ctx(QWEN, H100, WORK, rows)
    s_e = float(st.expert_params[0]) * 4.0
    inter = 3 / 4 * s_e / 2 / comm.link_bandwidth(H100, "inter")  # n = 4 ranks on 2 nodes, k = 2 members each
    intra = 1 / 2 * s_e / comm.link_bandwidth(H100, "intra")
    s_d = float(st.params[0] - st.expert_params[0]) * 4.0
    dense = max(1 / 2 * s_d / comm.link_bandwidth(H100, "inter"), 0.0)  # dp 2 at stride 8: one per node
    got = float(dp_collective(ctx, comm.reduce_scatter_time, st, 4.0, rows.tp)[0])
    assert got == pytest.approx(max(inter, intra) + dense, rel=1e-2)


def test_ep_and_expert_dp_groups_follow_one_rank_order_with_cp() -> None:
    """CP 2, DP 8, EP 8 on 16 GPUs (expert TP = TP = 1): Megatron-Core folds cp into the expert-data-parallel ranks
    (expert order tp-ep-dp-pp), so the EP group is 8 contiguous ranks, one node, and the expert-DP group (2 ranks
    at stride 8) spans the two nodes; the all-to-all and the expert gradient sync read the same order."""
    lay = TrainLayout(tp=1, pp=1, dp=8, cp=2, ep=8, recompute=Recompute.FULL, zero_stage=1)
    cost, rows = _cost(QWEN, lay)
    ctx = Ctx(QWEN, H100, WORK, rows)
    assert int(np.asarray(ctx._ep_stride())[0]) == 1
    assert int(comm.members_per_node(H100, rows.ep, ctx._ep_stride())[0]) == 8
    st = cost.stages[0]
    s_e = float(st.expert_params[0]) * 4.0
    dense = float(comm.reduce_scatter_time(H100, np.array([float(st.params[0] - st.expert_params[0]) * 4.0]),
                                           np.array([16.0]), rows.tp)[0])
    expert = 1 / 2 * s_e / comm.link_bandwidth(H100, "inter")  # edp 2 at stride 8: one rank per node
    got = float(dp_collective(ctx, comm.reduce_scatter_time, st, 4.0, rows.tp)[0])
    assert got == pytest.approx(dense + expert, rel=1e-2)
