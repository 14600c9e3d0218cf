"""MoE training as the busiest EP rank runs it (random routing: balls into bins, checked against a brute-force
simulation of random router logits) and the host synchronisation of dropless dispatch (hand counts)."""

import math

import numpy as np
import pytest

from shardplan.costmodel.core.routing import ep_imbalance
from shardplan.costmodel.training.layers import MOE_SYNC_IDLE_S
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
    microbatches, 48 MoE layers, no recompute: the step grows by 48 · 8 waits of 616 µs (the GPU idle per
    synchronisation NVIDIA profiled: 1.893 s over 48 × 64 of them)."""
    on, _ = _cost(EP8)
    off, _ = _cost(EP8, moe_host_sync=False)
    syncs = {op.name for op in on.kinds["moe"].fwd_ops} - {op.name for op in off.kinds["moe"].fwd_ops}
    assert syncs == {"moe.host_sync"}
    assert not [op for op in on.kinds["moe"].bwd_ops if "host_sync" in op.name]
    assert round(MOE_SYNC_IDLE_S * 1e6) == 616  # (24.7138 − 22.821) s / 3,072 by hand
    assert float(on.step_time_s[0] - off.step_time_s[0]) == pytest.approx(48 * 8 * MOE_SYNC_IDLE_S, rel=1e-6)


def test_recomputing_the_moe_layer_syncs_again_and_drop_and_pad_never_syncs() -> None:
    """Full recompute reruns every MoE forward, and with it the synchronisation: twice the waits of no recompute.
    Without EP the counts still go to the host (the grouped GEMM's per-expert splits); with a capacity factor the
    tokens are dropped and padded to a fixed capacity and nothing is sized on the host."""
    full = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=Recompute.FULL, zero_stage=1)
    on, system = _cost(full)
    off, _ = _cost(full, moe_host_sync=False)
    wait = MOE_SYNC_IDLE_S
    assert float(on.step_time_s[0] - off.step_time_s[0]) == pytest.approx(2 * 48 * 8 * wait, rel=1e-6)
    ep1 = TrainLayout(tp=1, pp=1, dp=8, ep=1, recompute=Recompute.NONE, zero_stage=1)
    a, _ = _cost(ep1)
    b, _ = _cost(ep1, moe_host_sync=False)
    assert float(a.step_time_s[0] - b.step_time_s[0]) == pytest.approx(48 * 8 * wait, rel=1e-6)
    padded = QWEN.model_copy(update={"moe": QWEN.moe.model_copy(update={"capacity_factor": 1.25})})
    rows = LayoutArrays.from_layouts([EP8], WORK.global_batch)
    ops = train_cost(padded, system, WORK, rows).kinds["moe"].fwd_ops
    assert not [op for op in ops if op.name == "moe.host_sync"]


def test_router_stays_in_16_bit_under_fp8() -> None:
    """Megatron's router is a bf16 GEMM with fp32 logits outside the fp8 recipe: under fp8 it has no cast kernel and
    runs at the bf16 rate; T·h·2 + h·E·2 + T·E·4 bytes (T = 4096 tokens, h = 2048, E = 128)."""
    from shardplan.costmodel.core.kernels import gemm_time

    fp8 = TrainWorkload(seq_len=4096, global_batch=64, dtype="fp8", attention="flash")
    cost, system = _cost(EP8, fp8)
    ops = {op.name: op for op in cost.kinds["moe"].fwd_ops}
    assert "moe.router.fp8_cast" not in ops and "moe.experts.fc1.fp8_cast" in ops
    t, h, e = 4096.0, 2048.0, 128.0
    nbytes = t * h * 2 + h * e * 2 + t * e * 4
    flops = 2 * t * h * e
    assert float(ops["moe.router"].nbytes[0]) == pytest.approx(nbytes, rel=1e-12)
    want = gemm_time(system.gpu, np.array([flops]), np.array([nbytes]), "bf16", m=t, n=e)
    assert float(ops["moe.router"].time[0]) == pytest.approx(float(want[0]), rel=1e-12)


def test_fp8_alltoall_experts_pad_and_unpad_with_a_copy_each() -> None:
    """Under fp8 with the alltoall dispatcher the grouped MLP copies its 32,768 routed tokens (h 2048, bf16) into a
    padded buffer (with their fp32 probabilities) and copies FC2's output back: 2·32768·2048·2 + 32768·8 and
    2·32768·2048·2 bytes for the mean rank, times the busiest rank's share. HybridEP pads inside its dispatch, the
    router's padding (moe_router_padding_for_quantization) and drop-and-pad make the counts aligned: no copies."""
    fp8 = TrainWorkload(seq_len=4096, global_batch=64, dtype="fp8", attention="flash")
    busy = 1.0 + math.sqrt(2 * math.log(8) / 32768)
    cost, _ = _cost(EP8, fp8)
    ops = {op.name: op for op in cost.kinds["moe"].fwd_ops}
    copy = 2 * 32768 * 2048 * 2.0
    assert float(ops["moe.experts.pad"].nbytes[0]) == pytest.approx((copy + 32768 * 8) * busy, rel=1e-12)
    assert float(ops["moe.experts.unpad"].nbytes[0]) == pytest.approx(copy * busy, rel=1e-12)
    names = [op.name for op in cost.kinds["moe"].fwd_ops]
    assert names.index("moe.experts.pad") + 1 == names.index("moe.experts.fc1")
    assert names.index("moe.experts.unpad") < names.index("moe.ep_combine")
    for software in ({"ep_dispatcher": "deepep"}, {"moe_router_padding": True}, {"moe_drop_and_pad": True}):
        other, _ = _cost(EP8, fp8, **software)
        assert not [op for op in other.kinds["moe"].fwd_ops if op.name in ("moe.experts.pad", "moe.experts.unpad")]
    bf16, _ = _cost(EP8)
    assert "moe.experts.pad" not in {op.name for op in bf16.kinds["moe"].fwd_ops}


def test_drop_and_pad_has_no_busiest_rank_and_no_host_sync() -> None:
    """Megatron-Bridge 25.09's Qwen3 runs dropped and padded to a capacity factor of 1: every expert runs exactly
    its capacity, so the MoE layer costs what the mean rank of the dropless layer costs, without the host wait."""
    pad, _ = _cost(EP8, moe_drop_and_pad=True)
    flat, _ = _cost(EP8, moe_host_sync=False)
    ops = {op.name: op for op in pad.kinds["moe"].fwd_ops}
    assert "moe.host_sync" not in ops
    ref = {op.name: op for op in flat.kinds["moe"].fwd_ops}
    busy = 1.0 + math.sqrt(2 * math.log(8) / 32768)
    for name in ("moe.experts.fc1", "moe.experts.act", "moe.ep_dispatch"):
        assert float(ops[name].time[0]) * busy == pytest.approx(float(ref[name].time[0]), rel=1e-9)


def test_round_robin_routing_has_no_busiest_rank() -> None:
    """AutoModel's benchmark gate sends token t's j-th copy to expert (t·k + j) mod E: every rank gets exactly the
    mean, so the expert kernels and all-to-alls cost what the mean rank's do (the host wait stays: DeepEP still
    sizes its buffers on the host)."""
    even, _ = _cost(EP8, moe_balanced_routing=True)
    rand, _ = _cost(EP8)
    ops = {op.name: op for op in even.kinds["moe"].fwd_ops}
    ref = {op.name: op for op in rand.kinds["moe"].fwd_ops}
    assert "moe.host_sync" in ops
    busy = 1.0 + math.sqrt(2 * math.log(8) / 32768)
    for name in ("moe.experts.fc2", "moe.ep_combine"):
        assert float(ops[name].time[0]) * busy == pytest.approx(float(ref[name].time[0]), rel=1e-9)


def test_validation_records_carry_their_routing() -> None:
    """Every AutoModel MoE record runs the round-robin gate; Megatron-Bridge's perf recipes force random logits (not
    round-robin), and its 25.09 Qwen3 runs dropped and padded to capacity."""
    from shardplan.validation.runs import load_records
    from shardplan.validation.stacks import stack_software

    for r in load_records("modern_training_runs"):
        sw = stack_software(r)
        if r["id"].startswith("automodel-") and "llama" not in r["id"] and r.get("software"):  # its MoE records
            assert sw.get("moe_balanced_routing") is True, r["id"]
        if r["id"].startswith("mbridge-"):
            assert not sw.get("moe_balanced_routing"), r["id"]
            assert bool(sw.get("moe_drop_and_pad")) == r["id"].startswith("mbridge-25.09-qwen3"), r["id"]


def test_with_the_ep_overlap_only_unpaired_microbatches_wait_on_the_host() -> None:
    """With Megatron's combined 1F1B overlap a layer's synchronisation waits while the paired microbatch's backward,
    queued before it, keeps the GPU busy (NVIDIA's nsys A/B: with the overlap on the GPU is active the whole step).
    PP 1, 8 microbatches: one of the 8 has no partner (``ep_overlap.unpaired_share``), so the step grows by
    48 · 8 · 616 µs / 8 instead of 48 · 8 · 616 µs."""
    on, _ = _cost(EP8, ep_comm_overlap=True)
    off, _ = _cost(EP8, ep_comm_overlap=True, moe_host_sync=False)
    assert float(on.step_time_s[0] - off.step_time_s[0]) == pytest.approx(48 * MOE_SYNC_IDLE_S, rel=1e-6)


def test_the_host_idle_is_reported_apart_from_compute() -> None:
    """`metrics.host_sync_s` is the step's GPU idle on the synchronisations (48 layers · 8 microbatches · 616 µs at PP
    1), each layer row carries its own (one wait, forward only), and the optimum group's step parts count it as
    "host sync", not as kernel time."""
    from shardplan.costmodel.training.evaluate import estimate_training
    from shardplan.validation.optimum import step_parts

    system = get_system("dgx-h100")
    rep = estimate_training(QWEN, system, 8, WORK, EP8)
    assert rep.metrics.host_sync_s == pytest.approx(48 * 8 * MOE_SYNC_IDLE_S, rel=1e-9)
    moe = next(row for row in rep.layers if row.kind == "moe")
    assert moe.host_s == pytest.approx(MOE_SYNC_IDLE_S, rel=1e-9)
    assert all(row.host_s == 0 for row in rep.layers if row.kind != "moe")
    parts = step_parts(rep.metrics, rep.stages, rep.plan)
    assert parts["host sync"] == pytest.approx(rep.metrics.host_sync_s, rel=1e-12)
    off = system.model_copy(update={"software": system.software.model_copy(update={"moe_host_sync": False})})
    bare = step_parts(estimate_training(QWEN, off, 8, WORK, EP8).metrics)
    assert parts["kernel time"] + parts["recompute"] + parts["stage imbalance"] == pytest.approx(
        bare["compute+recompute"], rel=1e-9)
