"""``validate --group memory``: peak memory of published Megatron-Bridge runs (data/memory_runs.json)."""

from __future__ import annotations

import dataclasses

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute
from shardplan.validation.groups import run_validation
from shardplan.validation.memory import memory_setup
from shardplan.validation.runs import load_records


def test_every_published_peak_is_predicted_within_15_percent() -> None:
    report = run_validation(["memory"])
    rows = [r for r in report.rows if r.group == "memory"]
    assert len(rows) == len(load_records("memory_runs")) >= 8
    for r in rows:
        assert r.error_pct is not None and abs(r.error_pct) <= 15.0, (r.id, r.error_pct)
    assert abs(report.summary["memory"].mean_signed_pct or 0.0) <= 5.0


@pytest.mark.parametrize(("modules", "ran"), [
    # Megatron-Bridge skill nemo-mbridge-perf-activation-recompute, Nemotron 3 Nano on 16 H100 (SKILL.md l.147-154):
    # no recompute and moe_act ran out of memory in iteration 1-2; moe and moe + layernorm completed 12 steps
    ((), False), (("moe_act",), False), (("moe",), True), (("moe", "layernorm"), True)])
def test_nemotron_nano_rows_that_ran_fit_and_the_oom_rows_do_not(modules: tuple[str, ...], ran: bool) -> None:
    record = next(r for r in load_records("memory_runs") if r["model"] == "nemotron-3-nano-30b-a3b")
    model, system, n, work, layout, _ = memory_setup(record)
    layout = dataclasses.replace(layout, recompute=Recompute.SELECTIVE if modules else Recompute.NONE,
                                 recompute_modules=modules or None)
    rep = estimate_training(model, system, n, work, layout)
    usable = rep.memory.capacity_bytes - rep.memory.headroom_bytes
    assert (rep.memory.total_bytes <= usable) == ran
