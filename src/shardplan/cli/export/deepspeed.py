"""A DeepSpeed config JSON for a training plan.

Keys are those DeepSpeed's config parser reads (``deepspeed/runtime/constants.py``, ``zero/config.py``,
``zero/offload_config.py``, ``activation_checkpointing/config.py``; listed with the commit in
``tests/data/export/deepspeed_keys.json``). The JSON carries the batch, ZeRO, offload, precision and
activation-checkpointing choices. Tensor, pipeline and context parallel degrees are not DeepSpeed config keys
(the model code or Megatron-DeepSpeed sets them): they are returned as notes.
"""

from __future__ import annotations

import json
from typing import Any

from shardplan.cli.export.base import Export, TrainTarget, fp8_attention_note, recompute_kind, refuse_module_set
from shardplan.errors import ShardplanError


def _refuse(what: str, fix: str) -> ShardplanError:
    return ShardplanError(f"DeepSpeed cannot {what}: {fix}", field="export")


def _offload(t: TrainTarget, zero: dict[str, Any]) -> None:
    p = t.plan
    f_opt, f_w = p.offload.optimizer, p.offload.weights
    if f_opt > 0:
        if p.zero_stage == 0:
            raise _refuse("offload optimizer state without ZeRO (offload_optimizer needs stage 1-3)",
                          "pin --zero 1 or higher")
        if f_opt < 1 and p.zero_stage < 3:
            # zero/config.py offload_ratio_check: "Partial offloading only supported for ZeRO Stage 3."
            raise _refuse(f"offload {f_opt:.0%} of the optimizer state under ZeRO-{p.zero_stage} "
                          "(zero_optimization.offload_optimizer.ratio needs stage 3)",
                          "pin --zero 3, or --offload-optimizer 100%")
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if f_opt < 1:
            zero["offload_optimizer"]["ratio"] = round(f_opt, 4)
    if f_w > 0:
        if p.zero_stage < 3 or f_w < 1:
            raise _refuse(f"keep {f_w:.0%} of the weights on the CPU under ZeRO-{p.zero_stage} "
                          "(zero_optimization.offload_param moves all parameters, and only under stage 3)",
                          "pin --zero 3 with --offload-weights 100%, or --offload-weights 0")
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}


def _checkpointing(t: TrainTarget, notes: list[str]) -> dict[str, Any] | None:
    p = t.plan
    f_act = p.offload.activations
    if f_act > 0 and (p.recompute != "full" or f_act < 1):
        raise _refuse(f"keep {f_act:.0%} of the stored activations on the CPU with recompute {p.recompute} "
                      "(activation_checkpointing.cpu_checkpointing moves all checkpoints of a full recompute)",
                      "pin --recompute full with --offload-activations 100%, or --offload-activations 0")
    if recompute_kind(p) == "none":
        return None
    if p.recompute == "selective":
        refuse_module_set(t, "DeepSpeed")
        notes.append("selective recompute (core attention only) is done by the model code, e.g. Megatron-DeepSpeed "
                     "--recompute-granularity selective; DeepSpeed's activation_checkpointing section is for full "
                     "recompute")
        return None
    if p.recompute_layers is not None:
        notes.append(f"recompute only {p.recompute_layers} layers per stage: the model code chooses which layers "
                     "call deepspeed.checkpointing.checkpoint")
    # partition_activations splits checkpoints over TP ranks; the cost model splits them only with sequence
    # parallelism (Korthikanti et al. 2022), which the model code does
    return {"partition_activations": False, "cpu_checkpointing": f_act > 0,
            "contiguous_memory_optimization": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}


def _pipeline_notes(t: TrainTarget, notes: list[str]) -> None:
    """What DeepSpeed's pipeline engine cannot take from a pipelined plan: model chunks and a per-stage split."""
    from shardplan.cli.export.megatron import stage_layers

    p = t.plan
    if p.pp < 2:
        return
    if p.interleave > 1:
        # runtime/pipe/schedule.py: TrainSchedule (1F1B) runs one model chunk per stage
        notes.append(f"DeepSpeed's pipeline engine runs one model chunk per stage (TrainSchedule, 1F1B): the plan's "
                     f"{p.interleave} interleaved chunks per stage need the model code's own schedule "
                     "(or re-plan with --interleave 1)")
    if p.stage_layers is not None and p.stage_layers != stage_layers(t.model.num_layers, p.pp):
        # runtime/pipe/module.py PipelineModule._partition_layers: uniform, parameters or type:REGEX
        notes.append(f"DeepSpeed's PipelineModule splits layers by partition_method (uniform, parameters or "
                     f"type:REGEX), which cannot place the plan's per-stage split {p.stage_layers}: re-plan with "
                     "--uniform-stages")


def config(t: TrainTarget) -> tuple[dict[str, Any], list[str]]:
    """The config dict and notes (what the model code or launcher must set instead)."""
    p = t.plan
    notes: list[str] = []
    if (note := fp8_attention_note(t, "DeepSpeed")) is not None:
        notes.append(note)
    if t.optimizer == "adam-bf16":
        raise _refuse("keep Adam's moments in bf16 beside an fp32 master (Megatron's precision-aware optimizer)",
                      "re-plan with --optimizer adam")
    if p.ep > 1 and p.zero_stage == 3:
        # runtime/engine.py _configure_zero_optimizer: assert not self.has_moe_layers, "MoE not supported with Stage 3"
        raise _refuse(f"combine expert parallelism (EP={p.ep}, deepspeed.moe.layer.MoE) with ZeRO-3",
                      "pin --zero 2 (or lower), or --ep 1")
    if p.pp > 1 and p.zero_stage >= 2:
        # runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
        raise _refuse(f"combine ZeRO-{p.zero_stage} with pipeline parallelism (PP={p.pp})",
                      "pin --zero 1 (or 0), or --pp 1")
    cfg: dict[str, Any] = {
        # train_batch_size = micro × accumulation × data-parallel size (runtime/config.py _batch_assertion)
        "train_batch_size": p.global_batch,
        "train_micro_batch_size_per_gpu": p.microbatch_size,
        "gradient_accumulation_steps": p.num_microbatches,
    }
    if t.dtype in ("bf16", "fp8", "fp4"):
        cfg["bf16"] = {"enabled": True}
    elif t.dtype == "fp16":
        cfg["fp16"] = {"enabled": True}
    if t.dtype in ("fp8", "fp4"):
        notes.append(f"{t.dtype} GEMMs are not a DeepSpeed config key: enable them in the model (Transformer "
                     "Engine)")
    if t.grad_dtype == "fp32" and t.dtype != "fp32":
        if p.zero_stage >= 1:
            cfg["data_types"] = {"grad_accum_dtype": "fp32"}
        else:
            # engine.py _do_optimizer_sanity_check: without ZeRO the two datatypes must be equal
            notes.append("without ZeRO, DeepSpeed accumulates gradients in the 16-bit model datatype "
                         "(data_types.grad_accum_dtype fp32 needs ZeRO ≥ 1)")
    zero: dict[str, Any] = {"stage": p.zero_stage}
    if p.zero_stage > 0:
        zero["overlap_comm"] = t.overlap_grad_reduce
        zero["contiguous_gradients"] = True
    _offload(t, zero)
    cfg["zero_optimization"] = zero
    ckpt = _checkpointing(t, notes)
    if ckpt is not None:
        cfg["activation_checkpointing"] = ckpt
    degrees = [f"{name}={v}" for name, v in (("TP", p.tp), ("PP", p.pp), ("CP", p.cp)) if v > 1]
    if degrees:
        notes.insert(0, f"{' '.join(degrees)} is set in the model code or launcher, not in the DeepSpeed config "
                     "(Megatron-DeepSpeed: --tensor-model-parallel-size, --pipeline-model-parallel-size); "
                     f"DeepSpeed's data-parallel size must come out as {p.dp}")
    if p.ep > 1:
        # deepspeed/moe/layer.py: MoE(hidden_size, expert, num_experts=1, ep_size=1, k=1, ...)
        notes.insert(len(degrees) > 0, f"EP={p.ep} is not a DeepSpeed config key: build the expert layers with "
                     f"deepspeed.moe.layer.MoE(..., num_experts={t.model.moe.num_experts if t.model.moe else '?'}, "
                     f"ep_size={p.ep}, k={t.model.moe.experts_per_token if t.model.moe else '?'}) in the model code "
                     "(Megatron-DeepSpeed: --num-experts and --moe-expert-parallel-size)")
    _pipeline_notes(t, notes)
    if p.sequence_parallel:
        notes.append("sequence parallelism (Megatron-style, with TP) is set in the model code: --sequence-parallel")
    if t.mtp_layers:
        notes.append(f"the plan prices {t.mtp_layers} MTP module(s) on the last stage: they are model code, not a "
                     "DeepSpeed config key")
    return cfg, notes


def launch_line(t: TrainTarget, file_name: str) -> str:
    """The ``deepspeed`` launcher line for the target's GPUs (hostfile lists the nodes)."""
    per_node = min(t.num_gpus, t.gpus_per_node)
    hosts = f"--num_nodes {t.num_nodes} --hostfile <hostfile> " if t.num_nodes > 1 else ""
    return f"deepspeed {hosts}--num_gpus {per_node} <your train.py> --deepspeed --deepspeed_config {file_name}"


def export(t: TrainTarget, *, file_name: str | None = None) -> Export:
    """DeepSpeed config JSON for ``t``; the launch line (JSON has no comments) is the last note."""
    cfg, notes = config(t)
    notes.append("launch: " + launch_line(t, file_name or "ds_config.json"))
    return Export(json.dumps(cfg, indent=2) + "\n", tuple(notes))
