"""The pipeline term against a discrete-event simulation of Megatron-Core's 1F1B schedules
(``costmodel.training.pipeline_sim``): the simulation itself against the closed form ``(m + (p−1)/v)`` slots on equal
chunks (Narayanan et al. 2021 §2.2) and by hand on small cases, then ``step.train_cost``'s pipeline term against the
simulated schedule of the model's own stage times."""

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.costmodel.training.pipeline_sim import chunk_factor, chunk_layers, simulate
from shardplan.hardware import get_system
from shardplan.models import get_model


@pytest.mark.parametrize(("p", "v"), [(2, 1), (4, 1), (8, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8)])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_even_chunks_take_m_plus_fill_slots(p: int, v: int, groups: int) -> None:
    """Every chunk alike (forward 1, backward 2 per layer, 3 layers per chunk): the simulated schedule takes exactly
    ``(m + (p−1)/v)`` microbatch slots of ``v`` chunks each (Narayanan et al. 2021 §2.2)."""
    m = groups * p
    f, b = [[3.0] * v for _ in range(p)], [[6.0] * v for _ in range(p)]
    assert simulate(p, v, m, f, b) == pytest.approx((m + (p - 1) / v) * 9.0 * v, rel=1e-12)


@pytest.mark.parametrize(("model", "gpus", "layout", "batch", "seq"), [
    ("llama-3.1-70b", 64, TrainLayout(tp=4, pp=4, dp=4, interleave=5, sequence_parallel=True), 128, 8192),
    ("llama-3.1-70b", 64, TrainLayout(tp=4, pp=4, dp=4, sequence_parallel=True), 128, 8192),
    ("llama-3.1-8b", 16, TrainLayout(pp=4, dp=4, interleave=2), 64, 4096),
])
def test_the_cost_models_pipeline_is_the_simulated_schedule(model: str, gpus: int, layout: TrainLayout, batch: int,
                                                            seq: int) -> None:
    """The model's stage times (first, middle and last rank per microbatch, sends and exposed collectives included)
    fed to the simulation, the layers split evenly over the ``v`` chunks, the embedding's extra on rank 0's first
    chunk and the LM head's on the last rank's last chunk: the step's pipeline term is within 2.5% of the simulated
    schedule (0.1%, 0.5% and 2.0% above it: the closed form charges the heaviest stage's time to every fill slot)."""
    rep = estimate_training(get_model(model), get_system("dgx-h100"), gpus, TrainWorkload(seq_len=seq,
                            global_batch=batch), layout)
    first, mid, last = rep.stages
    p, v, m = layout.pp, layout.interleave, int(rep.plan.num_microbatches)
    fwd, bwd = [], []
    for r in range(p):
        st, extra_at = (first, 0) if r == 0 else (last, v - 1) if r == p - 1 else (mid, 0)
        f, b = [mid.fwd_time_s / v] * v, [mid.bwd_time_s / v] * v
        f[extra_at] += st.fwd_time_s - mid.fwd_time_s
        b[extra_at] += st.bwd_time_s - mid.bwd_time_s
        fwd.append(f)
        bwd.append(b)
    sim = simulate(p, v, m, fwd, bwd)
    assert 1.0 <= rep.metrics.pipeline_s / sim <= 1.025


def test_unequal_chunks_by_hand() -> None:
    """Two ranks of 3 layers in 2 chunks (2 and 1 layers; forward 1, backward 2 per layer), 2 microbatches, worked
    through Megatron's order by hand: rank 0 runs F(0,c0) 0-2, F(1,c0) 2-4, F(0,c1) 4-5, F(1,c1) 6-7, B(0,c1) 9-11,
    B(1,c1) 12-14, B(0,c0) 16-20, B(1,c0) 20-24; rank 1 F(0,c0) 2-4, F(1,c0) 4-6, F(0,c1) 6-7, B(0,c1) 7-9,
    F(1,c1) 9-10, B(1,c1) 10-12, B(0,c0) 12-16, B(1,c0) 16-20. 24 against the closed form's (2 + 1/2)·9 = 22.5."""
    assert simulate(2, 2, 2, [[2.0, 1.0]] * 2, [[4.0, 2.0]] * 2) == 24.0
    assert chunk_layers(3, 2) == [2, 1]
    assert chunk_factor((3, 3), 2, 2) == pytest.approx(24.0 / 22.5, rel=1e-12)


@pytest.mark.parametrize(("split", "v"), [((12,) * 8, 8), ((11,) + (12,) * 6 + (11,), 4), ((10, 12, 12, 10), 3),
                                           ((7, 11, 11, 10, 11, 10, 11, 9), 7)])
def test_the_factor_beyond_three_groups_is_the_simulated_schedule(split: tuple[int, ...], v: int) -> None:
    """``chunk_factor`` extends two short simulations linearly in m; at 8 groups it equals the full simulation."""
    p = len(split)
    m = 8 * p
    per_rank = [chunk_layers(n, v) for n in split]
    sim = simulate(p, v, m, [[float(c) for c in cs] for cs in per_rank], [[2.0 * c for c in cs] for cs in per_rank])
    closed = (m + (p - 1) / v) * 3.0 * max(split)
    assert chunk_factor(split, v, m) == pytest.approx(max(1.0, sim / closed), rel=1e-12)


@pytest.mark.parametrize(("split", "v"), [((15,) + (16,) * 6 + (15,), 8), ((7,) + (8,) * 14 + (7,), 4),
                                           ((9, 12, 12, 9), 6)])
def test_unequal_chunks_on_lighter_ranks_alone_cost_nothing(split: tuple[int, ...], v: int) -> None:
    """When the heaviest ranks' chunks are equal, ``chunk_factor`` returns 1 without simulating; the simulation agrees
    (the schedule is never longer than the closed form's all-equal one), at every group count tried."""
    p = len(split)
    per_rank = [chunk_layers(n, v) for n in split]
    for m in (p, 2 * p, 5 * p):
        sim = simulate(p, v, m, [[float(c) for c in cs] for cs in per_rank], [[2.0 * c for c in cs] for cs in per_rank])
        assert sim <= (m + (p - 1) / v) * 3.0 * max(split) * (1 + 1e-12)
        assert chunk_factor(split, v, m) == 1.0


def test_equal_chunks_cost_nothing_and_unequal_ones_never_less() -> None:
    assert chunk_factor((16,) * 8, 8, 64) == 1.0 and chunk_factor((24, 16), 8, 16) == 1.0
    assert chunk_factor((12,) * 8, 8, 128) == pytest.approx(1.0488, abs=5e-4)  # 2,2,2,2,1,1,1,1: +4.9%
    assert chunk_factor((19, 21, 21, 19), 8, 64) == 1.0  # the lighter ranks' slack outweighs it: clamped


def test_train_cost_charges_unequal_chunks_as_bubble() -> None:
    """Llama-3.1-8B (32 layers) on PP4 with 3 chunks: 8 layers a rank in chunks of 3, 3 and 2. The step's pipeline
    term is ``(m + (p−1)/v)`` slots of the slowest stage (forward + backward per microbatch) times the simulated
    factor of that split; everything beyond the m microbatches is reported as bubble. With 2 chunks (4 and 4) it is
    the closed form."""
    model, system = get_model("llama-3.1-8b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=4096, global_batch=64)
    m = 16
    for v, factor in ((3, chunk_factor((8,) * 4, 3, m)), (2, 1.0)):
        rep = estimate_training(model, system, 16, work, TrainLayout(pp=4, dp=4, interleave=v))
        slowest = max(s.fwd_time_s + s.bwd_time_s for s in rep.stages)
        assert rep.metrics.pipeline_s == pytest.approx((m + 3 / v) * slowest * factor, rel=1e-12)
        assert rep.metrics.bubble_s == pytest.approx(rep.metrics.pipeline_s - m * slowest, rel=1e-12)
    assert chunk_factor((8,) * 4, 3, m) == pytest.approx(1.0074, abs=1e-4)
