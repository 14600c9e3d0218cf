"""The interval at the optimum: hand cases of its definition, the keys a plan reads, and the planner carrying it on
the layout it chose only (not on a given layout, a plan with one candidate, or a calibrated system)."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pytest

from shardplan.costmodel.core.bands import OPTIMUM_JOB, compute_optimum_table, interval, interval_for, within
from shardplan.hardware import get_system
from shardplan.hardware.spec import Calibration, with_calibration


def _shipped() -> dict:
    return json.loads(resources.files("shardplan.data").joinpath("error_bands.json").read_text())["bands"]


def test_interval_hand_case() -> None:
    # 41 log ratios −0.40, −0.39, …, 0.00: the 7.5% quantile sits on index 3 (−0.37), the 92.5% on 37 (−0.03)
    ratios = [-0.40 + 0.01 * k for k in range(41)]
    lo, hi = interval(ratios)
    assert lo == pytest.approx(math.exp(-0.37) - 1, abs=1e-4) and hi == pytest.approx(math.exp(-0.03) - 1, abs=1e-4)


def test_table_keys_pool_and_count() -> None:
    """Per key from 8 cases, MoE keys pooled into 'moe', the others into 'dense', every case into 'all'; a key
    without its own entry reads its class's pool, so a dense plan never carries MoE runs while its pool exists."""
    rows = [("h100", 1.0, 1 / 0.9)] * 8 + [("h100-moe", 0.7, 1.0)] * 8 + [("b200-moe", 0.5, 1.0)]
    entry = compute_optimum_table(rows)
    assert entry["h100"] == pytest.approx([-0.1, -0.1], abs=1e-4)
    assert entry["h100-moe"] == pytest.approx([-0.3, -0.3], abs=1e-4)
    # the 9 MoE log ratios sorted: ln 0.5, then ln 0.7 eight times; 7.5% → index 0.6, 92.5% → index 7.4
    lo = math.log(0.5) + 0.6 * (math.log(0.7) - math.log(0.5))
    assert entry["moe"] == pytest.approx([math.exp(lo) - 1, -0.3], abs=1e-4)
    assert "b200-moe" not in entry and entry["cases"] == {"b200-moe": 1, "h100": 8, "h100-moe": 8}
    assert entry["dense"] == entry["h100"] and entry["pooled_cases"] == {"all": 17, "moe": 9, "dense": 8}
    assert interval_for(entry, "b200", moe=True) == entry["moe"] and interval_for(entry, "b200") == entry["dense"]
    assert interval_for(entry, "h100", moe=True) == entry["h100-moe"]
    # fewer than 8 dense runs in all: a dense plan elsewhere reads every case's interval
    sparse = compute_optimum_table([*rows[8:], ("a100", 1.0, 1.0)])
    assert "dense" not in sparse and interval_for(sparse, "b200") == sparse["all"]
    assert within(100.0, [-0.2, 0.05]) == pytest.approx([80.0, 105.0])
    assert within(10.0, [-0.2, 0.05], time=True) == pytest.approx([10 / 1.05, 12.5])


def test_shipped_intervals_lie_below_the_symmetric_band() -> None:
    """The planner's own picks were predicted faster than the tuned runs measured: on H100 the tuned runs' median
    sits below the plan, dense and MoE, and MoE further (the optimiser's curse is a one-sided miss)."""
    shipped = _shipped()
    opt, sym = shipped[OPTIMUM_JOB], shipped["train"]
    for key in ("h100", "h100-moe"):
        lo, hi = opt[key]
        assert lo < 0 and hi < sym[key] and math.log1p(-lo) > math.log1p(hi)
    assert opt["h100-moe"][0] < opt["h100"][0]
    assert opt["cases"]["h100"] >= 80 and opt["cases"]["h100-moe"] >= 20


def test_plan_carries_the_interval_only_where_it_chose() -> None:
    from shardplan.costmodel.training.evaluate import estimate_training
    from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
    from shardplan.models import get_model
    from shardplan.planner.training.solve import TrainRequest, plan_training

    shipped = _shipped()[OPTIMUM_JOB]
    model, h100 = get_model("llama-3.1-8b"), get_system("dgx-h100")
    work = TrainWorkload(seq_len=8192, global_batch=32)
    plan = plan_training(TrainRequest(model=model, system=h100, num_gpus=8, workload=work), explain=False)
    m = plan.metrics
    lo, hi = shipped["h100"]
    assert m.optimum_band_pct == pytest.approx([100 * lo, 100 * hi]) and m.optimum_band_runs == shipped["cases"]["h100"]
    assert m.optimum_tokens_per_s_range == pytest.approx([m.tokens_per_s * (1 + lo), m.tokens_per_s * (1 + hi)])
    assert m.optimum_step_time_s_range == pytest.approx([m.step_time_s / (1 + hi), m.step_time_s / (1 + lo)])
    # the same layout given: an estimate carries the symmetric band only
    q = plan.plan
    lay = TrainLayout(tp=q.tp, pp=q.pp, dp=q.dp, cp=q.cp, microbatch=q.microbatch_size, interleave=q.interleave,
                      recompute=q.recompute, zero_stage=q.zero_stage, sequence_parallel=q.sequence_parallel)
    est = estimate_training(model, h100, 8, work, lay).metrics
    assert est.step_time_s == pytest.approx(m.step_time_s) and est.optimum_band_pct is None and est.band_pct
    # every knob pinned: one candidate, nothing chosen
    pinned = plan_training(TrainRequest(model=model, system=h100, num_gpus=8, workload=work, tp=q.tp, pp=q.pp,
                                        dp=q.dp, cp=q.cp, microbatch=q.microbatch_size, interleave=q.interleave,
                                        recompute=q.recompute, zero_stage=q.zero_stage, offload="off",
                                        sequence_parallel=q.sequence_parallel), explain=False)
    assert pinned.solver.selector_rows == 1 and pinned.metrics.optimum_band_pct is None
    # a calibrated system: the intervals were measured on the presets
    cal = with_calibration(h100, Calibration(gemm_scale=0.9))
    assert plan_training(TrainRequest(model=model, system=cal, num_gpus=8, workload=work),
                         explain=False).metrics.optimum_band_pct is None


def test_pooled_keys_and_their_run_counts() -> None:
    """A generation without its own key reads its class's pool, with the pool's run count: a dense plan on H200 (3
    tuned runs) the dense pool, an MoE plan on A100 (none) the MoE pool."""
    from shardplan.costmodel.core.bands import optimum_band

    shipped = _shipped()[OPTIMUM_JOB]
    assert "h200" not in shipped and "a100-moe" not in shipped
    dense, n = optimum_band(get_system("hgx-h200"))
    assert dense == shipped["dense"] and n == shipped["pooled_cases"]["dense"]
    assert n == sum(v for k, v in shipped["cases"].items() if not k.endswith("-moe"))
    moe, m = optimum_band(get_system("dgx-a100-80gb"), moe=True)
    assert moe == shipped["moe"] and m == sum(v for k, v in shipped["cases"].items() if k.endswith("-moe"))
    assert m + n == shipped["pooled_cases"]["all"] == sum(shipped["cases"].values())


def test_moe_plan_reads_the_moe_interval() -> None:
    from shardplan.costmodel.training.layout import TrainWorkload
    from shardplan.models import get_model
    from shardplan.planner.training.solve import TrainRequest, plan_training

    shipped = _shipped()[OPTIMUM_JOB]
    plan = plan_training(TrainRequest(model=get_model("qwen3-30b-a3b"), system=get_system("dgx-h100"), num_gpus=16,
                                      workload=TrainWorkload(seq_len=4096, global_batch=1024)), explain=False)
    assert np.allclose(plan.metrics.optimum_band_pct, [100 * x for x in shipped["h100-moe"]])


def test_readme_states_the_shipped_h100_intervals() -> None:
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    got = re.search(r"On H100 that is (\d+)–(\d+)% of the prediction for dense models \((\d+) jobs\) and (\d+)–(\d+)% "
                    r"for MoE \((\d+) jobs\); a generation with fewer than 8 tuned runs reads its model class's pool "
                    r"\(dense (\d+)–(\d+)%, (\d+) jobs; MoE (\d+)–(\d+)%, (\d+)\)", text)
    assert got is not None
    shipped = _shipped()[OPTIMUM_JOB]
    want = []
    for key, n in (("h100", shipped["cases"]["h100"]), ("h100-moe", shipped["cases"]["h100-moe"]),
                   ("dense", shipped["pooled_cases"]["dense"]), ("moe", shipped["pooled_cases"]["moe"])):
        lo, hi = shipped[key]
        want += [round(100 * (1 + lo)), round(100 * (1 + hi)), n]
    assert [int(x) for x in got.groups()] == want
