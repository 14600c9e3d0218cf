"""Expansion, dedupe, and rows: each point equals the single plan; time to train and cost by hand."""

from __future__ import annotations

import math

import pytest

import shardplan
from shardplan.errors import ShardplanError
from shardplan.sweep import expand, run_sweep
from shardplan.sweep.prices import Price, PriceFile

TRAIN = {"model": ["llama-3.1-8b"], "hardware": ["dgx-h100"], "gpus": [8, 16], "global_batch": [32],
         "seq_len": [2048]}


def test_equal_requests_are_planned_once():
    axes = {**TRAIN, "hardware": ["dgx-h100", "DGX-H100"], "gpus": [8]}
    exp = expand("train", axes)
    assert len(exp.points) == 2 and len(exp.requests) == 1
    assert exp.points[0].key == exp.points[1].key
    serve = expand("infer", {"model": ["llama-3.1-8b"], "hardware": ["dgx-h100"], "gpus": [1, 2], "prompt_len": [512],
                             "gen_len": [128], "request_rate": [1.0, 5.0, 10.0]})
    assert len(serve.points) == 6 and len(serve.requests) == 2  # the rate does not change the plan


def test_grid_order_gpus_fastest():
    exp = expand("train", {**TRAIN, "seq_len": [1024, 2048]})
    assert [(p.labels["seq_len"], p.labels["num_gpus"]) for p in exp.points] == [
        (1024, 8), (1024, 16), (2048, 8), (2048, 16)]


def test_bad_names_fail_before_planning():
    with pytest.raises(ShardplanError) as e:
        expand("train", {**TRAIN, "hardware": ["dgx-h100", "dgx-h999"]})
    assert str(e.value).startswith("hardware: unknown system 'dgx-h999'")
    with pytest.raises(ShardplanError, match=r"^model: "):
        expand("train", {**TRAIN, "model": ["llama-3.1-8b", "llama-9"]})
    with pytest.raises(ShardplanError, match=r"^dtype: "):
        expand("train", {**TRAIN, "dtype": ["bf16", "bf17"]})


def test_point_equals_single_plan_and_hand_calculations():
    price = 6.155
    prices = PriceFile(prices={"h100-sxm": Price(usd_per_gpu_hour=price, source="test", read_on="2026-09-20")})
    tokens = 15e12
    res = run_sweep("train", TRAIN, tokens=tokens, prices=prices, backend="serial")
    for row in res.points:
        single = shardplan.plan_training("llama-3.1-8b", "dgx-h100", gpus=row["num_gpus"], global_batch=32,
                                         seq_len=2048)
        assert row["plan"] == single.plan.model_dump(mode="json")
        assert row["metrics"] == single.metrics.model_dump(mode="json")
        assert row["memory"] == single.memory.model_dump(mode="json")
        assert row["status"] == single.status
        # by hand: tokens per step / step time, then tokens / throughput
        step = row["metrics"]["step_time_s"]
        tps = 32 * 2048 / step
        assert row["time_to_train_s"] == pytest.approx(tokens / tps, rel=1e-9)
        assert row["gpu_hours"] == pytest.approx(row["num_gpus"] * tokens / tps / 3600, rel=1e-9)
        assert row["cost"]["run_usd"] == pytest.approx(price * row["num_gpus"] * tokens / tps / 3600, rel=1e-9)
        assert row["cost"]["usd_per_million_tokens"] == pytest.approx(price * row["num_gpus"] / 3600 / tps * 1e6,
                                                                      rel=1e-9)
    small, big = res.points
    assert small["scaling_efficiency"] == 1.0
    assert big["scaling_efficiency"] == pytest.approx(
        (big["metrics"]["tokens_per_s"] / 16) / (small["metrics"]["tokens_per_s"] / 8))


def test_infeasible_points_are_rows_with_reasons():
    res = run_sweep("infer", {"model": ["llama-3.1-70b"], "hardware": ["dgx-h100"], "gpus": [1, 12],
                              "prompt_len": [1024], "gen_len": [256]}, backend="serial")
    one, twelve = res.points
    assert one["status"] == "infeasible" and "GPU memory" in one["reason"] and one["plan"] is None
    assert twelve["status"] == "infeasible" and "multiple of 8" in twelve["reason"]  # not whole nodes
    assert res.summary["infeasible"] == 2 and res.summary["unique_requests"] == 1


def test_serving_fleet_by_hand():
    rate, gen = 7.0, 128
    res = run_sweep("infer", {"model": ["llama-3.1-8b"], "hardware": ["dgx-h100"], "gpus": [1, 2, 4],
                              "prompt_len": [512], "gen_len": [gen], "request_rate": [rate]},
                    options={"max_tpot_s": 0.03}, backend="serial")
    fleets = []
    for row in res.points:
        m, p = row["metrics"], row["plan"]
        assert m["tpot_s"] <= 0.03
        # continuous batching at saturation (the serving default): the replicas' request capacity times gen
        tps = m["capacity_requests_per_s"] * gen
        assert m["tokens_per_s"] == pytest.approx(tps, rel=1e-9) and p["batch_size"] >= 1
        copies = math.ceil(rate * gen / tps)
        assert row["copies"] == copies and row["fleet_gpus"] == copies * row["num_gpus"]
        assert row["meets_rate"] == (tps >= rate * gen)
        fleets.append(row["fleet_gpus"])
    picked = [r for r in res.points if r["min_gpus_pick"]]
    assert len(picked) == 1 and picked[0]["fleet_gpus"] == min(fleets)


def test_notebook_api_takes_range_text():
    api = shardplan.sweep_training("llama-3.1-8b", "dgx-h100", gpus="8:16:x2", global_batch=32, seq_len=2048,
                                   tokens="15T", workers=1)
    direct = run_sweep("train", TRAIN, tokens=15e12, backend="serial")
    assert api.points == direct.points
