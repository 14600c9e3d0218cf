"""``validate --group memory``: the peak GPU memory of published runs against the cost model's.

Each record of ``data/memory_runs.json`` quotes a peak that its framework logged: Megatron-Bridge's is PyTorch's peak
allocated bytes on a rank, divided by 1e9 (decimal GB, ``train_utils.report_memory``); torchtitan's is the peak its
caching allocator reserved (GiB), which also holds freed blocks kept for reuse and their fragmentation, so the model
stays below it by what ``--memory-headroom`` stands for. PyTorch counts the tensors its caching
allocator hands out, so the cost model's counterpart is the peak stage's weights, gradients, optimizer state and
activations: ``total_bytes − framework_bytes`` (the CUDA context, NCCL's channel buffers and the userbuffers are
allocated outside PyTorch; its GEMM workspaces, at most 128 MiB, are inside and left out). A record that names its
framework is priced with what that framework fixes (``frameworks.framework_system``: torchtitan's fp32 loss).
What the records ran and the model does not see: CUDA-graph memory pools, HybridEP's dispatch buffers (~0.3 GiB at
these sizes, DeepEP ``docs/Hybrid-EP_Implementation.md`` §4.2) and a busier-than-average EP rank.
"""

from __future__ import annotations

from typing import Any

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.domains import job_system
from shardplan.models import get_model
from shardplan.units import GiB
from shardplan.validation.runs import Case, load_records

UNIT_BYTES = {"GB": 1e9, "GiB": float(GiB)}


def record_layout(lay: dict[str, Any]) -> TrainLayout:
    """A record's ``layout`` entry (data/memory_runs.json, data/ab_runs.json) as a ``TrainLayout``."""
    mods = lay["recompute_modules"]
    return TrainLayout(tp=lay["tp"], pp=lay["pp"], dp=lay["dp"], cp=lay["cp"], ep=lay["ep"], etp=lay["etp"],
                       microbatch=lay["microbatch"], interleave=lay["interleave"],
                       recompute=Recompute(lay["recompute"]), recompute_modules=tuple(mods) if mods else None,
                       sequence_parallel=lay["sequence_parallel"], zero_stage=lay["zero_stage"])


def record_workload(w: dict[str, Any]) -> TrainWorkload:
    return TrainWorkload(seq_len=w["seq_len"], global_batch=w["global_batch"], dtype=w["dtype"],
                         grad_dtype=w["grad_dtype"])


def measured_peak(r: dict[str, Any]) -> tuple[str, float]:
    """A record's measured peak as (quantity, GiB): allocated (Megatron-Bridge) or reserved (torchtitan)."""
    m = r["measured"]
    kind = "peak_allocated" if "peak_allocated" in m else "peak_reserved"
    return f"{kind}_gib", float(m[kind]) * UNIT_BYTES[m["unit"]] / GiB


def memory_setup(r: dict[str, Any]) -> tuple[Any, Any, int, TrainWorkload, TrainLayout, float]:
    """A record as (model, system, gpus, workload, layout, measured GiB)."""
    model = get_model(r["model"])
    system = framework_system(job_system(get_system(r["hardware"]), r["gpus"]), r.get("framework"), model)
    measured = measured_peak(r)[1]
    return (model, system, r["gpus"], record_workload(r["workload"]), record_layout(r["layout"]),
            measured)


def tensor_bytes(memory: Any) -> float:
    """The part of a plan's peak-stage memory that PyTorch's allocator counts (module docstring)."""
    return float(memory.total_bytes - memory.framework_bytes)


def memory_cases() -> list[Case]:
    out = []
    for r in load_records("memory_runs"):
        model, system, n, work, layout, measured = memory_setup(r)

        def predict(model: Any = model, system: Any = system, n: int = n, work: TrainWorkload = work,
                    layout: TrainLayout = layout) -> float:
            return tensor_bytes(estimate_training(model, system, n, work, layout).memory) / GiB

        out.append(Case("memory", r["id"], measured_peak(r)[0], measured, predict))
    return out
