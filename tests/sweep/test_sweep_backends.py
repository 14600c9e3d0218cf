"""The same rows whichever backend plans them: in-process, a process pool, or local Ray tasks."""

from __future__ import annotations

import pytest

from shardplan.sweep import run_sweep

TRAIN = {"model": ["llama-3.1-8b"], "hardware": ["dgx-h100"], "gpus": [8, 16, 32], "global_batch": [64],
         "seq_len": [2048]}
INFER = {"model": ["llama-3.1-8b"], "hardware": ["dgx-h100"], "gpus": [1, 2], "prompt_len": [512], "gen_len": [128],
         "request_rate": [4.0]}


def test_pool_equals_serial():
    for kind, axes in (("train", TRAIN), ("infer", INFER)):
        serial = run_sweep(kind, axes, backend="serial", tokens=1e12 if kind == "train" else None)
        pool = run_sweep(kind, axes, backend="pool", workers=2, tokens=1e12 if kind == "train" else None)
        assert pool.points == serial.points


def test_ray_equals_pool():
    pytest.importorskip("ray")
    pool = run_sweep("train", TRAIN, backend="pool", workers=2)
    ray = run_sweep("train", TRAIN, backend="ray", workers=2)
    assert ray.points == pool.points
