"""How each record's software stack ran: what its source, notes and ``software`` entry say about attention kernels,
communication overlap, gradient datatypes and recompute (read by the validation groups, sources in each record)."""

from __future__ import annotations

import re
from typing import Any

from shardplan.costmodel.training.frameworks import FRAMEWORKS
from shardplan.costmodel.training.layout import Recompute
from shardplan.hardware.spec import AttentionKernel


def source_text(r: dict[str, Any]) -> str:
    """A record's source title, URL and container, lower case: what the ``stack_*`` readers search."""
    return " ".join(str(r["source"].get(k, "")) for k in ("title", "url", "container_or_version")).lower()


def nemo_before(r: dict[str, Any], year: int, month: int) -> bool:
    """Whether a record names a NeMo container older than ``year.month`` (e.g. ``nvcr.io/nvidia/nemo:24.09``,
    ``NeMo24.03.01.framework``)."""
    version = re.search(r"nemo(?:[ :_-]|\.framework)?v?(\d\d)\.(\d\d)", source_text(r))
    return version is not None and (int(version.group(1)), int(version.group(2))) < (year, month)


def stack_attention(r: dict[str, Any]) -> AttentionKernel:
    """A record's fused attention kernel: FlashAttention-2 for torchtitan and llm-foundry (PyTorch SDPA, flash-attn),
    cuDNN for Transformer Engine stacks (preferred on Hopper+); GPUs without its curves use their scalar efficiency.
    A record's ``software.attention`` (with its source) overrides: a launcher that turns TE's fused attention off."""
    stated = (r.get("software") or {}).get("attention")
    if stated:
        return AttentionKernel(stated)
    text = source_text(r)
    if any(s in text for s in ("torchtitan", "llm-foundry", "llmfoundry", "mosaicml")):
        return AttentionKernel.FLASH2
    # TE prefers cuDNN FusedAttention on Hopper from v1.8 (commit 43569381c, 2024-06-13; tagged 2024-07-24): NeMo
    # containers before 24.07 ship an older TE that runs flash-attn 2.
    if nemo_before(r, 24, 7):
        return AttentionKernel.FLASH2
    return AttentionKernel.CUDNN


def stack_tp_overlap(r: dict[str, Any]) -> str:
    """How a record's stack overlaps sequence-parallel TP collectives: Transformer Engine userbuffers for Megatron-LM,
    NeMo and Megatron-Bridge unless the recorded config turns them off (``ub_tp_comm_overlap false``); a fixed share
    for torchtitan and llm-foundry, whose framework hides none of it unless a record states a share
    (``frameworks._TORCH_NATIVE``: DTensor TP blocks without async TP)."""
    text = source_text(r)
    notes = " ".join(map(str, r.get("notes", []))).lower()
    if any(s in text for s in ("torchtitan", "llm-foundry", "llmfoundry", "mosaicml")):
        return "share"
    return "share" if "ub_tp_comm_overlap false" in notes else "userbuffers"


def stack_p2p_overlap(r: dict[str, Any]) -> bool:
    """Whether a record's launcher overlaps interleaved-pipeline sends (``SoftwareSpec.overlap_p2p_comm``): the NVIDIA
    stacks do (docs/physics_sources.md); torchtitan, llm-foundry, AutoModel, MaxText and Llama 3's have no such flag."""
    text = source_text(r)
    return not any(s in text for s in ("torchtitan", "llm-foundry", "llmfoundry", "mosaicml", "automodel", "maxtext",
                                       "herd of models", "2407.21783"))  # the last two: the Llama 3 paper


# SoftwareSpec fields a record's ``software`` entry may set, each with its source in that entry.
STACK_FIELDS = ("ep_dispatcher", "ep_comm_overlap", "ep_delay_wgrad", "moe_drop_and_pad", "moe_router_padding",
                "moe_balanced_routing", "elementwise_kernels", "norm_kernel", "attention_unpad", "overlap_p2p_comm",
                "expert_mlp", "moe_host_sync", "overlap_grad_reduce", "loss_memory", "cp_comm_type",
                "recompute_early_stop", "ddp_bucket_params", "cross_entropy_fusion", "tp_overlap_rs", "mla_local_down")


def stack_software(r: dict[str, Any]) -> dict[str, Any]:
    """The ``SoftwareSpec`` fields of ``STACK_FIELDS`` a record's ``software`` entry sets, each with its source (the
    recipe at the framework's commit), over what the record's framework fixes (``frameworks.FRAMEWORKS``: llm-foundry's
    Composer FSDP prefetches BACKWARD_POST and gathers the weights in every microbatch's forward under SHARD_GRAD_OP);
    the rest keep Megatron-Core's defaults."""
    sw = r.get("software") or {}
    out = {k: sw[k] for k in STACK_FIELDS if k in sw}
    if "tp_comm_overlap_share" in sw:  # a recipe that turns TP communication overlap off (0.0)
        out["tp_comm_overlap"] = float(sw["tp_comm_overlap_share"])
    # fp8 primary weights (1-byte parameter gathers): Megatron-Bridge's fp8 recipes (mixed_precision.py@067f987
    # l.231-368 fp8_param_gather=True) and the records that state fp8_params (MLPerf's NeMo config_fp8.sh); the
    # other stacks gather 16-bit weights (NeMo 1.x fp8_params and torchtitan's float8 all-gather default off)
    bridge = "Megatron-Bridge" in str(r["source"].get("container_or_version"))
    out.setdefault("fp8_param_gather", bool(sw.get("fp8_params", bridge)))
    # Megatron-Bridge's performance recipes run Transformer Engine's cross entropy (perf configs since 2025-08,
    # scripts/performance/utils/helpers.py at v0.2.0, perf_recipes/_common.py@067f987 _benchmark_common)
    if bridge:
        out.setdefault("cross_entropy_fusion", "te")
        # its fp8 userbuffers configurations reduce-scatter proj/FC2 by ring exchange (training/comm_overlap.py@067f987:
        # RingExchangeOverlapCfg for proj_fprop and fc2_fprop in 8 of its 9 fp8 configurations)
        if r.get("precision") == "fp8":
            out.setdefault("tp_overlap_rs", "ring_exchange")
    out.setdefault("fp8_scaling", stack_fp8_scaling(r))
    framework = stack_framework(r)
    # what the framework fixes (frameworks.FRAMEWORKS: torchtitan's fp32 loss, PyTorch FSDP's SHARD_GRAD_OP gathering
    # the weights in every forward under Composer, 16-bit gathers), where the record does not say otherwise
    caps = FRAMEWORKS.get(framework or "")
    for key, value in caps.software if caps else ():
        out.setdefault(key, value)
    return out


def stack_stated(r: dict[str, Any]) -> frozenset[str]:
    """The ``SoftwareSpec`` fields a record's ``software`` entry states itself (``stack_software``): a framework's
    software (``frameworks.framework_system``, which the free plan applies) leaves them as the record has them."""
    sw = r.get("software") or {}
    stated = {k for k in STACK_FIELDS if k in sw}
    stated |= {"tp_comm_overlap"} if "tp_comm_overlap_share" in sw else set()
    stated |= {"fp8_param_gather"} if "fp8_params" in sw else set()
    return frozenset(stated)


def stack_fp8_scaling(r: dict[str, Any]) -> str:
    """A record's fp8 scaling recipe (``SoftwareSpec.fp8_scaling``): MXFP8 for the runs named mxfp8 (Megatron-Bridge
    ``fp8_recipe='mxfp8'``); delayed where the recorded recipe says delayed scaling (the MLPerf submissions'
    ``fp8_recipe``/notes) or where the stack predates any other: a NeMo container before 25.04, whose Transformer Engine
    had delayed scaling only (per-tensor current scaling came in TE 77fa1e596, 2025-03-07); else current scaling, the
    recipe of Megatron-Bridge's fp8cs runs."""
    if "mxfp8" in r["id"].lower():
        return "mxfp8"
    if "fp8cs" in r["id"].lower():
        return "current"
    sw = r.get("software") or {}
    recipe = " ".join([str(sw.get("fp8_recipe", "")), *map(str, r.get("notes", []))]).lower()
    return "delayed" if nemo_before(r, 25, 4) or "delayed scaling" in recipe or "'delayed'" in recipe else "current"


def stack_gradients(r: dict[str, Any]) -> dict[str, Any]:
    """A record's gradient and optimizer-state datatypes (``TrainWorkload`` fields), from its ``software`` entry:
    ``grad_reduce_dtype`` is the reduction only (torchtitan's fp32 ``mixed_precision_reduce``, Composer FSDP fp32),
    except under Megatron-Core's DDP, whose gradient buffer has the reduction's datatype (``grad_reduce_in_fp32``:
    fp32, else the parameters' dtype; megatron/core/distributed/param_and_grad_buffer.py ``group_params_for_buffers``
    at d98e8a6, distributed_data_parallel.py at core_v0.8.0): Megatron-Bridge, whose performance recipes leave it bf16
    when unstated (scripts/performance yaml at v0.1.0rc4, configs v0.2.0-v0.4.0, ``perf_recipes/_common.py`` at
    067f987), and the other Megatron stacks where the record states it (MLPerf's NeMo; the GPT-3 submissions' NeMo 1.x
    distributed Adam, Apex DistributedFusedAdam, holds its contiguous gradient buffer in ``grad_sync_dtype``, which
    their configs set to bf16). A stack that trains its
    parameters in 16 bit with no fp32 master (NeMo AutoModel's MoE models) states ``grad_dtype`` and
    ``optimizer_bytes_per_param`` (the moments alone)."""
    sw = r.get("software") or {}
    red = sw.get("grad_reduce_dtype")
    optimizer = {"optimizer": sw["optimizer"]} if "optimizer" in sw else {}  # e.g. adam-bf16 (its source beside it)
    if "Megatron-Bridge" in str(r["source"].get("container_or_version")):
        return {"grad_dtype": red or "bf16", **optimizer}
    out: dict[str, Any] = {"grad_reduce_dtype": red, **optimizer}
    if red is not None and stack_framework(r) in ("megatron", "megatron-zero1"):
        out["grad_dtype"] = red
    out.update({k: sw[k] for k in ("grad_dtype", "optimizer_bytes_per_param") if k in sw})
    return out


def stack_mtp(r: dict[str, Any]) -> int:
    """The MTP modules a record's recipe trains (``TrainWorkload.mtp_layers``; its workload entry, with the source
    in its notes): 0 where unstated, Megatron-LM's default."""
    return int(r["workload"].get("mtp_layers") or 0)


def stack_stage_layers(r: dict[str, Any]) -> list[int] | None:
    """Transformer layers per pipeline rank where the recipe sets its own pipeline layout (``parallel.stage_layers``,
    e.g. Megatron-Bridge's DeepSeek-V3 layouts), else None: the cost model's even split."""
    layers = r["parallel"].get("stage_layers")
    return [int(n) for n in layers] if layers else None


def stack_modules(r: dict[str, Any]) -> tuple[str, ...] | None:
    """The selective recompute modules a record's recipe names (``TrainLayout.recompute_modules``); None: Megatron's
    default (core_attn)."""
    mods = (r.get("software") or {}).get("recompute_modules")
    return tuple(mods) if mods else None


def stack_recompute(r: dict[str, Any], rc_text: str) -> Recompute:
    """A record's recompute short of full: selective where its text says so or its recipe names recompute_modules
    (Megatron-Bridge set_recompute_overrides sets them on selective granularity), else none. An empty module list
    recomputes nothing: Megatron-Core fills in core_attn only where the list is None (transformer_config.py@14346b6
    l.1821-1825)."""
    if (r.get("software") or {}).get("recompute_modules") == []:
        return Recompute.NONE
    return Recompute.SELECTIVE if "selective" in rc_text or stack_modules(r) else Recompute.NONE


def stack_framework(record: dict[str, Any]) -> str | None:
    """The framework a record's software runs (``frameworks.FRAMEWORKS``), so the free plan stays inside it:
    llm-foundry is PyTorch FSDP (``fsdp``); torchtitan is ``torchtitan``; NeMo AutoModel (FSDP2, DTensor TP, torch
    PP; its MoE parallelizer without TP or CP: ``frameworks.caps_for``) is ``automodel``; NeMo, Megatron-Bridge,
    Megatron-LM and the NVIDIA stacks on them are ``megatron``, or
    ``megatron-zero1`` for versions from before Megatron-Core ran FSDP (NeMo containers up to 24.09, Megatron-Core
    r0.8, MLPerf v3.x); Meta's Llama 3 stack and MaxText are not in the table (every knob)."""
    text = source_text(record)
    if any(s in text for s in ("llm-foundry", "llmfoundry", "mosaicml")):
        return "fsdp"
    if "automodel" in text:
        return "automodel"
    if "torchtitan" in text:
        return "torchtitan"
    if any(s in text for s in ("herd of models", "2407.21783", "maxtext")):
        return None
    version = re.search(r"(?:nemo|ngc)[ :_.-]?(?:framework)?v?(\d\d)\.(\d\d)", text)
    before_fsdp = ((version is not None and (int(version.group(1)), int(version.group(2))) <= (24, 9))
                   or "megatron-core r0.8" in text or "mlperf training v3." in text)
    return "megatron-zero1" if before_fsdp else "megatron"


def stack_schedule(record: dict[str, Any]) -> tuple[int, int | None]:
    """A record's ZeRO stage when it does not state one, and its ``TrainWorkload.local_batch``.

    FSDP is ZeRO-3. Under PP the torch-pipelining stacks (torchtitan, NeMo AutoModel) keep it (the weights stay
    gathered through a schedule: ``dp_sync.fsdp_under_pp``) and repeat whole
    schedules of ``local_batch_size`` sequences per DP rank for gradient accumulation (AutoModel@79d0ccf
    recipes/llm/benchmark.py: one ``schedule.step`` per GA step). Llama 3's FSDP keeps the weights after the forward
    and shards optimizer state and gradients (paper §3.3.2: ZeRO-2 like); ZeRO-2 under PP is not a layout the cost
    model prices (``space.ZERO2_PP``), so its runs are ZeRO-1, whose unsharded gradients make their memory an upper
    bound (the three published 405B layouts the model puts over memory). The other stacks run no FSDP under PP:
    ZeRO-1 there."""
    p = record["parallel"]
    pp = p.get("pp") or 1
    torch_pp = stack_framework(record) in ("torchtitan", "automodel") and pp > 1
    zero = 3 if p.get("fsdp") and not record["id"].startswith("llama3-paper") and (pp == 1 or torch_pp) else 1
    local = p.get("local_batch_size")
    return zero, int(local) if torch_pp and local else None
