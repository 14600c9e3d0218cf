"""DeepSpeed's own config code on shardplan's DeepSpeed exports (runs inside the deepspeed environment; stdin:
the manifest entries, stdout: one JSON line of results).

Per export: ``DeepSpeedConfig(path, mpu)`` — the JSON parser, the pydantic ZeRO / offload / activation-checkpointing
models, the batch-size assertion (``train_batch_size == micro × accumulation × data-parallel size``) and the
sanity checks. The data-parallel size comes from ``mpu.get_data_parallel_world_size()`` as under
Megatron-DeepSpeed; DeepSpeedConfig reads it only inside an initialised process group, so a one-process gloo
group is started (no GPU). Then the two rules ``deepspeed.initialize`` enforces on layouts before touching a GPU
are checked against the plan, quoting DeepSpeed's source: pipeline parallelism with ZeRO ≥ 2
(``runtime/pipe/engine.py``) and native MoE with ZeRO-3 (``runtime/engine.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")

import deepspeed
import torch.distributed
from common import framework_error, run
from deepspeed.runtime.config import DeepSpeedConfig


class FakeMPU:
    """The model-parallel unit Megatron-DeepSpeed hands DeepSpeed, with the plan's degrees."""

    def __init__(self, plan: dict) -> None:
        self.plan = plan

    def get_data_parallel_world_size(self) -> int:
        return self.plan["dp"]

    def get_model_parallel_world_size(self) -> int:
        return self.plan["tp"]

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self.plan["pp"]

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_rank(self) -> int:
        return 0


def _source_line(path: str, needle: str) -> str:
    """The line of DeepSpeed's source holding ``needle`` (the rule quoted in a rejection)."""
    full = os.path.join(os.path.dirname(deepspeed.__file__), path)
    with open(full) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines, 1):
        if needle in line:
            return f"{path}:{i}: {line.strip()}"
    return f"{path}: (no line with {needle!r})"


def _error(e: BaseException) -> str:
    return framework_error(e, ("",))  # the innermost frame, whichever file


def check(entry: dict) -> dict:
    plan = entry["plan"]
    out = {"case": entry["case"], "format": "deepspeed"}
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            cfg = DeepSpeedConfig(entry["path"], mpu=FakeMPU(plan))
    except Exception as e:
        return out | {"status": "rejected", "stage": "DeepSpeedConfig", "message": _error(e)}
    out |= {"status": "accepted", "world_size_dp": cfg.world_size, "zero_stage": cfg.zero_optimization_stage,
            "train_batch_size": cfg.train_batch_size, "gradient_accumulation_steps": cfg.gradient_accumulation_steps}
    if plan["pp"] > 1 and cfg.zero_optimization_stage >= 2:
        return out | {"status": "rejected", "stage": "PipelineEngine", "message": _source_line(
            "runtime/pipe/engine.py", "incompatible with pipeline parallelism")}
    if plan["ep"] > 1 and cfg.zero_optimization_stage == 3:
        return out | {"status": "rejected", "stage": "deepspeed.initialize", "message": _source_line(
            "runtime/engine.py", "Native DeepSpeed MoE is not supported with ZeRO Stage 3")}
    if cfg.zero_optimization_stage != plan["zero_stage"]:
        out |= {"status": "mismatch", "message": f"ZeRO stage {cfg.zero_optimization_stage}, plan {plan['zero_stage']}"}
    return out


def main() -> None:
    entries = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        deepspeed.init_distributed(dist_backend="gloo")
    run(check, "deepspeed", _error, entries)


if __name__ == "__main__":
    main()
