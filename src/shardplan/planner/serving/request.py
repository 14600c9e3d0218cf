"""A serving request: model, machines, workload, batch mode, latency limits, pins and solver limits."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.serving.cost import InferWorkload
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.planner.serving.knobs import InferObjective


class InferRequest(BaseModel):
    """What to plan: model, machines, workload, batch mode, limits, pins (None = free), solver limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    system: SystemSpec
    num_gpus: Annotated[int, Field(ge=1)]
    workload: InferWorkload
    batch: Annotated[int, Field(ge=1)] | None = Field(None, description="Pinned sequences per replica.")
    max_batch: bool = Field(False, description="Every layout runs its largest batch that fits.")
    max_ttft_s: Annotated[float, Field(gt=0)] | None = None
    max_tpot_s: Annotated[float, Field(gt=0)] | None = None
    objective: InferObjective = InferObjective.THROUGHPUT
    tp: Annotated[int, Field(ge=1)] | None = None
    pp: Annotated[int, Field(ge=1)] | None = None
    ep: Annotated[int, Field(ge=1)] | None = None
    cross_node_tp: bool = False
    pareto: bool = False
    top_k: Annotated[int, Field(ge=1, le=50)] = 1
    time_limit_s: Annotated[float, Field(gt=0)] = 10.0
    seed: int = 0
    max_rows: Annotated[int, Field(ge=1)] = 50_000
