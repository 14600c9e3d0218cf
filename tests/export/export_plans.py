"""Shared inputs of the exporter tests (imported by name; conftest.py holds the fixtures): two fixed plans (not
planner output, so the goldens change only when an exporter does), the flag/key lists, a golden-file helper."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shardplan.cli.export.base import TrainTarget
from shardplan.costmodel.training.report import OffloadOut, TrainPlanOut
from shardplan.models import resolve_model

DATA = Path(__file__).resolve().parents[1] / "data" / "export"
GOLDEN = DATA / "golden"


def plan_out(**kw: Any) -> TrainPlanOut:
    base = dict(tp=1, pp=1, dp=1, ep=1, cp=1, microbatch_size=1, num_microbatches=1, global_batch=1, interleave=1,
                recompute="none", recompute_layers=None, zero_stage=0, sequence_parallel=False)
    off = {k: kw.pop(k) for k in ("weights", "optimizer", "activations") if k in kw}
    return TrainPlanOut(**(base | kw), offload=OffloadOut(**({"weights": 0.0, "optimizer": 0.0, "activations": 0.0}
                                                             | off)))


def target(model: str, *, num_gpus: int, seq_len: int, attention: str = "flash", dropout: bool = False,
           hardware: str = "", dtype: str = "bf16", grad_dtype: str = "fp32", **plan: Any) -> TrainTarget:
    return TrainTarget(plan=plan_out(**plan), model=resolve_model(model), seq_len=seq_len, num_gpus=num_gpus,
                       gpus_per_node=8, hardware=hardware, dtype=dtype, grad_dtype=grad_dtype, attention=attention,
                       dropout=dropout)


# GPT-3 175B on 64 A100s as Korthikanti et al. 2022 (Table 3/5) ran it: TP=8 PP=8, interleaved, selective recompute.
GPT3 = target("gpt3-175b", num_gpus=64, seq_len=2048, attention="unfused", dropout=True, hardware="dgx-a100-80gb",
              tp=8, pp=8, dp=1, microbatch_size=1, num_microbatches=64, global_batch=64, interleave=3,
              recompute="selective", sequence_parallel=True)
# What `shardplan train --model llama-3.1-70b --hardware dgx-h100 --gpus 64 --global-batch 256 --seq-len 8192` chose.
LLAMA70 = target("llama-3.1-70b", num_gpus=64, seq_len=8192, hardware="dgx-h100", tp=4, pp=1, dp=8, cp=2,
                 microbatch_size=1, num_microbatches=32, global_batch=256, zero_stage=2, sequence_parallel=True)
GOLDEN_PLANS = {"gpt3-175b": GPT3, "llama-3.1-70b": LLAMA70}

# Less common corners: MoE with MLA and dense first layers, uneven pipeline, partial recompute, offload, fp8.
CORNERS = {
    "deepseek-v3-ep": target("deepseek-v3", num_gpus=256, seq_len=4096, tp=1, pp=16, dp=16, ep=16,
                             microbatch_size=1, num_microbatches=64, global_batch=1024, interleave=1,
                             recompute="full", recompute_layers=2, zero_stage=1, dtype="fp8"),
    "llama-405b-uneven": target("llama-3.1-405b", num_gpus=512, seq_len=8192, tp=8, pp=16, dp=4, microbatch_size=1,
                                num_microbatches=64, global_batch=256, interleave=2, recompute="full",
                                zero_stage=1, sequence_parallel=True),
    "mixtral-offload": target("mixtral-8x7b", num_gpus=16, seq_len=4096, tp=2, pp=2, dp=4, ep=4, microbatch_size=2,
                              num_microbatches=6, global_batch=48, interleave=2, recompute="selective",
                              zero_stage=1, sequence_parallel=True, optimizer=1.0, activations=0.5),
    "qwen3-zero3": target("qwen3-30b-a3b", num_gpus=8, seq_len=4096, tp=1, pp=1, dp=8, microbatch_size=2,
                          num_microbatches=4, global_batch=64, zero_stage=3, grad_dtype="bf16", optimizer=0.4),
    "qwen2.5-fp16": target("qwen2.5-7b", num_gpus=8, seq_len=4096, tp=2, pp=1, dp=4, microbatch_size=1,
                           num_microbatches=8, global_batch=32, dtype="fp16"),
    "gemma-partial-rc": target("gemma-2-9b", num_gpus=16, seq_len=8192, tp=2, pp=2, dp=4, microbatch_size=1,
                               num_microbatches=8, global_batch=32, recompute="full", recompute_layers=7,
                               zero_stage=1, sequence_parallel=True),
}


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def check_golden(name: str, text: str) -> None:
    """Compare with tests/data/export/golden/NAME; SHARDPLAN_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("SHARDPLAN_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path} (run with SHARDPLAN_UPDATE_GOLDEN=1)"
    assert text == path.read_text(), f"{name} differs from its golden file"
