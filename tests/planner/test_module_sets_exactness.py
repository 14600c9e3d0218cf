"""The table's recompute-module choice equals a brute force over every module set (small random instances).

Instances: random dense or MoE shapes (with flash or unfused attention, dropout or not) under selective recompute,
PP 1–4, with the GPU memory set between the leanest module set's need and the default set's (core_attn), so the
default does not fit and some sets do. The brute force costs every valid set with ``train_cost`` (no linear model)
and keeps the fitting set with the fastest slowest stage (ties: fewer modules, then the lower mask); the table's
added row must be that set, and its numbers the cost model's.
"""

import dataclasses
import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.costmodel.training.evaluate import fits
from shardplan.costmodel.training.knobs import RECOMPUTE_MODULES, RECOMPUTE_POLICIES, modules_mask
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.recompute_modules import NESTED
from shardplan.costmodel.training.step import train_cost
from shardplan.costmodel.training.table import build_train_table
from shardplan.hardware import get_system
from shardplan.hardware.spec import AttentionKernel
from shardplan.models.spec import MlpKind, ModelSpec, MoESpec


def _sets(moe: bool) -> list[tuple[str, ...]]:
    # the planner chooses among Megatron's modules; other frameworks' policies are priced only when pinned
    names = [m for m in RECOMPUTE_MODULES if (moe or m not in ("moe_act", "shared_experts", "moe"))
             and m not in RECOMPUTE_POLICIES]
    out = []
    for k in range(1, len(names) + 1):
        for combo in itertools.combinations(names, k):
            if not any(a in combo and b in combo for a, inner in NESTED.items() for b in inner):
                out.append(combo)
    return out


@st.composite
def instances(draw: st.DrawFn):
    heads = draw(st.sampled_from([8, 16]))
    moe = None
    if draw(st.booleans()):
        moe = MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=draw(st.sampled_from([512, 1024])),
                      num_shared_experts=draw(st.sampled_from([0, 1])), shared_expert_ffn_hidden_size=512,
                      first_dense_layers=draw(st.sampled_from([0, 1])))
    model = ModelSpec(name="rand", num_layers=draw(st.integers(4, 8)), hidden_size=heads * 128, num_heads=heads,
                      num_kv_heads=heads // 4, ffn_hidden_size=heads * 512,
                      mlp=draw(st.sampled_from(list(MlpKind))),
                      vocab_size=32000, moe=moe)
    system = get_system(draw(st.sampled_from(["dgx-a100-80gb", "dgx-h100"])))
    pp = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([1, 2]))
    lay = TrainLayout(tp=tp, pp=pp, dp=1, microbatch=draw(st.sampled_from([1, 2])), recompute=Recompute.SELECTIVE,
                      sequence_parallel=tp > 1 and draw(st.booleans()))
    attention = draw(st.sampled_from([AttentionKernel.FLASH, AttentionKernel.UNFUSED]))
    work = TrainWorkload(seq_len=draw(st.sampled_from([1024, 4096])), global_batch=8 * lay.microbatch,
                         attention=attention, dropout=draw(st.booleans()), framework_bytes=0,
                         memory_headroom_bytes=0)
    sets = _sets(moe is not None)
    rows = LayoutArrays.from_layouts([dataclasses.replace(lay, recompute_modules=s) for s in sets]
                                     + [lay], work.global_batch)
    peaks = train_cost(model, system, work, rows).peak_memory
    lean, default = float(peaks[:-1].min()), float(peaks[-1])
    frac = draw(st.floats(0.0, 0.999))
    cap = lean + frac * (default - lean)  # usable bytes: the default set does not fit, the leanest does
    gpu = system.gpu.model_copy(update={"memory_bytes": int(cap)})
    return model, system.model_copy(update={"gpu": gpu}), work, lay, sets


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(inst=instances())
def test_module_choice_equals_brute_force(inst) -> None:
    model, system, work, lay, sets = inst
    base = LayoutArrays.from_layouts([lay], work.global_batch)
    table = build_train_table(model, system, work, base, allow_offload=False, partial_recompute=False)
    rows = LayoutArrays.from_layouts([dataclasses.replace(lay, recompute_modules=s) for s in sets],
                                     work.global_batch)
    cost = train_cost(model, system, work, rows)
    ok = fits(cost, system, work)
    slowest = np.max(np.stack([np.where(s.shape.exists, s.per_microbatch_s, 0.0) for s in cost.stages]), axis=0)
    if bool(table.fits[0]) or not ok.any():
        return  # the default fits after all (headroom rounding), or nothing does: nothing to choose
    assert len(table) == 2, "the chosen set is added beside the default"
    order = sorted(np.flatnonzero(ok), key=lambda i: (slowest[i], len(sets[i]), modules_mask(sets[i])))
    want = order[0]
    got = int(table.rows.sel[1])
    assert bool(table.fits[1])
    # the same slowest stage as the brute force's best set (sets equal in time may differ: core_attn under flash)
    got_i = next(i for i, s in enumerate(sets) if modules_mask(s) == got)
    assert slowest[got_i] == slowest[want]
    assert float(table.step_time_s[1]) == float(cost.step_time_s[got_i])
