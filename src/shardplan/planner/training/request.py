"""A training request: model, machines, workload, the user's pins and the solver's limits (checked here)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.core.layouts import divisors
from shardplan.costmodel.training.layout import Recompute, TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, valid_tp
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.planner.core.pins import require_allowed
from shardplan.planner.training.knobs import OffloadPolicy


class TrainRequest(BaseModel):
    """What to plan: model, machines, workload, pins (None = free) and solver limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    system: SystemSpec
    num_gpus: Annotated[int, Field(ge=1)]
    workload: TrainWorkload
    max_global_batch: Annotated[int, Field(ge=1)] | None = None
    fixed_global_batch: bool = True
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    cp: int | None = None
    microbatch: int | None = None
    interleave: int | None = None
    recompute: Recompute | None = None
    recompute_layers: Annotated[int, Field(ge=1)] | None = None
    sequence_parallel: bool | None = None
    zero_stage: int | None = None
    offload: OffloadPolicy = OffloadPolicy.AUTO
    max_cp: Annotated[int, Field(ge=1)] = 8
    max_interleave: Annotated[int, Field(ge=1)] = 8
    cross_node_tp: bool = False
    top_k: Annotated[int, Field(ge=1, le=50)] = 1
    time_limit_s: Annotated[float, Field(gt=0)] = 30.0
    seed: int = 0


def check_pins(req: TrainRequest) -> None:
    """Each pinned value must be possible on its own (the combination is checked by enumeration)."""
    m, n = req.model, req.num_gpus

    require_allowed("tp", req.tp, [t for t in valid_tp(m) if n % t == 0])
    require_allowed("pp", req.pp, [p for p in divisors(n) if p <= m.num_layers])
    require_allowed("dp", req.dp, divisors(n))
    require_allowed("cp", req.cp, [c for c in divisors(n) if req.workload.seq_len % c == 0])
    require_allowed("ep", req.ep, divisors(m.moe.num_experts) if m.moe else [1])
    require_allowed("zero", req.zero_stage, [0, 1, 2, 3])


def space_request(req: TrainRequest) -> SpaceRequest:
    node = req.system.gpus_per_node
    return SpaceRequest(
        num_gpus=req.num_gpus, tp=req.tp, pp=req.pp, dp=req.dp, ep=req.ep, cp=req.cp, microbatch=req.microbatch,
        interleave=req.interleave, recompute=req.recompute, sequence_parallel=req.sequence_parallel,
        zero_stage=req.zero_stage, max_tp=req.num_gpus if req.cross_node_tp else node,
        max_interleave=max(req.max_interleave, req.interleave or 1),
        max_cp=max(req.max_cp, req.cp or 1),
        max_batch=None if req.fixed_global_batch else req.max_global_batch,
    )
