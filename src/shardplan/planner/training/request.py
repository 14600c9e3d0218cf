"""A training request: model, machines, workload, the user's pins and the solver's limits (checked here)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.core.layouts import divisors
from shardplan.costmodel.training.cp_rules import a2a_heads_ok, check_cp_runs, chunked_cp_ok, recurrent_cp_ok
from shardplan.costmodel.training.frameworks import PYTORCH_CP, caps_for, cp_blocker
from shardplan.costmodel.training.layout import Recompute, TrainWorkload
from shardplan.costmodel.training.space import (
    ZERO2_PP,
    SpaceRequest,
    check_dtype,
    check_modules,
    valid_tp,
)
from shardplan.errors import ShardplanError
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
    etp: int | None = None  # expert tensor parallelism (MoE parallel folding); None: tp or 1, planner's choice
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
    uniform_stages: bool = False  # True: today's even split; False: per-stage layers/recompute/offload (CP-SAT)
    single_recompute_count: bool = False  # one full-recompute count on every rank (what an export can express)
    module_sets: bool = True  # False: Megatron's default selective module set only (an export other than Megatron)
    zero3_with_pp: bool = True  # False: ZeRO-3 with PP pruned (Megatron-LM and DeepSpeed exports cannot run it)
    zero3_with_ep: bool = True  # False: ZeRO-3 with EP pruned (DeepSpeed's MoE layer refuses the combination)
    recompute_modules: tuple[str, ...] | None = None  # pinned Megatron --recompute-modules (needs recompute selective)
    framework: str | None = None  # megatron, torchtitan or fsdp: only layouts it can run (None: every knob)
    pytorch_cp: bool = False  # CP runs as PyTorch's context_parallel (a torchtitan export): no windows or sinks
    top_k: Annotated[int, Field(ge=1, le=50)] = 1
    time_limit_s: Annotated[float, Field(gt=0)] = 30.0
    seed: int = 0


def pytorch_cp(req: TrainRequest) -> bool:
    """The plan's context parallelism is PyTorch's context_parallel (torchtitan, AutoModel), not Transformer
    Engine's."""
    return req.pytorch_cp or req.framework in PYTORCH_CP


def check_pins(req: TrainRequest) -> None:
    """Each pinned value must be possible on its own (the combination is checked by enumeration)."""
    m, n = req.model, req.num_gpus
    check_dtype(req.workload, req.system.gpu)

    require_allowed("tp", req.tp, [t for t in valid_tp(m) if n % t == 0])
    require_allowed("pp", req.pp, [p for p in divisors(n) if p <= m.num_layers])
    require_allowed("dp", req.dp, divisors(n))
    cps = [c for c in divisors(n) if req.workload.seq_len % c == 0 and chunked_cp_ok(m, req.workload.seq_len, c)]
    tps = [req.tp] if req.tp else valid_tp(m)
    if req.system.software.cp_comm_type == "a2a":  # all-to-all CP splits a TP rank's heads over the cp ranks
        cps = [c for c in cps if any(a2a_heads_ok(m, t, c) for t in tps)]
    cps = [c for c in cps if any(recurrent_cp_ok(m, t, c) for t in tps)]  # Mamba / GDN CP splits heads
    require_allowed("cp", req.cp, cps)
    if req.cp is not None:
        check_cp_runs(m, req.cp, req.system.software.cp_comm_type, pytorch=pytorch_cp(req))
    require_allowed("ep", req.ep, divisors(m.moe.num_experts) if m.moe else [1])
    if req.etp is not None:
        require_allowed("etp", req.etp, divisors(n) if m.moe else ([req.tp] if req.tp else []))
    require_allowed("zero", req.zero_stage, [0, 1, 2, 3])
    if req.framework is not None:
        caps = caps_for(req.framework, m)
        caps.check(tp=req.tp, pp=req.pp, interleave=req.interleave, cp=req.cp, ep=req.ep, zero=req.zero_stage,
                   recompute=req.recompute)
        caps.check_recompute(req.recompute_modules, req.recompute_layers)
    if req.pp is not None and req.pp > 1 and req.zero_stage == 2:
        raise ShardplanError(ZERO2_PP, field="zero")
    if req.pp is not None and req.pp > 1 and req.zero_stage == 3 and not req.zero3_with_pp:
        raise ShardplanError("ZeRO-3 with pipeline parallelism runs only in torchtitan (FSDP under PP): Megatron-LM "
                             "and DeepSpeed cannot; use --export torchtitan, zero ≤ 1 or pp = 1", field="zero")
    if req.recompute_layers is not None and req.recompute not in (None, Recompute.FULL):
        raise ShardplanError(f"--recompute-layers needs --recompute full (got --recompute {req.recompute})",
                             field="recompute-layers")
    if req.recompute_modules is not None:
        if req.recompute != Recompute.SELECTIVE:
            raise ShardplanError("recompute-modules needs --recompute selective", field="recompute_modules")
        check_modules(m, req.recompute_modules)
        if req.system.software.ep_comm_overlap and "moe" in req.recompute_modules:
            raise ShardplanError("moe cannot be recomputed with the system's ep_comm_overlap (Megatron's "
                                 "--overlap-moe-expert-parallel-comm); use moe_act or shared_experts",
                                 field="recompute_modules")
        if not req.module_sets and req.recompute_modules != ("core_attn",):
            raise ShardplanError("only --export megatron can express --recompute-modules other than core_attn",
                                 field="recompute_modules")


def selective_modules(req: TrainRequest) -> tuple[str, ...] | None:
    """The selective recompute module set every selective row runs: the user's pin, else the framework's own
    policy (torchtitan's op-level checkpointing), else None (Megatron's sets, searched by the table)."""
    if req.recompute_modules is not None or req.framework is None:
        return req.recompute_modules
    caps = caps_for(req.framework, req.model)
    return (caps.selective_policy,) if caps.selective_policy and Recompute.SELECTIVE in caps.recompute else None


def space_request(req: TrainRequest) -> SpaceRequest:
    node = req.system.gpus_per_node
    caps = caps_for(req.framework, req.model) if req.framework is not None else None
    return SpaceRequest(
        num_gpus=req.num_gpus, tp=req.tp, pp=req.pp, dp=req.dp, ep=req.ep, etp=req.etp, cp=req.cp,
        microbatch=req.microbatch, interleave=req.interleave, recompute=req.recompute,
        sequence_parallel=req.sequence_parallel,
        zero_stage=req.zero_stage, max_tp=req.num_gpus if req.cross_node_tp else node,
        max_interleave=max(req.max_interleave, req.interleave or 1),
        max_cp=max(req.max_cp, req.cp or 1),
        max_batch=None if req.fixed_global_batch else req.max_global_batch,
        gpu_memory_bytes=float(req.system.gpu.memory_bytes),
        zero3_with_pp=req.zero3_with_pp and (caps is None or caps.zero3_with_pp),
        zero3_with_ep=req.zero3_with_ep, recompute_modules=selective_modules(req), framework=caps,
        cp_heads_split=req.system.software.cp_comm_type == "a2a",
        cp_runs=cp_blocker(req.model, req.system.software.cp_comm_type, pytorch=pytorch_cp(req)) is None,
    )
