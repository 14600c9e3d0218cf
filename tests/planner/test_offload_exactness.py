"""The factored CP-SAT model returns the brute-force optimum over the same grid and cost table.

Per knob row: CP-SAT restricted to a coarse percent grid (multiples of 25 or 10) must reach exactly the least
integer objective a numpy enumeration of every grid placement finds, and the float cost model of its choice
must match the float brute-force optimum within the scaling resolution. Over rows: ``plan_offload`` with
every bound and pruning on must pick a plan as good as exhaustive per-row brute force.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.costmodel.offload.evaluate import evaluate_row
from shardplan.costmodel.offload.policy import Knobs, OffloadWorkload, default_capacities
from shardplan.costmodel.offload.table import build_offload_table
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.offload.cpsat import brute_force_row, grid_placements, int_objective, int_row, solve_row
from shardplan.planner.offload.solve import OffloadRequest, candidate_knobs, plan_offload
from shardplan.units import GiB

MODELS = ("opt-6.7b", "opt-30b", "mixtral-8x7b", "llama-2-70b")


def _table(model: str, system: str, *, b: int, k: int, cpu_attn: bool, cw: bool, ck: bool, prompt: int, gen: int,
           cpu_gib: float, disk_gib: float):
    s = get_system(system)
    caps = default_capacities(s, cpu_mem=cpu_gib * GiB, disk=disk_gib * GiB)
    knobs = Knobs.of(gpu_batch=[b], num_batches=[k], cpu_attention=[cpu_attn], compress_weights=[cw],
                     compress_kv=[ck])
    work = OffloadWorkload(prompt_len=prompt, gen_len=gen, decode_segments=2)
    return build_offload_table(get_model(model), s, work, knobs, caps)


@st.composite
def rows(draw: st.DrawFn):
    return _table(
        draw(st.sampled_from(MODELS)), draw(st.sampled_from(["gcp-t4", "a6000-ws", "rtx4090-pc"])),
        b=draw(st.sampled_from([1, 4, 16, 48])), k=draw(st.sampled_from([1, 2, 4])), cpu_attn=draw(st.booleans()),
        cw=draw(st.booleans()), ck=draw(st.booleans()), prompt=draw(st.sampled_from([64, 256, 512])),
        gen=draw(st.sampled_from([2, 8, 32])), cpu_gib=draw(st.sampled_from([16, 48, 100, 200])),
        disk_gib=draw(st.sampled_from([0, 100, 1500])))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows())
def test_cpsat_equals_brute_force_on_a_25_percent_grid(table) -> None:
    row = int_row(table, 0)
    x_bf, obj_bf = brute_force_row(row, 25)
    sol = solve_row(row, step=25)
    if x_bf is None:
        assert sol.status == "infeasible"
        return
    assert sol.status == "optimal"
    assert sol.objective == obj_bf
    obj, ok = int_objective(row, sol.pct[None])
    assert ok[0] and int(obj[0]) == sol.objective


@pytest.mark.parametrize("case", [
    dict(model="opt-30b", system="gcp-t4", b=48, k=3, cpu_attn=True, cw=False, ck=False, prompt=512, gen=32,
         cpu_gib=100, disk_gib=1500),
    dict(model="mixtral-8x7b", system="rtx4090-pc", b=16, k=2, cpu_attn=False, cw=False, ck=True, prompt=256, gen=8,
         cpu_gib=48, disk_gib=200),
])
def test_cpsat_equals_brute_force_on_a_10_percent_grid(case: dict) -> None:
    table = _table(**case)
    row = int_row(table, 0)
    x_bf, obj_bf = brute_force_row(row, 10)
    sol = solve_row(row, step=10)
    assert x_bf is not None and sol.status == "optimal"
    assert sol.objective == obj_bf
    # the float cost model agrees within the scaling resolution: nothing on the grid is faster
    grid = grid_placements(10) / 100
    cost = evaluate_row(table, 0, grid)
    best_float = float(np.where(cost.fits, cost.total_s, np.inf).min())
    mine = float(evaluate_row(table, 0, sol.pct[None] / 100).total_s[0])
    assert best_float * (1 - 1e-12) <= mine <= best_float * (1 + 1e-6)
    assert sol.objective * row.unit == pytest.approx(mine, rel=1e-3)


@pytest.mark.parametrize("model,system,cpu_gib", [("opt-30b", "gcp-t4", 60), ("mixtral-8x7b", "rtx4090-pc", 60)])
def test_planner_matches_exhaustive_search_over_rows(model: str, system: str, cpu_gib: float) -> None:
    """Bounds and pruning lose nothing: per-row brute force over every knob row finds no better plan."""
    s = get_system(system)
    caps = default_capacities(s, cpu_mem=cpu_gib * GiB)
    work = OffloadWorkload(prompt_len=256, gen_len=8, decode_segments=2)
    req = OffloadRequest(model=get_model(model), system=s, workload=work, capacities=caps,
                         gpu_batch_sizes=(4, 16, 48), num_gpu_batches=(1, 3), allow_compression=True, percent_step=25)
    plan = plan_offload(req)
    assert plan.status == "optimal"
    table = build_offload_table(req.model, s, work, candidate_knobs(req), caps)
    best = 0.0
    for r in range(len(table)):
        x, _ = brute_force_row(int_row(table, r), 25)
        if x is not None:
            t = float(evaluate_row(table, r, x[None] / 100).total_s[0])
            best = max(best, table.knobs.block[r] * work.gen_len / t)
    assert plan.metrics.tokens_per_s == pytest.approx(best, rel=1e-6)
