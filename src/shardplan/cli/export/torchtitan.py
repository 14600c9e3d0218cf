"""A torchtitan TOML job-config fragment for a training plan.

Section and field names are those of ``torchtitan/config/job_config.py`` at v0.2.2, the last torchtitan
release that reads TOML job configs (main moved to Python config functions in February 2026); the list, with
its commit, is ``tests/data/export/torchtitan_keys.json``. The header also gives the same settings as
``--section.option`` overrides, which current torchtitan still accepts.

Data parallelism maps to FSDP2: ZeRO-3 is ``data_parallel_shard_degree`` (reshard after forward); ZeRO-1/2
are FSDP with ``fsdp_reshard_after_forward = "never"`` (weights stay gathered from forward to backward, as in
ZeRO-2); ZeRO-0 is ``data_parallel_replicate_degree`` (DDP).
"""

from __future__ import annotations

from shardplan.cli.export.base import (
    Export,
    TrainTarget,
    fp8_attention_note,
    layout_summary,
    recompute_kind,
    refuse_module_set,
    torchrun_line,
)
from shardplan.cli.export.titan_split import pipeline_settings
from shardplan.costmodel.training.frameworks import cp_blocker
from shardplan.errors import ShardplanError
from shardplan.models.spec import ModelSpec

Value = str | int | float | bool | list[str] | list[list[str]]


def toml_value(v: Value) -> str:
    """One TOML value (strings, integers, floats, booleans and lists of strings suffice here)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"  # strings, or lists of strings
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _module_fqns(t: TrainTarget) -> list[list[str]] | None:
    """A per-stage split as ``module_fqns_per_model_part``: model part k = chunk·pp + rank (looped schedules
    place stage k on rank k mod pp), each rank's layers in ``v`` chunks with the remainder first; the
    embedding opens part 0, the final norm and output close the last part (torchtitan's llama3/deepseek_v3
    module names). None: the plan uses the even split (torchtitan's own knobs express it)."""
    from shardplan.cli.export.megatron import stage_layers

    p, n_layers = t.plan, t.model.num_layers
    if p.pp < 2 or p.stage_layers is None or p.stage_layers == stage_layers(n_layers, p.pp):
        return None
    v = p.interleave
    chunks = [[n // v + (1 if c < n % v else 0) for c in range(v)] for n in p.stage_layers]
    sizes = [chunks[r][c] for c in range(v) for r in range(p.pp)]
    # layer order follows the virtual stages: chunk 0 of every rank, then chunk 1, …
    parts, start = [], 0
    for k, size in enumerate(sizes):
        part = [f"layers.{i}" for i in range(start, start + size)]
        start += size
        if k == 0:
            part.insert(0, "tok_embeddings")
        if k == len(sizes) - 1:
            part += ["norm", "output"]
        parts.append(part)
    return parts


def _parallelism(t: TrainTarget, notes: list[str]) -> dict[str, Value]:
    p = t.plan
    sec: dict[str, Value] = {}
    if p.zero_stage == 0:
        sec |= {"data_parallel_replicate_degree": p.dp, "data_parallel_shard_degree": 1}
    else:
        sec |= {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp}
        if p.zero_stage < 3 and p.dp > 1:
            sec["fsdp_reshard_after_forward"] = "never"
            if p.zero_stage == 1:
                notes.append("torchtitan has no ZeRO-1: FSDP2 without resharding after forward shards gradients too "
                             "(ZeRO-2), which needs less memory")
    sec["tensor_parallel_degree"] = p.tp
    if p.tp > 1 and not p.sequence_parallel:
        notes.append("torchtitan always uses sequence parallelism with tensor parallelism (less memory than planned)")
    sec["context_parallel_degree"] = p.cp
    if p.cp > 1:
        notes.append("torchtitan shards weights over the context-parallel ranks too (FSDP over DP×CP)")
        # torchtitan's parallelism.context_parallel_rotate_method (PyTorch context_parallel): "alltoall" passes K/V
        # shards around the ring beside each sub-SDPA (as p2p is costed), "allgather" gathers them all after the
        # first one (all_gather's exchange, costed exposed); it has no head-split (all-to-all of Q/K/V/O) exchange
        blocker = cp_blocker(t.model, t.cp_comm_type, pytorch=True)
        if blocker is not None:  # the planner keeps such plans at CP 1 when it knows the export (--export torchtitan)
            raise ShardplanError(f"{blocker}: re-plan with --cp 1", field="export")
        if t.cp_comm_type == "a2a":
            raise ShardplanError("torchtitan's context parallelism cannot split heads (the plan's cp_comm_type a2a): "
                                 "re-plan with --cp-comm-type p2p or all_gather", field="export")
        sec["context_parallel_rotate_method"] = "alltoall" if t.cp_comm_type == "p2p" else "allgather"
    sec["pipeline_parallel_degree"] = p.pp
    if p.pp > 1 and p.zero_stage == 3 and p.dp * p.cp > 1:
        # torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy: "default" → not pp_enabled
        notes.append("with PP, torchtitan keeps each stage's FSDP weights gathered from the first forward to the "
                     "last backward (fsdp_reshard_after_forward \"default\"), as planned")
    if p.pp > 1:
        sec["pipeline_parallel_schedule"] = "Interleaved1F1B" if p.interleave > 1 else "1F1B"
        if p.interleave > 1 and t.overlap_p2p_comm:
            notes.append("the plan priced interleaved pipeline sends as overlapped with compute (Megatron's "
                         "overlap_p2p_comm); torchtitan's Interleaved1F1B has no such switch: set the hardware "
                         "file's software.overlap_p2p_comm: false to plan with blocking sends")
        sec["pipeline_parallel_microbatch_size"] = p.microbatch_size
        per_stage = _module_fqns(t)
        if per_stage is not None:
            sec["module_fqns_per_model_part"] = per_stage  # type: ignore[assignment]
        else:  # explicit allowances (or module lists): torchtitan's default split is not the plan's
            sec |= pipeline_settings(t.model.num_layers, p.pp, p.interleave)
    if p.ep > 1:
        sec["expert_parallel_degree"] = p.ep
    return sec


def _checkpointing(t: TrainTarget, notes: list[str]) -> dict[str, Value]:
    p = t.plan
    if recompute_kind(p) == "none":
        return {"mode": "none"}
    if p.recompute == "selective":
        refuse_module_set(t, "torchtitan")
        if list(p.recompute_modules or []) == ["torchtitan_op"]:  # the plan costed torchtitan's own policy
            return {"mode": "selective", "selective_ac_option": "op"}
        notes.append("torchtitan's per-op selective recompute saves matmul outputs and recomputes the rest; "
                     "the plan costed core-attention recompute (Korthikanti et al.)")
        return {"mode": "selective", "selective_ac_option": "op"}
    layers = t.model.num_layers // p.pp
    if p.recompute_layers is None or p.recompute_layers >= layers:
        return {"mode": "full"}
    every = max(1, round(layers / p.recompute_layers))
    if layers % p.recompute_layers:
        notes.append(f"torchtitan checkpoints every {every}th layer: about {layers // every} of {layers} layers "
                     f"per stage, the plan costed {p.recompute_layers}")
    return {"mode": "selective", "selective_ac_option": str(every)}


def _training(t: TrainTarget, notes: list[str]) -> dict[str, Value]:
    p = t.plan
    if t.dtype == "fp16":
        raise ShardplanError("torchtitan trains in bfloat16 or float32 (training.mixed_precision_param), not fp16: "
                             "plan with --dtype bf16", field="export")
    if t.optimizer == "adam-bf16":
        raise ShardplanError("torchtitan keeps Adam's moments in fp32 (no bf16-moment optimizer setting): re-plan "
                             "with --optimizer adam", field="export")
    off = p.offload
    if off.activations > 0:
        raise ShardplanError("torchtitan cannot offload activations to the CPU: re-plan with "
                             "--offload-activations 0", field="export")
    cpu_offload = off.weights > 0 or off.optimizer > 0
    if cpu_offload and not (off.weights == 1 and off.optimizer == 1 and p.zero_stage == 3):
        raise ShardplanError("torchtitan offloads all of the weights, gradients and optimizer state "
                             "(training.enable_cpu_offload) or none: pin --zero 3 --offload-weights 100% "
                             "--offload-optimizer 100%, or --offload off", field="export")
    if t.grad_dtype != "fp32":
        notes.append("torchtitan reduces gradients in float32 (training.mixed_precision_reduce)")
    # local_batch_size is per data-parallel rank; with PP it is cut into microbatches (one schedule), and the
    # trainer accumulates global / (local × DP) steps (train.py): one schedule each under PP
    local = p.microbatch_size * (p.num_microbatches // p.schedules if p.pp > 1 else 1)
    sec: dict[str, Value] = {"local_batch_size": local, "global_batch_size": p.global_batch, "seq_len": t.seq_len,
                             "mixed_precision_param": "float32" if t.dtype == "fp32" else "bfloat16"}
    if cpu_offload:
        sec["enable_cpu_offload"] = True
    return sec


TITAN_MODELS = ("llama3", "llama4", "deepseek_v3", "qwen3")
"""Model families torchtitan v0.2 ships (``torchtitan/models``; Mixtral, GPT-3 and the others need model code)."""


def titan_model(model: ModelSpec) -> str | None:
    """The torchtitan model that has this architecture, if any."""
    if model.family == "llama":
        return "llama3"
    if model.family == "deepseek" and model.mla is not None:
        return "deepseek_v3"
    if model.family == "qwen" and model.qk_norm:
        return "qwen3"
    return None


def sections(t: TrainTarget) -> tuple[dict[str, dict[str, Value]], list[str]]:
    """The TOML tables and the notes."""
    notes: list[str] = []
    if titan_model(t.model) is None:
        notes.append(f"torchtitan v0.2 has no {t.model.family} model ({t.model.name}; it ships "
                     f"{', '.join(TITAN_MODELS)}): register the model code (a TrainSpec) before these settings apply")
    out = {"parallelism": _parallelism(t, notes), "activation_checkpoint": _checkpointing(t, notes),
           "training": _training(t, notes)}
    # torch.compile fuses each block's norm, rotary and activation and the loss into the kernels the cost model
    # priced (SoftwareSpec.elementwise_kernels fused); a plan costed with eager kernels leaves it off.
    if not t.eager_kernels:
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    else:  # compile.enable defaults to false (torchtitan/config/job_config.py at v0.2.2, class Compile)
        notes.append("the plan was costed with eager PyTorch elementwise kernels (software elementwise_kernels / "
                     "norm_kernel): torch.compile stays off; enabling it runs faster than planned")
    if t.dtype == "fp8":
        out["model"] = {"converters": ["quantize.linear.float8"]}
        if t.plan.zero_stage == 3 and t.fp8_param_gather:
            notes.append("the plan priced fp8 weight all-gathers (1 B a parameter); torchtitan gathers bf16 weights "
                         "unless its float8 all-gather is on: re-plan with --framework torchtitan to price that")
    if t.dtype == "fp4":
        notes.append("torchtitan has no NVFP4 training converter: the file trains in bf16, slower than planned")
    if (note := fp8_attention_note(t, "torchtitan")) is not None:
        notes.append(note)
    if t.mtp_layers:
        notes.append(f"the plan prices {t.mtp_layers} MTP module(s) on the last stage; torchtitan's config has no "
                     "setting for them: the model code must add them, else the run is faster than planned")
    return out, notes


def overrides(tables: dict[str, dict[str, Value]]) -> list[str]:
    """The same settings as torchtitan command-line overrides (``--section.option value``); nested lists
    (``module_fqns_per_model_part``) have no flat override form and stay in the TOML only."""
    args = []
    for sec, kv in tables.items():
        for k, v in kv.items():
            if isinstance(v, list) and v and isinstance(v[0], list):
                continue  # lists of lists (module_fqns_per_model_part) go in the TOML only
            if v is True:
                args.append(f"--{sec}.{k}")
            else:
                args.append(f"--{sec}.{k} {','.join(v) if isinstance(v, list) else v}")
    return args


def export(t: TrainTarget, *, file_name: str | None = None) -> Export:
    """torchtitan TOML fragment for ``t``, with a header that shows how to launch it (``file_name`` unused)."""
    tables, notes = sections(t)
    lines = [
        f"# torchtitan (v0.2 TOML job config) sections for {t.model.name} on {t.num_gpus} GPUs"
        + (f" ({t.hardware})" if t.hardware else "") + ", written by shardplan.",
        f"# Layout: {layout_summary(t.plan)}.",
        "# Merge these tables into your job config (model, optimizer, data), or pass them as overrides after "
        "--job.config_file:",
        f"#   {torchrun_line(t, '-m torchtitan.train')} --job.config_file <your job.toml> \\",
        "#     " + " ".join(overrides(tables)),
        *(f"# note: {n}." for n in notes),
    ]
    for sec, kv in tables.items():
        lines += ["", f"[{sec}]", *(f"{k} = {toml_value(v)}" for k, v in kv.items())]
    return Export("\n".join(lines) + "\n", tuple(notes))
