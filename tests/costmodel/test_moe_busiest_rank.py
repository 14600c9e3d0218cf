"""MoE training as the busiest EP rank runs it (random routing: balls into bins, checked against a brute-force
simulation of random router logits) and the host synchronisation of dropless dispatch (hand counts)."""

import math

import numpy as np
import pytest

from shardplan.costmodel.core.operators import ep_imbalance
from shardplan.costmodel.training.layers import HOST_SYNC_LAUNCHES
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model

QWEN = get_model("qwen3-30b-a3b")  # 48 MoE layers, 128 experts, top-8
WORK = TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16", attention="flash")
EP8 = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=Recompute.NONE, zero_stage=1)


def _cost(layout: TrainLayout, work: TrainWorkload = WORK, **software):
    system = get_system("dgx-h100")
    system = system.model_copy(update={"software": system.software.model_copy(update=software)})
    return train_cost(QWEN, system, work, LayoutArrays.from_layouts([layout], work.global_batch)), system


@pytest.mark.parametrize(("experts", "k", "ep", "tokens"), [(128, 8, 8, 256), (64, 6, 16, 128), (32, 4, 4, 256)])
def test_busiest_rank_bounds_a_simulation_of_random_logits(experts: int, k: int, ep: int, tokens: int) -> None:
    """Megatron's forced balancing draws normal router logits per token and takes the top k: simulated, the busiest
    of ``ep`` ranks (experts in contiguous blocks) carries more than the mean, and the balls-into-bins maximum
    μ + √(2 μ ln ep) bounds it from above within a factor 2 of the excess."""
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(200):
        top = np.argpartition(rng.standard_normal((ep * tokens, experts)), -k, axis=1)[:, -k:]
        load = np.bincount((top // (experts // ep)).ravel(), minlength=ep)
        ratios.append(load.max() / load.mean())
    simulated = float(np.mean(ratios)) - 1.0
    bound = float(ep_imbalance(ep, tokens * k)) - 1.0
    assert bound == pytest.approx(math.sqrt(2 * math.log(ep) / (tokens * k)), rel=1e-12)
    assert 0.5 * bound < simulated < bound


def test_expert_kernels_and_all_to_alls_wait_for_the_busiest_rank() -> None:
    """EP 8, one 4096-token sequence per GPU, top-8: 32,768 copies per rank on average; the busiest carries
    1 + √(2 ln 8 / 32768) of them. Expert GEMMs, the expert activation and both all-to-alls take that much longer
    than the same layer with EP 1 pricing (no other rank to wait for); the router and the norm do not."""
    busy = 1.0 + math.sqrt(2 * math.log(8) / 32768)
    cost, _ = _cost(EP8)
    flat, _ = _cost(TrainLayout(tp=1, pp=1, dp=8, ep=1, recompute=Recompute.NONE, zero_stage=1))
    ops = {op.name: op for op in cost.kinds["moe"].fwd_ops}
    base = {op.name: op for op in flat.kinds["moe"].fwd_ops}
    # local experts differ (16 vs 128): compare per expert through the unscaled FLOPs, and the same-shape ops
    for name in ("moe.experts.act", "moe.norm", "moe.router"):
        want = busy if name.startswith("moe.experts") else 1.0
        assert float(ops[name].time[0]) == pytest.approx(float(base[name].time[0]) * want, rel=1e-9)
    assert float(ops["moe.experts.fc1"].flops[0]) == pytest.approx(float(base["moe.experts.fc1"].flops[0]), rel=1e-12)
    from shardplan.costmodel.core import comm

    system = get_system("dgx-h100")
    plain = comm.all_to_all_time(system, np.array([32768 * QWEN.hidden_size * 2.0]), np.array([8.0]), np.array([1]))
    assert float(ops["moe.ep_dispatch"].time[0]) == pytest.approx(float(plain[0]) * busy, rel=1e-9)


def test_dropless_dispatch_syncs_the_host_once_per_moe_forward() -> None:
    """One host synchronisation per MoE layer forward (none in the backward, which reuses the counts): PP 1, 8
    microbatches, 48 MoE layers, no recompute: the step grows by 48 · 8 · 2 launch latencies."""
    on, system = _cost(EP8)
    off, _ = _cost(EP8, moe_host_sync=False)
    syncs = {op.name for op in on.kinds["moe"].fwd_ops} - {op.name for op in off.kinds["moe"].fwd_ops}
    assert syncs == {"moe.host_sync"}
    assert not [op for op in on.kinds["moe"].bwd_ops if "host_sync" in op.name]
    wait = HOST_SYNC_LAUNCHES * system.gpu.kernel_launch_s
    assert float(on.step_time_s[0] - off.step_time_s[0]) == pytest.approx(48 * 8 * wait, rel=1e-6)


def test_recomputing_the_moe_layer_syncs_again_and_drop_and_pad_never_syncs() -> None:
    """Full recompute reruns every MoE forward, and with it the synchronisation: twice the waits of no recompute.
    Without EP the counts still go to the host (the grouped GEMM's per-expert splits); with a capacity factor the
    tokens are dropped and padded to a fixed capacity and nothing is sized on the host."""
    full = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=Recompute.FULL, zero_stage=1)
    on, system = _cost(full)
    off, _ = _cost(full, moe_host_sync=False)
    wait = HOST_SYNC_LAUNCHES * system.gpu.kernel_launch_s
    assert float(on.step_time_s[0] - off.step_time_s[0]) == pytest.approx(2 * 48 * 8 * wait, rel=1e-6)
    ep1 = TrainLayout(tp=1, pp=1, dp=8, ep=1, recompute=Recompute.NONE, zero_stage=1)
    a, _ = _cost(ep1)
    b, _ = _cost(ep1, moe_host_sync=False)
    assert float(a.step_time_s[0] - b.step_time_s[0]) == pytest.approx(48 * 8 * wait, rel=1e-6)
    padded = QWEN.model_copy(update={"moe": QWEN.moe.model_copy(update={"capacity_factor": 1.25})})
    rows = LayoutArrays.from_layouts([EP8], WORK.global_batch)
    ops = train_cost(padded, system, WORK, rows).kinds["moe"].fwd_ops
    assert not [op for op in ops if op.name == "moe.host_sync"]
