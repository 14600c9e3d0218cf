"""The per-stage CP-SAT model returns the brute-force optimum, and its plan's step time is the cost model's.

Random small instances (hypothesis): model shape × hardware × global layout (PP 2–4, 4–12 layers) ×
recompute mode × offload × one recompute count or one per rank, with the GPU memory set between 90% of the
uniform split's need under the layout's recompute mode and 120% of it with none, so the per-rank HBM limits bind.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.pipeline_sim import uniform_split
from shardplan.costmodel.training.stage_bounds import average_lower_bounds, stage_lower_bounds
from shardplan.costmodel.training.stage_split import evaluate_split
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models.spec import MlpKind, ModelSpec, MoESpec
from shardplan.planner.training.stages import (
    StageSpace,
    bounded_options,
    chunk_recompute,
    coefficients,
    solve_stages,
)
from shardplan.planner.training.stages_brute import brute_force_stages


@st.composite
def spaces(draw: st.DrawFn) -> StageSpace:
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([64, 128]))
    pp = draw(st.sampled_from([2, 3, 4]))
    v = draw(st.sampled_from([1, 1, 2]))
    layers = draw(st.integers(min_value=max(4, pp * v), max_value=12 if pp < 4 else 9))
    moe = None
    if draw(st.booleans()) and draw(st.booleans()):
        moe = MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=draw(st.sampled_from([512, 1024])),
                      first_dense_layers=draw(st.sampled_from([0, 1])))
    model = ModelSpec(
        name="rand", num_layers=layers, hidden_size=heads * head_dim, num_heads=heads,
        num_kv_heads=draw(st.sampled_from([heads, heads // 4])), ffn_hidden_size=4 * heads * head_dim,
        mlp=draw(st.sampled_from(list(MlpKind))), vocab_size=draw(st.sampled_from([1000, 32000, 128000])), moe=moe,
    )
    system = get_system(draw(st.sampled_from(["dgx-a100-80gb", "dgx-h100", "mi300x-8"])))
    tp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2]))
    mb = draw(st.sampled_from([1, 2]))
    # the interleaved schedule runs microbatches in groups of pp (validate_layout), schedule by schedule
    group = pp if v > 1 else 1
    m = draw(st.sampled_from([1, 2, 4, 8])) * group
    rc = draw(st.sampled_from(list(Recompute)))
    layout = TrainLayout(tp=tp, pp=pp, dp=dp, microbatch=mb, interleave=v, recompute=rc,
                         sequence_parallel=tp > 1 and draw(st.booleans()), zero_stage=draw(st.sampled_from([0, 1, 3])))
    # gradient accumulation over whole schedules (torchtitan's local_batch_size) or one schedule per step
    per_schedule = draw(st.sampled_from([k * group for k in (1, 2, 4, 8) if m % (k * group) == 0]))
    work = TrainWorkload(seq_len=draw(st.sampled_from([512, 2048, 8192])), global_batch=m * dp * mb,
                         framework_bytes=0, local_batch=draw(st.sampled_from([None, per_schedule * mb])))
    # GPU memory: between 90% of the uniform split's peak (all layers recomputed under full) and 120% of it with none.
    def peak(rc: Recompute) -> float:
        rows = LayoutArrays.from_layouts([dataclasses.replace(layout, recompute=rc)], work.global_batch)
        return float(train_cost(model, system, work, rows).peak_memory[0])

    low, high = 0.9 * peak(rc), 1.2 * peak(Recompute.NONE)
    cap = low + draw(st.floats(min_value=0.0, max_value=1.0)) * (high - low)
    gpu = system.gpu.model_copy(update={"memory_bytes": int(cap)})
    system = system.model_copy(update={"gpu": gpu})
    return StageSpace(model, system, work, layout, allow_offload=draw(st.booleans()),
                      single_recompute=draw(st.booleans()), equal_chunks=draw(st.booleans()))


@settings(max_examples=220, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces())
def test_cp_sat_equals_brute_force(space: StageSpace) -> None:
    choice = solve_stages(space, time_limit_s=30.0)
    unit = choice.unit if choice is not None else 1e-6
    brute = brute_force_stages(space, unit)
    if brute is None:
        assert choice is None
        rows = LayoutArrays.from_layouts([space.layout], space.work.global_batch)
        stage_lower_bounds(space.model, space.system, space.work, rows, free_recompute=True,
                           allow_offload=space.allow_offload)  # runs (it may or may not prove infeasibility)
        return
    assert choice is not None and choice.status == "optimal"
    assert choice.objective == brute[0]
    # The global search's bounds never exceed the optimum (in the same units: ⌈x⌉ ≥ x).
    lay = space.layout
    rows = LayoutArrays.from_layouts([lay], space.work.global_batch)
    for bound in (average_lower_bounds(space.model, space.system, space.work, rows, free_recompute=True),
                  stage_lower_bounds(space.model, space.system, space.work, rows, free_recompute=True,
                                     allow_offload=space.allow_offload)):
        assert float(bound[0]) * lay.interleave / unit <= brute[0] * (1 + 1e-9)
    # Bounding by the uniform split's step time (what the planner passes) keeps the optimum; when the uniform split
    # has unequal model chunks it is outside the per-stage space (priced with the schedule's loss by the table), and
    # the bound may leave nothing, but never a plan other than the optimum.
    split = uniform_split(space.model.num_layers, lay.pp)
    uniform = evaluate_split(space.model, space.system, space.work, lay, split)
    if uniform.fits:
        ub = uniform.step_time_s / (1 + space.system.software.step_overhead_fraction)
        bounded = solve_stages(space, time_limit_s=30.0, upper_bound_s=ub)
        assert bounded is not None or not space.even_chunks(np.array(split)).all()
        if bounded is not None:
            ref = brute[0] if bounded.unit == unit else brute_force_stages(space, bounded.unit)[0]
            assert bounded.objective == ref
    assert space.even_chunks(np.array(choice.layers)).all()  # with equal_chunks, only splits into equal chunks
    if space.equal_chunks:  # the equal-chunk options filtered from the unrestricted space's (as solve_row reuses them)
        every = bounded_options(dataclasses.replace(space, equal_chunks=False))
        reused = solve_stages(space, time_limit_s=30.0, options=every.equal_chunks(space))
        assert reused is not None and reused.objective == brute[0] and reused.options == choice.options
    # The reported numbers: the cost model's float evaluation of exactly the returned plan.
    ev = evaluate_split(space.model, space.system, space.work, space.layout, choice.layers,
                        choice.recompute_layers, choice.offload_pct)
    assert ev.fits
    # the closed form the solver optimises: the evaluation less the schedule's loss to unequal chunks (none when
    # the space keeps to equal chunks)
    assert ev.schedule_excess_s == 0.0 or not space.equal_chunks
    closed_s = ev.step_time_s / (1 + space.system.software.step_overhead_fraction) - ev.schedule_excess_s
    step_units = closed_s * lay.interleave / unit
    a, b = coefficients(space)
    slack = a + b  # each rounded-up term (a·⌈t⌉ + b·⌈tail⌉) adds less than one unit
    assert step_units <= choice.objective <= step_units + slack
    if space.single_recompute and space.layout.recompute == Recompute.FULL:
        v = lay.interleave
        ks = {k // v for k, n in zip(choice.recompute_layers, choice.layers, strict=True) if k < n}
        assert len(ks) <= 1  # one per-chunk count K (Megatron's block method)
        big_k = ks.pop() if ks else max(-(-n // v) for n in choice.layers)
        assert choice.recompute_layers == [chunk_recompute(big_k, n, v) for n in choice.layers]


@pytest.mark.parametrize(("local_batch", "zero"), [(None, 1), (4, 1), (4, 3)])
def test_uniform_split_equals_train_cost(local_batch: int | None, zero: int) -> None:
    """With the uniform split, the per-stage evaluation is ``train_cost``'s (same formulas, same composition), also
    with four schedules a step (``local_batch``: 16 sequences per dp rank, 4 per schedule) and FSDP under PP."""
    from shardplan.models import get_model

    model, system = get_model("llama-3.1-405b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=8192, global_batch=2048, local_batch=local_batch)
    lay = TrainLayout(tp=8, pp=16, dp=128, recompute=Recompute.FULL, recompute_layers=3, sequence_parallel=True,
                      zero_stage=zero)
    split = uniform_split(model.num_layers, lay.pp)
    assert split == [7] + [8] * 14 + [7]  # 126 = 16·7 + 14: the 14 middle ranks take one more
    ev = evaluate_split(model, system, work, lay, split)
    ref = train_cost(model, system, work, LayoutArrays.from_layouts([lay], work.global_batch))
    assert np.isclose(ev.step_time_s, float(ref.step_time_s[0]), rtol=1e-12)
    assert np.isclose(max(ev.memory_bytes), float(ref.peak_memory[0]), rtol=1e-12)
