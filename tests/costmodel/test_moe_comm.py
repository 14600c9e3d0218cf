"""MoE token traffic: where routed tokens land (checked by enumeration), DeepEP's per-node deduplication over the
network (hand counts), and the combined-1F1B overlap of the all-to-alls (Megatron-Core's schedule rules)."""

from itertools import combinations

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.routing import round_robin_blocks, routed_blocks
from shardplan.costmodel.training.ep_overlap import chunk_times, pair_time
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.models.parts import MoESpec

DSV3 = get_model("deepseek-v3")
QWEN = get_model("qwen3-30b-a3b")


def _enumerated_blocks(experts: int, k: int, blocks: int) -> float:
    """Mean distinct blocks over every top-k subset (uniform routing), experts split into contiguous blocks."""
    size = experts // blocks
    subsets = list(combinations(range(experts), k))
    return sum(len({e // size for e in s}) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("experts", "k", "blocks"), [(8, 2, 4), (12, 3, 3), (16, 4, 8), (10, 1, 5)])
def test_routed_blocks_match_enumeration(experts: int, k: int, blocks: int) -> None:
    moe = MoESpec(num_experts=experts, experts_per_token=k, expert_ffn_hidden_size=8)
    assert float(routed_blocks(moe, blocks)) == pytest.approx(_enumerated_blocks(experts, k, blocks), rel=1e-12)


def test_group_limited_routing_bounds_nodes_by_enumeration() -> None:
    """16 experts in 4 groups, each token within 2 groups, 4 experts (each chosen group used): over every pair of
    groups and every 4 experts of their 8, the blocks of 8 experts (2 groups) and of 2 experts (half a group)."""
    moe = MoESpec(num_experts=16, experts_per_token=4, expert_ffn_hidden_size=8, num_groups=4, topk_groups=2)
    for size in (8, 2):
        seen, count = 0, 0
        for groups in combinations(range(4), 2):
            pool = [e for g in groups for e in range(4 * g, 4 * g + 4)]
            for s in combinations(pool, 4):
                if {e // 4 for e in s} != set(groups):
                    continue  # DeepSeek-V3 picks groups by their best experts: every chosen group is used
                seen += len({e // size for e in s})
                count += 1
        want = seen / count
        got = float(routed_blocks(moe, 16 // size))
        if size == 8:  # whole groups: exact
            assert got == pytest.approx(want, rel=1e-12)
        else:  # inside a group: the formula lets a chosen group go unused, so it may only undercount
            assert got <= want and got == pytest.approx(want, rel=0.1)


def test_deepseek_v3_reaches_four_nodes() -> None:
    """EP 64 on 8 nodes of 8: a node's 32 experts are one of the 8 groups and a token uses 4 groups, so every
    token reaches 4 nodes (DeepSeek-V3 §2.1.2 node-limited routing)."""
    assert float(routed_blocks(DSV3.moe, 8)) == pytest.approx(4.0, rel=1e-12)


def _gate_blocks(experts: int, k: int, blocks: int, tokens: int) -> float:
    """AutoModel's FakeBalancedGate run literally (``arange(T·k).view(-1, k) % E``), experts in contiguous blocks of
    E/blocks: the mean distinct blocks per token over ``tokens`` tokens."""
    idx = (np.arange(tokens * k).reshape(-1, k) % experts) // (experts // blocks)
    return float(np.mean([len(set(row)) for row in idx.tolist()]))


@pytest.mark.parametrize(("experts", "k", "blocks"), [
    (128, 8, 8),  # Qwen3-30B-A3B on EP 8: one rank per token
    (32, 4, 8),  # gpt-oss-20b on EP 8: one rank
    (128, 4, 64),  # gpt-oss-120b on EP 64: two ranks; on its 8 nodes one
    (128, 4, 8),
    (256, 8, 64),  # DeepSeek-V3 on EP 64: two ranks
    (128, 6, 8),  # top-6 of 128 on EP 8: starts 6t mod 16 in {0,6,12,2,8,14,4,10}, two ranks for 12 and 14
    (384, 8, 32),  # Kimi-K2 on EP 32: blocks of 12
    (10, 3, 5),
])
def test_round_robin_blocks_match_the_gate(experts: int, k: int, blocks: int) -> None:
    want = _gate_blocks(experts, k, blocks, tokens=experts * 7)  # whole cycles of E/gcd(E, k) tokens
    assert float(round_robin_blocks(MoESpec(num_experts=experts, experts_per_token=k, expert_ffn_hidden_size=8),
                                    blocks)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(("experts", "k", "blocks"), [(256, 8, 8.0), (96, 8, 1.5), (128, 4, 2.5), (384, 8, 4.0)])
def test_round_robin_over_nodes_matches_the_gate(experts: int, k: int, blocks: float) -> None:
    """Nodes of an EP group: n/g blocks, g GPUs per node (EP 64 on 8-GPU nodes: 8; EP 12 on them: 1.5, the last node
    half full). Expert e sits on node ⌊e·blocks/E⌋; the gate run literally over whole cycles gives the same mean."""
    idx = np.floor((np.arange(experts * 7 * k).reshape(-1, k) % experts) * blocks / experts)
    want = float(np.mean([len(set(row)) for row in idx.tolist()]))
    got = float(round_robin_blocks(MoESpec(num_experts=experts, experts_per_token=k, expert_ffn_hidden_size=8), blocks))
    assert got == pytest.approx(want, rel=1e-12)


def test_round_robin_by_hand() -> None:
    """Hand counts: 8 consecutive experts from a multiple of 8 stay in one block of 16; 4 from a multiple of 4 span
    two blocks of 2; top-6 of 128 over blocks of 16 crosses a boundary for 2 of the 8 starts: 1.25."""
    def rr(e: int, k: int, n: int) -> float:
        return float(round_robin_blocks(MoESpec(num_experts=e, experts_per_token=k, expert_ffn_hidden_size=8), n))
    assert rr(128, 8, 8) == 1.0
    assert rr(128, 4, 64) == 2.0
    assert rr(128, 6, 8) == 1.25
    # uniform random routing reaches far more ranks: 8·(1 − C(112,8)/C(128,8)) ≈ 5.34
    assert float(routed_blocks(QWEN.moe, 8)) == pytest.approx(5.34, abs=0.005)


def test_deepep_under_the_round_robin_gate_sends_a_token_to_one_rank() -> None:
    """Qwen3-30B-A3B on EP 8 in one node with AutoModel's round-robin gate: every token's 8 experts sit on one rank,
    so DeepEP sends it once, to another rank 7 times in 8 (uniform routing: 5.34 ranks)."""
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16", attention="flash")
    lay = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=Recompute.NONE, zero_stage=1)
    _, rr = _ep_ops("dgx-h100", lay, work, QWEN, ep_dispatcher="deepep", moe_balanced_routing=True)
    token = 4096 * QWEN.hidden_size * 2.0
    assert float(rr["moe.ep_dispatch"].nbytes[0]) == pytest.approx(token * 7 / 8, rel=1e-9)


def _ep_ops(system_name: str, layout: TrainLayout, work: TrainWorkload, model=DSV3, **software):
    system = get_system(system_name)
    system = system.model_copy(update={"software": system.software.model_copy(update=software)})
    rows = LayoutArrays.from_layouts([layout], work.global_batch)
    cost = train_cost(model, system, work, rows)
    return cost, {op.name: op for op in cost.kinds["moe"].fwd_ops if op.dim == "ep"}


WORK = TrainWorkload(seq_len=4096, global_batch=512, dtype="bf16", attention="flash")
EP64 = TrainLayout(tp=1, pp=4, dp=64, ep=64, interleave=8, recompute=Recompute.NONE, zero_stage=1)


def test_deepep_sends_a_token_once_per_remote_node() -> None:
    """DeepSeek-V3, EP 64 over 8 nodes, 4096 tokens of h 7168 in bf16: the alltoall dispatcher's NIC carries the
    8 copies' 56/64 that leave the node; DeepEP one copy per remote node, 4 nodes of which 4·7/8 are remote."""
    token = 4096 * 7168 * 2.0
    _, a2a = _ep_ops("dgx-h100", EP64, WORK)
    _, deep = _ep_ops("dgx-h100", EP64, WORK, ep_dispatcher="deepep")
    system = get_system("dgx-h100")
    inter = comm.link_bandwidth(system, "inter")
    n, stride = np.array([64.0]), np.array([1.0])
    plain = comm.all_to_all_time(system, np.array([8 * token]), n, stride)
    busiest = 1.0 + np.sqrt(2 * np.log(64) / (4096 * 8))  # the busiest rank's copies (``ep_imbalance``)
    assert float(a2a["moe.ep_dispatch"].time[0]) == pytest.approx(float(plain[0]) * busiest, rel=1e-12)
    # the network phase binds: its bytes over the NIC, plus NCCL's base and hop latencies
    net = float(deep["moe.ep_dispatch"].time[0])
    assert net == pytest.approx(token * 4 * 7 / 8 / inter * busiest, rel=0.02)
    assert float(a2a["moe.ep_dispatch"].time[0]) / net == pytest.approx(8 * 56 / 64 / (4 * 7 / 8), rel=0.02)


def test_deepep_inside_a_node_sends_once_per_rank() -> None:
    """Qwen3-30B-A3B (128 experts, top-8) on EP 8 in one node: distinct ranks per token 8·(1 − C(112,8)/C(128,8));
    NVLink carries the 7/8 of them that are other ranks, against 8·7/8 copies with the alltoall dispatcher."""
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype="bf16", attention="flash")
    lay = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=Recompute.NONE, zero_stage=1)
    _, a2a = _ep_ops("dgx-h100", lay, work, QWEN)
    _, deep = _ep_ops("dgx-h100", lay, work, QWEN, ep_dispatcher="deepep")
    miss = np.prod([(112 - i) / (128 - i) for i in range(8)])
    ranks = 8 * (1 - miss)
    token = 4096 * QWEN.hidden_size * 2.0
    assert float(deep["moe.ep_dispatch"].nbytes[0]) == pytest.approx(token * ranks * 7 / 8, rel=1e-9)
    assert float(a2a["moe.ep_dispatch"].nbytes[0]) == pytest.approx(token * 8, rel=1e-9)


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep"])
def test_combined_1f1b_hides_all_to_alls_behind_the_paired_layer(dispatcher: str) -> None:
    """PP 4 with interleave 8 and 128 microbatches: 2·3 + 7·4 + 1 = 35 of the 1024 virtual microbatches have no
    partner and show their all-to-alls whole; in the rest each all-to-all hides behind the compute chunk beside it,
    what exceeds it shows and the hidden part costs the overlap slowdown. DeepEP's traffic fits under the pair's
    compute and mostly hides; the alltoall dispatcher's outlasts it, so at least the difference shows (more: each
    transfer hides only behind its own chunk). The host synchronisation is GPU idle time, not compute a transfer can
    hide behind."""
    work = TrainWorkload(seq_len=4096, global_batch=8192, dtype="bf16", attention="flash")
    off, _ = _ep_ops("dgx-h100", EP64, work, ep_dispatcher=dispatcher)
    on, _ = _ep_ops("dgx-h100", EP64, work, ep_dispatcher=dispatcher, ep_comm_overlap=True)
    a2a = float(off.kinds["moe"].fwd.comm_ep[0] + off.kinds["moe"].bwd.comm_ep[0])
    compute = sum(float(op.time[0]) for c in ("moe", "attention") for op in
                  off.kinds[c].fwd_ops + off.kinds[c].bwd_ops if op.kind not in ("comm", "host"))
    assert (compute < a2a) == (dispatcher == "alltoall")
    u = 35 / 1024
    sw = get_system("dgx-h100").software
    slowdown = sw.ep_overlap_slowdown if dispatcher == "deepep" else sw.overlap_slowdown
    hidden = min(compute, a2a)
    paired = a2a - hidden + slowdown * hidden
    shown = float(on.kinds["moe"].fwd.comm_ep[0] + on.kinds["moe"].bwd.comm_ep[0])
    # at least what the pair's whole compute cannot cover shows (more: each transfer hides only behind its own chunk)
    assert u * a2a + (1 - u) * paired <= shown * (1 + 1e-12)
    if dispatcher == "deepep":  # the transfers nearly all hide: the unpaired show whole, the rest cost the slowdown
        assert shown < u * a2a + (1 - u) * (slowdown + 0.02) * a2a
    else:
        assert shown < 0.6 * a2a
    assert float(on.step_time_s[0]) < float(off.step_time_s[0])


def test_deepep_overlap_slowdown_is_nvidias_nsys_comparison() -> None:
    """``ep_overlap_slowdown`` from the rank-0 Nsight Systems A/B of Megatron-Bridge's Qwen3-30B-A3B on 16 H100
    (skills/nemo-mbridge-perf-moe-comm-overlap at 067f987): GPU-active union 22.821 s off, 21.221 s on; communication
    beside GEMM/attention 9.079 ms (0.11% of all communication) off, 3,958.997 ms (36.55%) on. The kernels took
    longer by what the union did not fall: (on union + overlap) − (off union + overlap), per second of added
    overlap; and the communication kernels alone account for it (8.25 s in all off, 10.83 s on)."""
    extra = (21.221 + 3.958997) - (22.821 + 0.009079)
    added = 3.958997 - 0.009079
    assert get_system("dgx-h100").software.ep_overlap_slowdown == pytest.approx(extra / added, abs=0.005)
    comm_off, comm_on = 0.009079 / 0.0011, 3.958997 / 0.3655
    assert comm_on - comm_off == pytest.approx(extra, rel=0.15)


def test_without_delayed_weight_gradients_the_backward_dispatch_waits_for_them() -> None:
    """Megatron-Core's default (delay_wgrad_compute off): dispatch_bwd(B) leaves after B's whole expert backward.
    By hand, in ms: pre_dispatch_fwd(A) 1 (0-1); dispatch_fwd(A) 0.5 (1-1.5); mlp_bwd(B) 1 (1-2) and its weight
    gradients 1 (2-3); dispatch_bwd(B) 2 waits for 3 (3-5) where with the delay it leaves at 2 (2-4); mlp_fwd(A) 1
    (3-4); combine_fwd(A) 0.5 after both (5-5.5 against 4-4.5); pre_dispatch_bwd(B) 2 needs B's dispatch gradient
    (5-7 against 4-6)."""
    one = np.array([1.0])
    times = {"p_f": one, "p_b": 2 * one, "m_f": one, "m_b": one, "m_w": one, "d_f": 0.5 * one, "c_f": 0.5 * one,
             "d_b": 2 * one, "c_b": 0.5 * one}
    assert float(pair_time(**times, delay_wgrad=True)[0]) == pytest.approx(6.0)
    assert float(pair_time(**times, delay_wgrad=False)[0]) == pytest.approx(7.0)


def test_a_transfer_hides_only_behind_its_own_chunk() -> None:
    """The combined 1F1B layer pair (Megatron-Core TransformerLayerSchedulePlan.run), by hand, in ms: combine_bwd(B)
    3 beside pre_dispatch_fwd(A) 1 shows 2; then dispatch_fwd(A) 0.5 (at 3) beside mlp_bwd(B) 1 (3-4) and its weight
    gradients 1 (4-5); dispatch_bwd(B) 0.5 (4-4.5); mlp_fwd(A) 1 (5-6); combine_fwd(A) 0.5 (6-6.5) beside
    pre_dispatch_bwd(B) 2 (6-8). The pair takes 8 for 6 of compute, though its 4.5 of transfers are less than that."""
    one = np.array([1.0])
    times = {"p_f": one, "p_b": 2 * one, "m_f": one, "m_b": one, "m_w": one, "d_f": 0.5 * one, "c_f": 0.5 * one,
             "d_b": 0.5 * one, "delay_wgrad": True}
    assert float(pair_time(**times, c_b=3 * one)[0]) == pytest.approx(8.0)
    # every transfer shorter than its partner: the pair is its compute, 6
    assert float(pair_time(**times, c_b=0.5 * one)[0]) == pytest.approx(6.0)
    # the combine node's unpermute and residual take SMs: B's 0.5 first (combine_bwd waits on it), A's 0.25 last
    assert float(pair_time(**times, c_b=3 * one, post_b=0.5, post_f=0.25)[0]) == pytest.approx(8.75)


def test_shared_experts_and_deepep_permutations_are_in_their_chunks() -> None:
    """DeepSeek-V3's shared expert runs in pre-dispatch, on the compute stream (fine_grained_callables.py
    submodule_pre_dispatch_forward); DeepEP permutes and unpermutes inside the experts' node; the alltoall
    dispatcher's permutation comes before its dispatch and its unpermutation after the combine."""
    lay = TrainLayout(tp=1, pp=1, dp=64, ep=64, recompute=Recompute.NONE, zero_stage=1)
    for dispatcher in ("alltoall", "deepep"):
        cost, _ = _ep_ops("dgx-h100", lay, WORK, ep_dispatcher=dispatcher)
        fwd = cost.kinds["moe"].fwd_ops
        t = {op.name: float(op.time[0]) for op in fwd}
        zero = np.zeros(1)
        pre, exp, _, post, _, _ = (float(x[0]) for x in chunk_times(fwd, deepep=dispatcher == "deepep", zero=zero))
        shared = sum(v for k, v in t.items() if k.startswith("moe.shared.") and "comm" not in k)
        assert shared > 0
        perm = t["moe.permute"] + t["moe.unpermute"]
        if dispatcher == "deepep":
            assert pre == pytest.approx(t["moe.norm"] + t["moe.router"] + t["moe.topk"] + shared)
            assert post == pytest.approx(t["moe.residual"])
            assert exp > perm
        else:
            assert pre == pytest.approx(t["moe.norm"] + t["moe.router"] + t["moe.topk"] + t["moe.permute"] + shared)
            assert post == pytest.approx(t["moe.unpermute"] + t["moe.residual"])


@pytest.mark.parametrize("layout", [
    TrainLayout(tp=1, pp=4, dp=64, ep=64, recompute=Recompute.NONE, zero_stage=1),  # PP without interleaving
    TrainLayout(tp=1, pp=4, dp=64, ep=64, interleave=8, recompute=Recompute.FULL, zero_stage=1),  # full recompute
])
def test_overlap_needs_what_megatron_requires(layout: TrainLayout) -> None:
    """Megatron-Core asserts interleaving under PP and no full recompute for the overlap: elsewhere nothing hides."""
    off, _ = _ep_ops("dgx-h100", layout, WORK)
    on, _ = _ep_ops("dgx-h100", layout, WORK, ep_comm_overlap=True)
    assert float(on.step_time_s[0]) == pytest.approx(float(off.step_time_s[0]), rel=1e-12)


# --- MoE activation memory: fp8 GEMM inputs and Megatron's recompute modules -----------------------------------
def _acts(model, dtype: str, recompute: Recompute = Recompute.NONE, **software):
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype=dtype, attention="flash")
    lay = TrainLayout(tp=1, pp=1, dp=8, ep=8, recompute=recompute, zero_stage=1)
    cost, _ = _ep_ops("dgx-h100", lay, work, model, **software)
    return cost.kinds


def test_fp8_keeps_gemm_inputs_in_one_byte() -> None:
    """Qwen3-30B-A3B, 4096 tokens: under fp8 Transformer Engine keeps each GEMM's input as its fp8 copy, so per
    token the 8 routed copies' FC1 input (h 2048) and FC2 input (768) and attention's QKV input (2048) and
    output-projection input (32 heads · 128) shrink from 2 bytes to 1; the router and activation inputs stay 16-bit."""
    bf16, fp8 = _acts(QWEN, "bf16"), _acts(QWEN, "fp8")
    T = 4096
    moe = float(bf16["moe"].acts.none[0] - fp8["moe"].acts.none[0])
    assert moe == pytest.approx(T * 8 * (2048 + 768), rel=1e-12)
    attn = float(bf16["attention"].acts.none[0] - fp8["attention"].acts.none[0])
    assert attn == pytest.approx(T * (2048 + 32 * 128), rel=1e-12)


def test_moe_act_recompute_drops_the_fc2_input() -> None:
    """recompute_modules moe_act: the experts' activation output (FC2 input, 768 per copy, 8 copies) is not kept
    and the activation kernel reruns in the backward (``recompute_modules.module_costs``)."""
    k = _acts(QWEN, "bf16", Recompute.SELECTIVE)
    assert float(k["moe"].modules["moe_act"].freed[0]) == pytest.approx(4096 * 8 * 768 * 2.0)
    act = next(op for op in k["moe"].fwd_ops if op.name == "moe.experts.act")
    assert float(k["moe"].modules["moe_act"].time[0]) == pytest.approx(float(act.time[0]), rel=1e-12)


def test_mla_up_proj_recompute_drops_q_k_v() -> None:
    """DeepSeek-V3 with mla_up_proj: the 128 heads' Q and K (192) and V (128) are rebuilt from the latents."""
    dflt = _acts(DSV3, "bf16", Recompute.SELECTIVE)
    mla = dflt["attention"].modules["mla_up_proj"]
    assert float(mla.freed[0]) == pytest.approx(4096 * 2.0 * 128 * (192 + 192 + 128))
    ups = ("attn.q_up", "attn.kv_up", "attn.rope")
    up = sum(float(op.time[0]) for op in dflt["attention"].fwd_ops if op.name in ups)
    assert float(mla.time[0]) == pytest.approx(up, rel=1e-12)
    # core_attn reruns the flash kernel (and its CP ring): Megatron-Core checkpoints core attention whatever its
    # kernel (attention.py checkpoint_core_attention at d98e8a6)
    core = sum(float(op.time[0]) for op in dflt["attention"].fwd_ops if op.name.endswith((".flash", ".cp_ring")))
    assert core > 0 and float(dflt["attention"].selective.time[0]) == pytest.approx(core, rel=1e-12)
