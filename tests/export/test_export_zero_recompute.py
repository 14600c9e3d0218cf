"""A per-stage plan whose one recompute count is 0 (``recompute full``, ``recompute_layers 0``: what the planner
returns under ``--export`` when no rank needs recompute) recomputes nothing, and every exporter says so in the
framework's own terms. The framework check (benchmarks/frameworks) found torchtitan's exporter dividing by zero
on it and Megatron's writing ``--recompute-granularity full --recompute-num-layers 0``."""

from __future__ import annotations

import json
import tomllib

from export_plans import target

from shardplan.cli.export import export_train

# Llama-3.1-405B as `shardplan train ... --gpus 1024 --pp 16 --interleave 1 --export torchtitan` planned it
PLAN = target("llama-3.1-405b", num_gpus=1024, seq_len=8192, tp=8, pp=16, dp=8, microbatch_size=1,
              num_microbatches=64, global_batch=512, recompute="full", recompute_layers=0, zero_stage=1,
              sequence_parallel=True, stage_layers=[4, 6, 6, 7, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 8],
              stage_recompute_layers=[0] * 16)


def test_megatron_writes_no_recompute_flags() -> None:
    # arguments.py: --recompute-granularity defaults to None, which is no activation recomputation
    args = [ln.split()[0] for ln in export_train("megatron", PLAN).text.splitlines() if not ln.startswith("#")]
    assert not [a for a in args if a.startswith("--recompute")]
    assert "recompute none" in export_train("megatron", PLAN).text  # the header's layout line


def test_torchtitan_checkpointing_mode_none() -> None:
    # job_config.py ActivationCheckpoint.mode: "selective", "full" or "none"
    assert tomllib.loads(export_train("torchtitan", PLAN).text)["activation_checkpoint"] == {"mode": "none"}


def test_deepspeed_has_no_activation_checkpointing_section() -> None:
    plan = target("llama-3.1-8b", num_gpus=8, seq_len=4096, dp=8, microbatch_size=1, num_microbatches=1,
                  global_batch=8, recompute="full", recompute_layers=0, zero_stage=1)
    cfg = json.loads(export_train("deepspeed", plan).text)
    assert "activation_checkpointing" not in cfg and cfg["zero_optimization"]["stage"] == 1
