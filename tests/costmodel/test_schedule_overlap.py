"""What the interleaved schedule hides: each chunk's gradient reduction, and the steady-state pipeline sends."""

import numpy as np
import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.costmodel.training.pipeline_sim import simulate
from shardplan.costmodel.training.schedule_overlap import (
    backwards_after_chunk,
    chunked_gather_exposed,
    chunked_reduce_exposed,
    send_chain,
)
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")


def _megatron_backward_chunks(p: int, v: int, m: int) -> list[int]:
    """Backward chunk order of one rank, as Megatron-Core builds it (schedules.py@d98e8a6 get_schedule_table,
    group size p: each group of microbatches runs chunk 0 … v−1; backward chunk = v − 1 − forward chunk)."""
    order = []
    for start in range(0, m, p):
        group = range(start, min(start + p, m))
        order += [v - 1 - c for c in range(v) for _ in group]
    return order


def test_backward_order_p2_v2_m4_by_hand() -> None:
    """p=2, v=2, m=4: backward (microbatch, chunk) order (0,1) (1,1) (0,0) (1,0) (2,1) (3,1) (2,0) (3,0):
    chunk 1's last backward (3,1) is followed by 2 chunk-microbatches, chunk 0's (3,0) by none."""
    assert _megatron_backward_chunks(2, 2, 4) == [1, 1, 0, 0, 1, 1, 0, 0]
    got = backwards_after_chunk(np.array([2, 2]), np.array([2, 2]), np.array([4.0, 4.0]), np.array([1, 0]))
    assert got.tolist() == [2.0, 0.0]


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (4, 2, 8), (3, 4, 6), (4, 3, 6), (4, 2, 3), (6, 8, 6)])
def test_backwards_after_each_chunk_match_the_schedule(p: int, v: int, m: int) -> None:
    """Megatron requires the last group to hold 0 or ≥ p microbatches (here m % p ∈ {0} or m < p)."""
    order = _megatron_backward_chunks(p, v, m)
    for j in range(v):
        last = max(i for i, c in enumerate(order) if c == j)
        assert backwards_after_chunk(p, v, float(m), j) == len(order) - 1 - last


def _queue(t: float, edge: float, bwd: float, bucket: float, params: float, p: int, v: int, m: int) -> float:
    """Event simulation: chunk 0's reduction (t/v) may start once its first bucket has filled in its last
    backward, a later chunk's (one bucket: Megatron buckets only the first chunk) once its last backward ends; the
    network serves one chunk at a time in launch order; the last bucket waits for time 0."""
    order = _megatron_backward_chunks(p, v, m)
    b = bwd / v
    share = min(bucket / (params / v), 1.0)
    end_of = {c: -(len(order) - 1 - i) * b for i, c in enumerate(order)}  # each chunk's last backward's end
    free = -np.inf
    for c in sorted(end_of, key=end_of.get):
        start = max(free, end_of[c] - (b * (1 - share) if c == 0 else 0.0))
        free = start + t / v
    return max(free, edge)


@pytest.mark.parametrize(("t", "bwd", "p", "v", "m"), [(10.0, 4.0, 2, 2, 4), (3.0, 4.0, 2, 2, 4), (9.0, 1.0, 4, 4, 8),
                                                        (1.0, 1.0, 4, 3, 6), (5.0, 2.0, 2, 1, 4)])
def test_chunked_exposure_matches_an_event_simulation(t: float, bwd: float, p: int, v: int, m: int) -> None:
    """p=2, v=2, m=4, t=10, backward 4 (2 per chunk), bucket 20% of a chunk: chunk 1, one bucket, starts when its
    last backward ends at −4 and ends at 1; chunk 0 then runs 5 more: 6 exposed (4.4 if chunk 1 were bucketed)."""
    got = float(chunked_reduce_exposed(np.array(t), np.array(0.1), np.array(bwd), np.array(10.0), np.array(100.0),
                                       np.array(p), np.array(v), np.array(float(m))))
    assert got == pytest.approx(_queue(t, 0.1, bwd, 10.0, 100.0, p, v, m))
    if (t, bwd, p, v, m) == (10.0, 4.0, 2, 2, 4):
        assert got == pytest.approx(6.0)


def _gather_queue(t: float, edge: float, fwd: float, bucket: float, params: float, p: int, v: int, m: int) -> float:
    """Event simulation of the next step's forwards on one rank: the first microbatch group (min(p, m)) runs chunk
    0, 1, …, v−1 (rank 0's warm-up holds all of them); gathers of chunks 0 and 1 are queued at time 0, chunk k+1's
    when chunk k's first forward starts (k ≥ 1); the network serves them in order, t/v each. Every chunk's first
    forward waits for its whole gather (its buckets arrive last-layer first); without interleaving the one chunk
    streams its buckets through its first forward (the hooks gather the next bucket as the forward reaches it)."""
    c, f, g0 = t / v, fwd / v, min(p, m)
    share = min(bucket / (params / v), 1.0)
    done = {0: c}
    if v > 1:
        done[1] = 2 * c
    now = (max(c, edge) if v > 1 else max(c - f * (1 - share), edge)) + f  # chunk 0's first forward, stalled
    for k in range(1, v):
        now += (g0 - 1) * f  # the rest of chunk k−1's first group
        start = max(now, done[k])
        if k + 1 < v:  # launched as chunk k's first forward starts, queued behind chunk k
            done[k + 1] = max(start, done[k]) + c
        now = start + f
    now += (g0 - 1) * f  # the rest of the last chunk's first group
    return now - v * g0 * f  # the stall: elapsed minus the forwards' own time


@pytest.mark.parametrize(("t", "fwd", "p", "v", "m"), [(8.0, 4.0, 2, 2, 4), (20.0, 4.0, 4, 4, 8), (2.0, 4.0, 4, 4, 8),
                                                       (12.0, 3.0, 2, 3, 6), (6.0, 1.0, 8, 8, 8), (5.0, 2.0, 4, 1, 4)])
def test_chunked_gather_matches_an_event_simulation(t: float, fwd: float, p: int, v: int, m: int) -> None:
    """By hand for t=8, forward 4 (2 per chunk), p=2, v=2: chunk 0's first forward waits for its whole gather (4
    stalled) and starts at 4; chunk 1's, queued behind it, ends at 8, just as chunk 1's first forward comes (after
    chunk 0's two forwards): 4.0 in all, against 4.4 if the whole gather had streamed under one forward."""
    got = float(chunked_gather_exposed(np.array(t), np.array(0.1), np.array(fwd), np.array(10.0), np.array(100.0),
                                       np.array(p), np.array(v), np.array(float(m))))
    assert got == pytest.approx(_gather_queue(t, 0.1, fwd, 10.0, 100.0, p, v, m))
    if (t, fwd, p, v, m) == (8.0, 4.0, 2, 2, 4):
        assert got == pytest.approx(4.0)
        single = float(chunked_gather_exposed(np.array(t), np.array(0.1), np.array(fwd), np.array(10.0),
                                              np.array(100.0), np.array(p), np.array(1), np.array(float(m))))
        assert single == pytest.approx(max(8.0 - 4.0 * 0.9, 0.1))


def _est(v: int, *, overlap_p2p: bool = True, overlap_grad: bool = True, pp: int = 4):
    system = get_system("dgx-h100")
    sw = system.software.model_copy(update={"overlap_p2p_comm": overlap_p2p, "overlap_grad_reduce": overlap_grad})
    system = system.model_copy(update={"software": sw})
    lay = TrainLayout(tp=1, pp=pp, dp=16, interleave=v, zero_stage=1)
    return estimate_training(MODEL, system, 16 * pp, TrainWorkload(seq_len=512, global_batch=64), lay)


def test_interleaving_hides_more_of_a_dp_bound_reduction() -> None:
    """ZeRO-1 over 16 nodes with 4 microbatches: the gradient reduction dwarfs one backward. Interleaved, chunk
    1's reduction hides behind the 4 chunk-backwards after it, so less is exposed and the step is faster; without
    overlap the whole collective shows either way."""
    flat, inter = _est(1), _est(2)
    assert inter.metrics.dp_exposed_s < 0.9 * flat.metrics.dp_exposed_s
    assert inter.metrics.step_time_s < flat.metrics.step_time_s
    assert _est(2, overlap_grad=False).metrics.dp_exposed_s == pytest.approx(
        _est(1, overlap_grad=False).metrics.dp_exposed_s)


def test_overlapped_sends_expose_the_virtual_stage_chain() -> None:
    """Blocking: (m + (p−1)/v)·2·v·s. Overlapped: the first microbatch's forward through all p·v virtual stages
    and the last one's backward back, (p·v − 1)·2·s, plus the 18.9% slowdown of the m·2·v·s hidden (4·2 − 1 = 7
    hops each way here, where the physical stages alone would be 3). Not interleaved: Megatron-LM blocks whatever
    the switch says."""
    p, v, m = 4, 2, 4
    on, off = _est(v).metrics.pp_exposed_s, _est(v, overlap_p2p=False).metrics.pp_exposed_s
    send = off / ((m + (p - 1) / v) * 2 * v)  # one chunk send
    assert on == pytest.approx((p * v - 1) * 2 * send + 0.189 * m * 2 * v * send, rel=1e-9)
    assert _est(1).metrics.pp_exposed_s == pytest.approx(_est(1, overlap_p2p=False).metrics.pp_exposed_s)


def test_overlapped_sends_never_price_above_blocking_ones() -> None:
    """p = m = 4 at v = 8: the chain alone is (4·8 − 1) = 31 sends each way and the steady state's slowdown adds
    0.189·4·8 = 6.05, more than the blocking schedule's (4 + 3/8)·8 = 35 that a rank waiting for every send would
    take; the overlapped price is capped there. At v = 2 the chain (7) plus 1.51 stays under 9."""
    assert _est(8).metrics.pp_exposed_s == pytest.approx(_est(8, overlap_p2p=False).metrics.pp_exposed_s, rel=1e-9)
    assert _est(2).metrics.pp_exposed_s < 0.95 * _est(2, overlap_p2p=False).metrics.pp_exposed_s


def test_a_slower_rank_absorbs_chain_sends() -> None:
    """Equal ranks keep all 2·(p·v − 1) = 30 sends on the path at p = v = 4, m = 8, as an LM head on the last chunk
    or a light first chunk does; one rank 2% slower in every chunk gives the others spare time that absorbs 18 of
    them at sends of 3% of a chunk's forward (the chain is an upper bound there)."""
    p, v, m, hop = 4, 4, 8, 0.03

    def grown(fwd: list[list[float]]) -> float:
        bwd = [[2.0 * t for t in row] for row in fwd]
        return (simulate(p, v, m, fwd, bwd, hop) - simulate(p, v, m, fwd, bwd)) / hop

    equal = [[1.0] * v for _ in range(p)]
    head = [row[:] for row in equal]
    head[-1][-1], head[0][0] = 2.5, 0.8
    slow = [row[:] for row in equal]
    slow[2] = [1.02] * v
    assert grown(equal) == pytest.approx(30.0) and grown(head) == pytest.approx(30.0)
    assert grown(slow) == pytest.approx(12.0)


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 2), (3, 14, 6), (4, 4, 8), (4, 23, 4), (8, 4, 128), (8, 8, 16)])
@pytest.mark.parametrize("hop", [0.01, 0.3, 1.0])
def test_send_chain_matches_the_simulated_schedule(p: int, v: int, m: int, hop: float) -> None:
    """Megatron's interleaved order simulated with a send time (``hop`` of a chunk's forward): the makespan grows
    by exactly 2·send_chain·v hops at every m, small sends or as long as a chunk."""
    fwd, bwd = [[1.0 / v] * v] * p, [[2.0 / v] * v] * p
    grown = simulate(p, v, m, fwd, bwd, hop / v) - simulate(p, v, m, fwd, bwd)
    hops = 2 * float(send_chain(np.array([p]), np.array([v]), np.array([1.0]))[0]) * v
    assert hops == 2 * (p * v - 1)
    assert grown == pytest.approx(hops * hop / v, rel=1e-9)


def test_send_chain_hop_count_by_hand() -> None:
    """p = 2, v = 2, m = 2, chunk forward 1, backward 2, sends 0.5; virtual stages 0..3 on ranks 0, 1, 0, 1.
    Rank 0 runs F0 F1 at stage 0 (0–2), then stage 2: F0 when it arrives (3–4), F1 (4–5). Rank 1: F0, F1 at
    stage 1 (1.5–3.5), F0 at stage 3 (4.5–5.5), its B0 (5.5–7.5), F1 (7.5–8.5), B1 (8.5–10.5). Back on rank 0, B0
    at stage 2 (8–10), B1 (11–13); rank 1's stage 1: B0 (10.5–12.5), B1 (13.5–15.5); rank 0's stage 0: B0
    (13–15), B1 (16–18). Without sends the same order ends at 15: 6 hops of 0.5, the 2·(p·v − 1) of the chain."""
    fwd, bwd = [[1.0, 1.0], [1.0, 1.0]], [[2.0, 2.0], [2.0, 2.0]]
    assert simulate(2, 2, 2, fwd, bwd) == pytest.approx(15.0)
    assert simulate(2, 2, 2, fwd, bwd, 0.5) == pytest.approx(18.0)


def test_interleaving_needs_microbatches_in_whole_groups_of_pp(run_cli) -> None:
    """Megatron-Core's interleaved schedule runs microbatch groups of pp and refuses m < pp or a last group under pp
    (schedules.py@d98e8a6): such a pinned layout is bad input naming the field; the planner never enumerates one."""
    from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts

    r = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "16", "-b", "12", "-s", "4096",
                "--tp", "1", "--pp", "4", "--dp", "4", "--interleave", "2")
    assert r.code == 2 and r.err.count("\n") == 1 and "interleave" in r.err and "multiple of pp (4)" in r.err
    space = enumerate_layouts(MODEL, TrainWorkload(seq_len=4096, global_batch=12), SpaceRequest(num_gpus=16))
    rows = space.rows
    m = rows.gb // (rows.dp * rows.mb)
    assert ((rows.v == 1) | (m % rows.pp == 0)).all()
    assert space.pruned["interleave with microbatches not a multiple of pp"] > 0
