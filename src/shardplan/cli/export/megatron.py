"""Megatron-LM ``pretrain_gpt.py`` arguments for a training plan, one ``--flag [value]`` per line.

Flag names and choices are those of ``megatron/training/arguments.py`` on Megatron-LM main (the list, with its
commit, is ``tests/data/export/megatron_flags.json``). ZeRO-1 is Megatron's distributed optimizer; ZeRO-2/3
have no flag of their own and map to Megatron-FSDP (``--use-megatron-fsdp`` with sharding strategy
``optim_grads`` / ``optim_grads_params``), which also needs ``--ckpt-format fsdp_dtensor``.
"""

from __future__ import annotations

from shardplan.cli.export.base import (
    POLICY_FRAMEWORK,
    Export,
    TrainTarget,
    layout_summary,
    recompute_kind,
    torchrun_line,
)
from shardplan.cli.export.megatron_arch import mixer_args, rope_args, router_args
from shardplan.errors import ShardplanError

Args = list[tuple[str, str | None]]

# Module inputs Megatron's fine-grained activation offloading can move to the CPU (transformer_config.py).
_OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm")
_OFFLOAD_MODULES_MOE = ("expert_fc1", "moe_act")

# The cost model's attention kernel → Megatron's --attention-backend (AttnBackend in megatron/core/transformer/
# enums.py; the NVTE_* variables each sets: megatron/core/models/common/language_module/language_module.py, both at
# Megatron-LM d98e8a64): auto lets Transformer Engine pick its fused IO-aware kernel (what "flash" means), and TE
# >= 1.8 picks cuDNN FusedAttention on Hopper and later (TE commit 43569381c) — what "cudnn" is costed as — while
# falling back where cuDNN lacks a shape ("fused" would fail there); flash is flash-attn through TE; unfused is
# Megatron's softmax path with the s² scores in HBM.
MEGATRON_ATTENTION_BACKEND = {"flash": "auto", "cudnn": "auto", "cudnn-fp8": "auto", "cudnn-mxfp8": "auto",
                              "flash2": "flash", "flash3": "flash", "unfused": "unfused"}


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Transformer layers per pipeline stage as the cost model splits them evenly (``uniform_split``)."""
    from shardplan.costmodel.training.pipeline_sim import uniform_split

    return uniform_split(num_layers, pp)


def pipeline_layout(num_layers: int, pp: int, v: int, counts: list[int] | None = None, *, mtp: int = 0) -> str:
    """A ``--pipeline-model-parallel-layout`` string: virtual stage k = chunk·pp + rank, E = embedding,
    t = transformer layer, m = MTP layer, L = loss (pipeline_parallel_layer_layout.py); ``counts``: layers per
    rank (a per-stage plan), else the cost model's even split. ``mtp`` MTP layers go before the loss: Megatron
    counts them in the layout and asserts the count equals ``--mtp-num-layers`` (``validate_layer_layout``)."""
    from shardplan.costmodel.training.pipeline_sim import chunk_layers

    per_rank = [chunk_layers(n, v) for n in (counts or stage_layers(num_layers, pp))]
    entries = []
    for c in range(v):
        for r in range(pp):
            n = per_rank[r][c]
            body = "t" if n == 1 else (f"t*{n}" if n else "")
            first, last = c == 0 and r == 0, c == v - 1 and r == pp - 1
            entries.append(("E" if first else "") + body + ("m" * mtp + "L" if last else ""))
    return "|".join(entries)


def moe_layer_freq(t: TrainTarget) -> str | None:
    """``--moe-layer-freq``: an integer, or a list pattern such as ``[0]*3+[1]*58`` with dense first layers."""
    moe = t.model.moe
    if moe is None or (moe.first_dense_layers == 0 and moe.layer_freq == 1):
        return None
    if moe.first_dense_layers == 0:
        return str(moe.layer_freq)
    fd = moe.first_dense_layers
    pattern = [0] * fd + [int((i - fd) % moe.layer_freq == 0) for i in range(fd, t.model.num_layers)]
    runs: list[list[int]] = []
    for bit in pattern:
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "+".join(f"[{bit}]*{n}" for bit, n in runs)


def _dispatcher(t: TrainTarget, args: Args, notes: list[str]) -> None:
    """The MoE token dispatcher the plan was costed with, and the EP all-to-all overlap where the cost model applied
    it (Megatron-LM d98e8a6 transformer_config.py: the overlap needs VPP when PP > 1 and no full recompute, as
    ``training/ep_overlap.py`` prices it)."""
    p = t.plan
    if t.ep_dispatcher == "deepep":
        args += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
    else:
        args.append(("--moe-token-dispatcher-type", "alltoall"))
    moe = t.model.moe
    if t.moe_drop_and_pad and moe is not None:  # TransformerConfig moe_expert_capacity_factor, pad to capacity
        args += [("--moe-expert-capacity-factor", f"{moe.capacity_factor:g}"), ("--moe-pad-expert-input-to-capacity",
                                                                                None)]
    if t.moe_router_padding and t.dtype in ("fp8", "fp4"):  # TransformerConfig moe_router_padding_for_quantization
        args.append(("--moe-router-padding-for-quantization", None))
    if not t.ep_comm_overlap:
        return
    if recompute_kind(p) == "full" or (p.pp > 1 and p.interleave == 1):
        notes.append("the system overlaps the EP all-to-all, but this plan (full recompute, or PP without "
                     "interleaving) was costed with it exposed, as Megatron requires: "
                     "--overlap-moe-expert-parallel-comm not written")
        return
    args.append(("--overlap-moe-expert-parallel-comm", None))
    if t.ep_delay_wgrad:  # costed with the experts' weight gradients after the backward dispatch (ep_overlap.pair_time)
        # Megatron-LM d98e8a6 arguments.py accepts it with Transformer Engine; Megatron-FSDP v2 would refuse it, and
        # --use-megatron-fsdp, which the exporter may write, is v1
        args.append(("--delay-wgrad-compute", None))


def _parallel(t: TrainTarget, args: Args, notes: list[str]) -> None:
    p, m = t.plan, t.model
    args += [("--tensor-model-parallel-size", str(p.tp)), ("--pipeline-model-parallel-size", str(p.pp))]
    if p.cp > 1:
        args.append(("--context-parallel-size", str(p.cp)))
        if t.cp_comm_type != "p2p":  # Megatron's default p2p; the exchange the plan was costed with (cp_comm.py)
            args.append(("--cp-comm-type", t.cp_comm_type))
    if p.ep > 1:
        args.append(("--expert-model-parallel-size", str(p.ep)))
        _dispatcher(t, args, notes)
    # MoE parallel folding; Megatron defaults the expert TP to tp
    if m.moe is not None and p.etp is not None and p.etp != p.tp:
        args.append(("--expert-tensor-parallel-size", str(p.etp)))
    if p.sequence_parallel and p.tp > 1:
        args.append(("--sequence-parallel", None))
        if t.tp_userbuffers:  # priced with TE's userbuffers (costmodel/training/userbuffers.py); Megatron's default off
            args.append(("--tp-comm-overlap", None))
            if t.tp_overlap_rs == "ring_exchange":
                notes.append("the plan was costed with ring-exchange reduce-scatters after the output projection and "
                             "FC2 (Megatron-Bridge's fp8 userbuffers configurations); Transformer Engine's default "
                             "pipelines them: pass --tp-comm-overlap-cfg with a YAML setting proj_fprop and fc2_fprop "
                             "to method: ring_exchange")
    even = m.num_layers % (p.pp * p.interleave) == 0
    per_stage = p.stage_layers is not None and p.stage_layers != stage_layers(m.num_layers, p.pp)
    if p.pp > 1 and (not even or per_stage):
        args.append(("--pipeline-model-parallel-layout",
                     pipeline_layout(m.num_layers, p.pp, p.interleave, p.stage_layers if per_stage else None,
                                     mtp=t.mtp_layers)))
    elif p.interleave > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", str(m.num_layers // (p.pp * p.interleave))))
    if t.mtp_layers:  # priced on the last stage (TrainWorkload.mtp_layers)
        args.append(("--mtp-num-layers", str(t.mtp_layers)))
    elif m.mtp_layers:
        notes.append(f"the checkpoint's {m.mtp_layers} MTP layer(s) are not trained, as planned: re-plan with "
                     f"--mtp-layers {m.mtp_layers} to train and price them")
    if p.interleave > 1 and not t.overlap_p2p_comm:  # Megatron-LM's CLI overlaps interleaved sends by default
        args.append(("--no-overlap-p2p-communication", None))
    if p.interleave > 1 and p.num_microbatches % p.pp:
        # schedules.py: the microbatch group size must lie in [PP, M] and leave no remainder below PP
        if p.num_microbatches < p.pp:
            raise ShardplanError(f"Megatron's interleaved schedule needs at least PP={p.pp} microbatches "
                                 f"(the plan has {p.num_microbatches}): pin --interleave 1", field="export")
        args.append(("--microbatch-group-size-per-virtual-pipeline-stage", str(p.num_microbatches)))
        notes.append(f"{p.num_microbatches} microbatches are not a multiple of PP={p.pp}: Megatron interleaves "
                     "them as one group, with a larger bubble than planned")


def _batch(t: TrainTarget, args: Args) -> None:
    p = t.plan
    args += [("--micro-batch-size", str(p.microbatch_size)), ("--global-batch-size", str(p.global_batch)),
             ("--seq-length", str(t.seq_len))]


def _recompute(t: TrainTarget, args: Args, notes: list[str]) -> None:
    p = t.plan
    if recompute_kind(p) == "none":
        return  # Megatron's default: no recompute flags
    if p.recompute == "selective":
        policy = next((m for m in p.recompute_modules or [] if m in POLICY_FRAMEWORK), None)
        if policy is not None:  # --recompute-modules names submodules; another framework's per-op policy is none
            raise ShardplanError(f"Megatron-LM cannot express {policy} ({POLICY_FRAMEWORK[policy]}'s selective "
                                 "recompute policy): --recompute-modules takes core_attn, layernorm, mlp, moe_act, "
                                 "shared_experts, moe, mla_up_proj; pin those, or export to "
                                 f"{POLICY_FRAMEWORK[policy]}", field="recompute_modules")
        args.append(("--recompute-granularity", "selective"))  # default --recompute-modules core_attn
        modules = list(p.recompute_modules or ["core_attn"])
        if modules != ["core_attn"]:  # a list argument (d98e8a6: ArgumentGroupFactory(TransformerConfig))
            args.append(("--recompute-modules", " ".join(modules)))
    elif p.recompute == "full":
        counts = p.stage_recompute_layers or []
        partial = {k for k, n in zip(counts, p.stage_layers or [], strict=False) if k < n}
        if len(partial) > 1:
            notes.append(f"Megatron takes one --recompute-num-layers for every stage; the plan recomputes "
                         f"{counts} layers per stage (plan with --export megatron to get one count)")
        args.append(("--recompute-granularity", "full"))
        if p.recompute_layers is None:
            args += [("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
        else:
            # block: the first N layers of every model chunk are recomputed (transformer_block.py)
            per_chunk = -(-p.recompute_layers // p.interleave)
            args += [("--recompute-method", "block"), ("--recompute-num-layers", str(per_chunk))]
            if per_chunk * p.interleave != p.recompute_layers:
                notes.append(f"Megatron recomputes whole layers per model chunk: {per_chunk} per chunk × "
                             f"{p.interleave} chunks = {per_chunk * p.interleave} per stage, the plan costed "
                             f"{p.recompute_layers}")


def _zero_and_offload(t: TrainTarget, args: Args, notes: list[str]) -> list[str]:
    """Optimizer sharding and CPU offload; returns header comments."""
    p = t.plan
    header: list[str] = []
    if p.offload.weights > 0:
        raise ShardplanError(
            f"Megatron-LM cannot keep {p.offload.weights:.0%} of the weights on the CPU during training "
            "(it has no weight offload flag): re-plan with --offload-weights 0, or export to deepspeed "
            "(ZeRO-3 offload_param)", field="export")
    if p.zero_stage >= 2 and p.pp > 1:
        # Megatron-FSDP has no pipeline support at the pinned commit (mcore_fsdp_adapter.py: MFSDP v2 raises on
        # pipeline_model_parallel_size != 1; v1 has no PP test): torchtitan runs FSDP under PP.
        raise ShardplanError(f"Megatron-LM cannot combine ZeRO-{p.zero_stage} (Megatron-FSDP) with pipeline "
                             f"parallelism (PP={p.pp}): re-plan with --export megatron (prunes it), pin --zero 1, "
                             "or export to torchtitan", field="export")
    if p.zero_stage >= 2:
        strategy = "optim_grads" if p.zero_stage == 2 else "optim_grads_params"
        header.append(f"ZeRO-{p.zero_stage} has no Megatron flag of its own: Megatron-FSDP with "
                      f"--data-parallel-sharding-strategy {strategy} shards "
                      + ("optimizer state, gradients and weights" if p.zero_stage == 3
                         else "optimizer state and gradients") + " the same way")
        args += [("--use-distributed-optimizer", None), ("--use-megatron-fsdp", None),
                 ("--data-parallel-sharding-strategy", strategy), ("--ckpt-format", "fsdp_dtensor")]
        if p.tp > 1 or p.cp > 1:
            notes.append("Megatron warns that TP/CP and Megatron-FSDP prefer different CUDA_DEVICE_MAX_CONNECTIONS; "
                         "pin --zero 1 to use the distributed optimizer instead")
    elif p.zero_stage == 1 or p.offload.optimizer > 0:
        args.append(("--use-distributed-optimizer", None))
        if p.zero_stage == 0:
            notes.append("optimizer offload needs Megatron's distributed optimizer: ZeRO-1 is switched on")
    if t.optimizer == "adam-bf16" and p.zero_stage == 0:
        # Megatron-Core d98e8a6 optimizer/__init__.py l.1057: "--use-precision-aware-optimizer only supported with
        # distributed optimizer"
        raise ShardplanError("Megatron keeps bf16 Adam moments only under its distributed optimizer: pin --zero 1",
                             field="export")
    if p.offload.optimizer > 0 or t.optimizer == "adam-bf16":
        args.append(("--use-precision-aware-optimizer", None))
    if t.optimizer == "adam-bf16":  # bf16 moments beside the fp32 master (layout.OPTIMIZER_STATE_BYTES)
        args += [("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if p.offload.optimizer > 0:
        args += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", f"{p.offload.optimizer:.4g}")]
    if p.offload.activations > 0:
        modules = _OFFLOAD_MODULES + (_OFFLOAD_MODULES_MOE if t.model.moe else ())
        args += [("--fine-grained-activation-offloading", None), ("--offload-modules", " ".join(modules)),
                 ("--activation-offload-fraction", f"{p.offload.activations:.4g}")]
        notes.append("Megatron offloads the inputs of the listed modules; the fraction applies to them, not to "
                     "every stored activation as in the plan")
    if t.plan.dp > 1 and t.overlap_grad_reduce:
        args.append(("--overlap-grad-reduce", None))
        if p.zero_stage >= 1:
            args.append(("--overlap-param-gather", None))
        if t.ddp_bucket_params:
            args.append(("--ddp-bucket-size", str(t.ddp_bucket_params)))
    if t.cross_entropy_fusion == "te":  # Transformer Engine's cross entropy, as priced (Megatron's default: native)
        args += [("--cross-entropy-loss-fusion", None), ("--cross-entropy-fusion-impl", "te")]
    return header


def _precision(t: TrainTarget, args: Args, notes: list[str]) -> None:
    if t.dtype in ("bf16", "fp8", "fp4"):
        args.append(("--bf16", None))
    elif t.dtype == "fp16":
        args.append(("--fp16", None))
    if t.dtype == "fp8":
        args.append(("--fp8-format", "hybrid"))
        # fp8 primary weights where the plan was priced with them (SoftwareSpec.fp8_param_gather; Megatron-LM
        # d98e8a6 --fp8-param-gather needs the distributed optimizer or Megatron-FSDP). Elsewhere the plan's memory
        # holds the fp8 copies Transformer Engine caches beside 16-bit weights (memory.cached_weight_bytes).
        if t.fp8_param_gather and ("--use-distributed-optimizer", None) in args:
            args.append(("--fp8-param-gather", None))
    if t.dtype == "fp4":  # NVFP4 GEMMs through Transformer Engine (Blackwell)
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if t.grad_dtype == "bf16" and t.dtype in ("bf16", "fp8", "fp4"):
        args.append(("--grad-reduce-in-bf16", None))
    if t.attention not in MEGATRON_ATTENTION_BACKEND:  # triton: flash-attn's Triton kernel, llm-foundry's
        raise ShardplanError(f"Megatron-LM has no {t.attention} attention backend (its --attention-backend runs "
                             "flash-attn, cuDNN or the unfused softmax): re-plan with --attention flash2 or cudnn",
                             field="export")
    args.append(("--attention-backend", MEGATRON_ATTENTION_BACKEND[t.attention]))
    if t.attention in ("cudnn-fp8", "cudnn-mxfp8"):  # TE's fp8_dpa (megatron/training/arguments.py@d98e8a64)
        args.append(("--fp8-dot-product-attention", None))
        # TE's attention takes the linear layers' recipe unless NVTE_DPA_FP8_RECIPE names one (TransformerEngine@d0067d0
        # dot_product_attention.py recipe table); cuDNN's rates were measured per-tensor (cudnn-fp8) and MXFP8
        if t.fp8_attention_recipe == "DelayedScaling":
            notes.append("Transformer Engine runs fp8 attention on Hopper under delayed scaling only: keep Megatron's "
                         "default --fp8-recipe delayed")
        else:
            notes.append(f"the plan priced {t.attention} attention: export NVTE_DPA_FP8_RECIPE="
                         f"{t.fp8_attention_recipe} unless the linear layers' recipe is already that")


def _model(t: TrainTarget, args: Args, notes: list[str]) -> None:
    m = t.model
    args += [("--num-layers", str(m.num_layers)), ("--hidden-size", str(m.hidden_size)),
             ("--num-attention-heads", str(m.num_heads)), ("--ffn-hidden-size", str(m.ffn_hidden_size)),
             ("--max-position-embeddings", str(max(m.max_position_embeddings, t.seq_len)))]
    if m.mla is not None:
        a = m.mla
        args.append(("--multi-latent-attention", None))
        if a.q_lora_rank:
            args.append(("--q-lora-rank", str(a.q_lora_rank)))
        args += [("--kv-lora-rank", str(a.kv_lora_rank)), ("--qk-head-dim", str(a.qk_nope_head_dim)),
                 ("--qk-pos-emb-head-dim", str(a.qk_rope_head_dim)), ("--v-head-dim", str(a.v_head_dim))]
    elif m.kv_heads < m.num_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", str(m.kv_heads))]
    if m.head_dim and m.mla is None and m.head_dim * m.num_heads != m.hidden_size:
        args.append(("--kv-channels", str(m.head_dim)))
    args.append(("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"))
    if m.qk_norm:
        args.append(("--qk-layernorm", None))
    position = {"rope": "rope", "learned": "learned_absolute"}.get(str(m.position))
    if position is None:
        notes.append(f"Megatron-LM has no {m.position} position embeddings: rope is written instead")
        position = "rope"
    args.append(("--position-embedding-type", position))
    if m.mlp == "swiglu":
        args.append(("--swiglu", None))
    elif m.mlp == "geglu":
        args.append(("--quick-geglu", None))
        notes.append("GeGLU is written as Megatron's --quick-geglu (gated, sigmoid-approximated GeLU): same shapes "
                     "and FLOPs, slightly different activation")
    elif m.mlp == "relu":
        notes.append("Megatron-LM has no plain ReLU MLP flag: its default GeLU MLP is used (same shapes and FLOPs)")
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not (m.out_bias or m.mlp_bias):
        args.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", None))
    elif not (m.qkv_bias and m.out_bias and m.mlp_bias):
        notes.append("Megatron-LM puts biases on every linear layer or none (plus --add-qkv-bias): this model's "
                     "mix is written as biases everywhere")
    if not t.dropout:
        args += [("--attention-dropout", "0"), ("--hidden-dropout", "0")]
    for flag, why in ((m.parallel_block, "parallel attention/MLP blocks"), (m.embedding_norm, "an embedding norm")):
        if flag:
            notes.append(f"Megatron-LM's GPT model has no flag for {why}: the exported model differs there")
    rope_args(m, args, notes)
    mixer_args(m, args, notes)
    _moe(t, args, notes)


def _moe(t: TrainTarget, args: Args, notes: list[str]) -> None:
    moe = t.model.moe
    if moe is None:
        return
    args += [("--num-experts", str(moe.num_experts)), ("--moe-router-topk", str(moe.experts_per_token)),
             ("--moe-ffn-hidden-size", str(moe.expert_ffn_hidden_size)), ("--moe-grouped-gemm", None)]
    if moe.num_shared_experts:
        # total width of all shared experts (transformer_config.py moe_shared_expert_intermediate_size)
        args.append(("--moe-shared-expert-intermediate-size", str(moe.num_shared_experts * moe.shared_ffn)))
    freq = moe_layer_freq(t)
    if freq is not None:
        args.append(("--moe-layer-freq", freq))
    router_args(t.model, args, notes)


def export(t: TrainTarget, *, file_name: str | None = None) -> Export:
    """Megatron-LM arguments for ``t``: parallel layout, batch, memory savers, precision, model shape."""
    args: Args = []
    notes: list[str] = []
    _parallel(t, args, notes)
    _batch(t, args)
    _recompute(t, args, notes)
    header = _zero_and_offload(t, args, notes)
    _precision(t, args, notes)
    _model(t, args, notes)
    fsdp = t.plan.zero_stage >= 2
    env = "CUDA_DEVICE_MAX_CONNECTIONS=1 " if (t.plan.tp > 1 or t.plan.cp > 1) and not fsdp else ""
    name = file_name or "megatron.args"
    lines = [
        f"# Megatron-LM arguments for {t.model.name} on {t.num_gpus} GPUs"
        + (f" ({t.hardware})" if t.hardware else "") + ", written by shardplan.",
        f"# Layout: {layout_summary(t.plan)}.",
        *(f"# {h}." for h in header),
        "# Launch with the same line on every node, adding your data, tokenizer, optimizer and checkpoint arguments:",
        f"#   grep -v '^#' {name} | {env}xargs {torchrun_line(t, 'pretrain_gpt.py')} <your arguments>",
        *(f"# note: {n}." for n in notes),
    ]
    lines += [flag if value is None else f"{flag} {value}" for flag, value in args]
    return Export("\n".join(lines) + "\n", tuple(notes))
