"""Memory per GPU: parameters held per layer kind, and activations stored per layer and microbatch.

Activations follow Korthikanti et al. 2022 (arXiv 2205.05198) §4, generalised to GQA, gated and
MoE MLPs and optional dropout. For a GPT layer (MHA, 4h GeLU MLP, dropout, 16-bit) they reduce to the
paper's per-layer bytes: ``s·b·h·(34 + 5·a·s/h)`` without parallelism; ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``
with tensor parallelism; ``s·b·h·(34 + 5·a·s/h)/t`` with sequence parallelism too; selective recompute
drops the ``5·a·s/h`` term; full recompute keeps ``2·s·b·h`` (the layer input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.passes import traffic
from shardplan.costmodel.core.shards import layer_shard
from shardplan.costmodel.training.ctx import Ctx
from shardplan.models.params import norm_params


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one layer held by one GPU: replicated over data parallelism (dense) or over the
    expert-data-parallel group (experts)."""

    dense: np.ndarray
    expert: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.dense + self.expert


def layer_params(ctx: Ctx, kind: str) -> LayerParams:
    """Parameters per GPU of one layer of ``kind`` (a mixer, mlp, moe, embedding or head: ``core.shards``); the
    head carries the workload's MTP modules (``mtp_params``)."""
    r = ctx.rows
    shard = layer_shard(ctx.model, kind, r.tp, r.ep, r.pp, r.etp)
    if kind == "head" and ctx.work.mtp_layers:
        mtp = mtp_params(ctx)
        return LayerParams(shard.dense + mtp.dense, shard.experts + mtp.expert)
    return LayerParams(shard.dense, shard.experts)


def fp8_primary_weights(ctx: Ctx) -> np.ndarray:
    """Per row, whether the weights' primary copies are fp8 (``SoftwareSpec.fp8_param_gather`` under an fp8 recipe),
    which Megatron runs only with the distributed optimizer or Megatron-FSDP (ZeRO >= 1: Megatron-LM d98e8a6
    arguments.py l.1095-1097); elsewhere the weights stay 16-bit."""
    primary = ctx.work.dtype == "fp8" and ctx.system.software.fp8_param_gather
    return primary & (np.asarray(ctx.rows.zero) >= 1)


def cached_weight_bytes(ctx: Ctx) -> np.ndarray:
    """Bytes per transformer-layer parameter, per row, that its quantized copies hold beyond the 16-bit weight
    ``stage_memory.weight_bytes`` counts (the copies a cast writes, ``Ctx.quantized_copy_bytes``: on Hopper a row-wise
    and a transposed fp8 copy, 2 B; on Blackwell per-tensor 1 B; MXFP8 2 + 2/32 B; NVFP4 1.125 B). Beside 16-bit
    primary weights, the copies Transformer Engine keeps across a step's microbatches
    (``SoftwareSpec.fp8_weight_cache``): all of them. With fp8 primary weights (``fp8_primary_weights``) the copies
    are the weight, in place of its 16 bits: the difference, on the share not offloaded (Megatron-FSDP's sharded
    weights, ZeRO 3, are left at 2 B). The embedding and the LM head run outside the recipe and hold none. A layer's
    norms and router are counted with its linear weights (under 0.1% of them). Under Megatron-FSDP the cache holds
    whole gathered weights (unsharded)."""
    r, sw = ctx.rows, ctx.system.software
    cache = np.full(np.shape(r.zero), ctx.quantized_copy_bytes if sw.fp8_weight_cache else 0.0)
    return np.where(fp8_primary_weights(ctx), primary_weight_bytes(ctx) * (1 - np.asarray(r.f_w)), cache)


def primary_weight_bytes(ctx: Ctx) -> np.ndarray:
    """Per row, what an fp8 primary layer weight's quantized copies hold beyond 16 bits (``cached_weight_bytes``) with
    nothing offloaded: the copies less 2 B (Hopper 0, Blackwell per-tensor −1, MXFP8 +1/16), under ZeRO 1/2; 0 where
    the weights are 16-bit or Megatron-FSDP shards them (ZeRO 3)."""
    below_fsdp = fp8_primary_weights(ctx) & (np.asarray(ctx.rows.zero) < 3)
    return np.where(below_fsdp, ctx.quantized_copy_bytes - 2.0, 0.0)


def cached_weight_bytes_floor(ctx: Ctx) -> np.ndarray:
    """The least ``cached_weight_bytes`` a row can take over recompute and offload choices (``fit_bound``): fp8 primary
    weights' copies less their 16 bits where that is negative (Blackwell per-tensor, 1 B under 2), else nothing (the
    cache only adds)."""
    return np.minimum(primary_weight_bytes(ctx), 0.0)


def cached_mtp_params(ctx: Ctx) -> np.ndarray:
    """The MTP modules' parameters whose quantized copies are cached (``cached_weight_bytes``): without the last
    stage's embedding copy (``mtp_params``), which runs outside the recipe."""
    return mtp_params(ctx, embedding_copy=False).total


def mtp_ffn_kind(ctx: Ctx) -> str:
    """The feed-forward kind of an MTP module's transformer layer: the model's last layer's (``models.params``
    ``mtp_param_breakdown``; Megatron-LM d98e8a6 training.py counts it by ``last_layer_is_moe``)."""
    m = ctx.model
    return "moe" if m.moe is not None and m.num_moe_layers else "mlp"


def mtp_params(ctx: Ctx, *, embedding_copy: bool = True) -> LayerParams:
    """Parameters per GPU of the workload's MTP modules, all on the last stage (Megatron-LM d98e8a6
    transformer/multi_token_prediction.py): per module a full-attention layer and a layer of ``mtp_ffn_kind``,
    enorm, hnorm and a final norm, the column-parallel 2h→h ``eh_proj``; the LM head is the model's own, and the
    word embedding too, except that under PP the last stage holds its own copy for the MTP lookup (``GPTModel``
    builds the embedding where ``pre_process or mtp_process``; with tied embeddings that is the copy the head
    already holds). ``embedding_copy`` False: the modules alone, without that copy."""
    m, r = ctx.model, ctx.rows
    n, h, t = float(ctx.work.mtp_layers), m.hidden_size, r.tp.astype(float)
    attn = layer_shard(m, "attention", r.tp, r.ep, r.pp, r.etp)
    ffn = layer_shard(m, mtp_ffn_kind(ctx), r.tp, r.ep, r.pp, r.etp)
    emb = layer_shard(m, "embedding", r.tp, r.ep, r.pp, r.etp)
    # under PP the last stage needs the word embedding: its own copy, unless tied embeddings already put one there
    copy = np.where((r.pp > 1) & (not m.tied_embeddings) & embedding_copy, emb.dense, 0.0)
    dense = attn.dense + ffn.dense + 2 * h * h / t + 3 * norm_params(m, h) + copy
    return LayerParams(n * dense, n * (attn.experts + ffn.experts))


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one layer stores for backward, per microbatch, under each recompute mode."""

    none: np.ndarray
    selective: np.ndarray
    full: np.ndarray


def layer_activations(ctx: Ctx, kind: str) -> LayerActivations:
    """Stored activation bytes of one layer of ``kind`` for one microbatch on one GPU."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    T, t = ctx.tokens, r.tp.astype(float)
    sp = r.sp == 1
    h = m.hidden_size
    drop = 1.0 if ctx.dropout else 0.0
    # A GEMM input kept for the weight gradient: under fp8 Transformer Engine keeps its fp8 (columnwise) copy, 1 byte
    # (TransformerEngine@d0067d0 module/grouped_linear.py, linear.py: inputmat.update_usage(rowwise_usage=False,
    # columnwise_usage=True); MXFP8's one scale byte per 32 values is left out); else the 16-bit activation.
    q = 1.0 if ctx.work.dtype == "fp8" else e

    def shard(unsplit: np.ndarray | float) -> np.ndarray:
        """Per-token bytes outside TP regions: sharded only under sequence parallelism."""
        return np.where(sp, unsplit / t, unsplit)

    def gemm_input(unsplit: np.ndarray | float) -> np.ndarray:
        """A column-parallel GEMM's saved input: its local shard under SP where the backward gathers it again
        (``SoftwareSpec.sp_input_regather``, ``sp_comm.tp_entry``), else the gathered whole."""
        return np.where(sp & ctx.system.software.sp_input_regather, unsplit / t, unsplit)

    layer_input = T * shard(e * h)
    # What an eager stack's graph keeps beyond the fused kernels (core.passes ``saved``): the composite norm's fp32
    # input, eager SwiGLU's silu output (16-bit counts, scaled to the activation width).
    sw = ctx.system.software
    norm_saved = traffic("norm", sw.elementwise_kernels, sw.norm_kernel).saved
    act_saved = activation_saved(ctx)
    if kind in ("linear", "mamba"):
        # norm input, in_proj input, dropout mask | projections' outputs, conv output, fp32 gates/dt, core output,
        # gated-norm output and out_proj input (÷t), and the fp32 states kept at each chunk boundary for backward
        if kind == "linear":
            la = m.linear_attention
            assert la is not None
            proj, conv, out, gates = 2 * la.key_dim + 2 * la.value_dim + 2 * la.num_value_heads, \
                2 * la.key_dim + la.value_dim, la.value_dim, 2 * la.num_value_heads
            state, chunk = la.num_value_heads * la.key_head_dim * la.value_head_dim, 64.0  # ops GDN_CHUNK
        else:
            sm = m.mamba
            assert sm is not None
            proj, conv, out, gates = sm.inner + sm.conv_dim + sm.num_heads, sm.conv_dim, sm.inner, sm.num_heads
            state, chunk = sm.num_heads * sm.head_dim * sm.d_state, float(sm.chunk_size)
        split = (e * (proj + conv + 3 * out) + 4.0 * gates + 4.0 * state / chunk) / t
        base = T * (shard((e + drop + norm_saved) * h) + gemm_input(e * h) + split)
        return LayerActivations(none=base, selective=base, full=layer_input)
    if kind in ("attention", "sliding", "chunked"):
        if m.mla is not None:
            d_qk, d_v = m.mla.qk_head_dim, m.mla.v_head_dim
            kv_heads = float(m.num_heads)
        else:
            d_qk = d_v = m.head_size
            kv_heads = m.kv_heads
        kv = np.maximum(kv_heads / t, 1.0)
        # norm input, QKV input, dropout mask | Q, K (for QKᵀ), V, output-projection input (÷t); MLA: the latents
        # its up-projections keep for their weight gradients
        unsplit = (e + drop + norm_saved) * h
        qkv = e * (m.num_heads / t * d_qk + kv * d_qk + kv * d_v)
        # MLA: the up projections keep their latents; with ``SoftwareSpec.mla_local_down`` the replicated down
        # projections keep the rank's own shard of the layer input (no gather) and the latents are gathered again in
        # backward under SP (``operators.projections``), else the gathered input and the whole latents
        local = m.mla is not None and ctx.system.software.mla_local_down
        lat = q * (m.mla.q_lora_rank + m.mla.kv_lora_rank) if m.mla is not None else 0.0
        latents = gemm_input(lat) if local else lat
        split = qkv + q * m.num_heads / t * d_v
        # softmax output (e), dropout mask (1) and dropout output (e) per score, unfused only
        scores = np.where(ctx.flash, 0.0, (m.num_heads / t) * ctx.work.seq_len * (e + drop * (1 + e)))
        lse = np.where(ctx.flash, (m.num_heads / t) * 4.0, 0.0)  # flash keeps fp32 log-sum-exp per head
        gathered = shard(q * h) if local else gemm_input(q * h)  # the QKV (or down projections') input
        base = T * (shard(unsplit) + gathered + latents + split + lse)
        return LayerActivations(none=base + T * scores, selective=base, full=layer_input)
    if kind == "mlp":
        g = 2 if m.mlp.gated else 1
        f = m.ffn_hidden_size / t
        base = T * (shard((e + drop + norm_saved) * h) + gemm_input(q * h) + f * (g * e + q + act_saved))
        return LayerActivations(none=base, selective=base, full=np.zeros_like(base))  # input kept by attention
    if kind == "moe":
        assert m.moe is not None
        moe = m.moe
        g = 2 if m.mlp.gated else 1
        copies = moe.experts_per_token * moe.capacity_factor
        f = moe.expert_ffn_hidden_size / t
        # per routed copy: FC1 input, FC1 output (the activation's input), FC2 input (the activation's output)
        experts = copies * (q * h / t + f * (g * e + q + act_saved + clamp_saved(ctx)))
        shared = moe.num_shared_experts * moe.shared_ffn / t * (g * e + q + act_saved)
        router = shard(moe.num_experts * 4.0 + copies * 8.0)
        base = T * (shard((2 * e + drop + norm_saved) * h) + experts + shared + router)  # norm input, router input
        return LayerActivations(none=base, selective=base, full=np.zeros_like(base))
    raise ValueError(f"unknown layer kind {kind}")


def activation_saved(ctx: Ctx) -> float:
    """Bytes per activation-output element an eager activation keeps beyond the fused kernel's (core.passes
    ``saved``: eager SwiGLU's silu output), scaled to the activation width."""
    sw = ctx.system.software
    return traffic("gated_act" if ctx.model.mlp.gated else "act", sw.elementwise_kernels).saved * ctx.act_bytes / 2.0


def clamp_saved(ctx: Ctx) -> float:
    """Bytes per activation-output element a clamped GLU's eager clamps keep in the routed experts (core.passes
    ``glu_clamp``)."""
    m = ctx.model
    if m.activation_clamp is None or not m.mlp.gated or not ctx.glu_clamp_apart:
        return 0.0
    return traffic("glu_clamp").saved * ctx.act_bytes / 2.0


def embedding_activations(ctx: Ctx) -> np.ndarray:
    """First stage, per microbatch: the embedding dropout mask (Korthikanti et al. §4.3)."""
    drop = 1.0 if ctx.dropout else 0.0
    return ctx.tokens * np.where(ctx.rows.sp == 1, drop * ctx.model.hidden_size / ctx.rows.tp,
                                 drop * ctx.model.hidden_size)


# Bytes per logit the loss holds at its peak (``SoftwareSpec.loss_memory``). Megatron-Core: the output layer's bf16
# logits (2 B) stay alive while the loss holds an fp32 copy (4 B) — the vocab-parallel cross entropy's softmax, made
# and differentiated in place (tensor_parallel/cross_entropy.py at d98e8a6 l.25, 61-79, 181-204), or, from
# Transformer Engine v2.18, TE's fused cross entropy's fp32 gradient buffer (d0067d0 pytorch/triton/cross_entropy.py,
# grad_input = empty_like(_input, dtype=float32)); in the backward that fp32 gradient and its bf16 cast coexist: 6 B
# either way. TE up to v2.17 (``cross_entropy_fusion`` "te", as priced): ``TE_LOSS_BYTES_PER_LOGIT``.
# PyTorch's F.cross_entropy = nll_loss(log_softmax(x)):
# in the loss backward, log_softmax's saved output, nll_loss's gradient (zeros_like its input) and log_softmax's input
# gradient (_log_softmax_backward_data, empty_like) coexist, each a logit-sized tensor in the logits' dtype: 3 × 4 B on
# an fp32 upcast (torchtitan; its forward holds at most 10 B: bf16 logits, fp32 copy, log_softmax output), 3 × 2 B on
# bf16 logits. Not priced: torchtitan's loss under TP (loss_parallel's DTensor decomposition holds more per local
# logit) and under PP (torch.distributed.pipelining keeps every microbatch's output on the last stage).
LOSS_BYTES_PER_LOGIT = {"vocab_parallel": 6.0, "torch_fp32": 12.0, "torch_bf16": 6.0}
# Transformer Engine's Triton cross entropy up to v2.17 (``SoftwareSpec.cross_entropy_fusion`` "te"; v2.8
# pytorch/triton/cross_entropy.py: the forward writes the gradient over the 16-bit logits and the backward scales it
# there): the logits' own 2 B per logit, nothing beside them.
TE_LOSS_BYTES_PER_LOGIT = 2.0


def head_activations(ctx: Ctx) -> np.ndarray:
    """Last stage, per microbatch: final-norm and LM-head inputs, and the logits as the loss holds them at its peak
    (``LOSS_BYTES_PER_LOGIT``); once more for each MTP module, whose head and loss run in the same forward
    (Megatron-LM d98e8a6 ``process_mtp_loss``)."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    norm_in = np.where(r.sp == 1, e * m.hidden_size / r.tp, e * m.hidden_size)
    sw = ctx.system.software
    per_logit = TE_LOSS_BYTES_PER_LOGIT if sw.cross_entropy_fusion == "te" else LOSS_BYTES_PER_LOGIT[sw.loss_memory]
    return (1 + ctx.work.mtp_layers) * ctx.tokens * (norm_in + e * m.hidden_size + per_logit * m.vocab_size / r.tp)


def mtp_activations(ctx: Ctx) -> np.ndarray:
    """Last stage, per microbatch in flight: what the MTP modules store for backward beyond their heads' logits:
    the looked-up embedding and the hidden state (the enorm/hnorm inputs), the concatenated 2h ``eh_proj`` input
    (its fp8 copy under fp8), and the transformer layer's activations with nothing recomputed (Megatron-LM's MTP
    layer follows no recompute setting of the decoder's here: an upper bound)."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    if not ctx.work.mtp_layers:
        return np.zeros_like(ctx.tokens)
    q = 1.0 if ctx.work.dtype == "fp8" else e
    h, t = m.hidden_size, r.tp.astype(float)
    inputs = (2 * e + 2 * q) * h / np.where(r.sp == 1, t, 1.0)  # SP shards them; eh_proj re-gathers its input
    layer = layer_activations(ctx, "attention").none + layer_activations(ctx, mtp_ffn_kind(ctx)).none
    return ctx.work.mtp_layers * (ctx.tokens * inputs + layer)


# --- memory the model cannot see as tensors (per GPU) ----------------------------------------------------
MiB = 1024**2
# CUDA context with lazy module loading (default since CUDA 12.2; NVIDIA forum "How to enable the CUDA's lazy
# module loading"): ≈ 0.5 GiB; PyTorch forum "What is the reason for pytorch's GPU memory floor?" measured 723 MiB
# with eager loading on an older stack.
CUDA_CONTEXT_BYTES = 512 * MiB
# cuBLAS workspace on sm90: 4096·8·1024 B = 32 MiB per handle and stream (pytorch aten/src/ATen/cuda/
# CublasHandlePool.cpp parseChosenWorkspaceSize); Transformer Engine keeps its own 32 MiB cuBLASLt workspace
# (transformer_engine/pytorch/cpp_extensions/gemm.py get_cublas_workspace_size_bytes: "32 MiB if using hopper"),
# repeated _NUM_MAX_UB_STREAMS = 3 times when TP communication overlap is initialised.
GEMM_WORKSPACE_BYTES = 32 * MiB
UB_STREAMS = 3
# TP communication overlap (TE userbuffers, Megatron --tp-comm-overlap): initialize_ub registers one buffer of
# the whole [s·b/cp, h] activation per overlapped GEMM: 6 all-gather layers (qkv_fprop, qkv_dgrad, proj_dgrad,
# fc1_fprop, fc1_dgrad, fc2_dgrad; fp8 under an fp8 recipe) and 4 reduce-scatter layers (proj_fprop, fc2_fprop,
# qkv_wgrad, fc1_wgrad; 16-bit) (transformer_engine/pytorch/module/base.py initialize_ub).
UB_AG_BUFFERS, UB_RS_BUFFERS = 6, 4
UB_RING_RS = 2  # proj_fprop, fc2_fprop: by ring exchange (``SoftwareSpec.tp_overlap_rs``) 2·tp − 1 chunks, not tp
# NCCL buffers per communicator: each channel's receive connection holds the Simple (NCCL_BUFFSIZE 4 MiB),
# LL (512 KiB) and LL128 (4.6875 MiB) buffers (NVIDIA/nccl@5067397 src/init.cc DEFAULT_*_BUFFSIZE) = 9.19 MiB,
# over 16 channels (NCCL's ring/tree channel count on an 8-GPU NVSwitch node; NCCL_MIN_NCHANNELS default is
# lower, MAXCHANNELS 64) ≈ 147 MiB per communicator.
NCCL_CHANNEL_BYTES = 4 * MiB + 512 * 1024 + 4.6875 * MiB
NCCL_CHANNELS = 16


def framework_memory(ctx: Ctx) -> np.ndarray:
    """Bytes per GPU outside the model's tensors: CUDA context, GEMM workspaces, one NCCL communicator per
    parallel group with more than one rank (TP, CP, DP·CP, PP, EP, and the expert-data-parallel group) and
    the userbuffers of TP communication overlap; ``TrainWorkload.framework_bytes`` overrides it. Allocator
    fragmentation is not here: it is the plan's memory headroom."""
    r, w = ctx.rows, ctx.work
    calibrated = ctx.system.calibration.memory_overhead_bytes  # a calibration's fitted extra (hardware.spec)
    if w.framework_bytes is not None:
        return np.full(len(r), float(w.framework_bytes) + calibrated)
    groups = [r.tp, r.cp, r.dp * r.cp, r.pp, r.ep, r.edp]
    communicators = sum((np.asarray(g) > 1).astype(float) for g in groups[:5])
    if ctx.model.moe is not None:
        communicators = communicators + (np.asarray(groups[5]) > 1)
    sw = ctx.system.software
    # TE's userbuffers: allocated before the model is built (an MLA model turns the overlap off later but keeps them),
    # never for torchtitan's async TP ('share') or NVFP4 (TE takes no NVFP4 userbuffer; NVIDIA's configs turn it off)
    ub = (r.tp > 1) & (r.sp == 1) & bool(sw.tp_comm_overlap > 0 and sw.tp_overlap_method == "userbuffers"
                                         and w.dtype != "fp4")
    ag_bytes = 1.0 if w.dtype == "fp8" else ctx.act_bytes
    # a ring-exchange reduce-scatter holds 2·tp − 1 chunks of tokens/tp rows (CommOverlapP2PBase::initialize)
    rs = UB_RS_BUFFERS + (UB_RING_RS * (r.tp - 1) / r.tp if sw.tp_overlap_rs == "ring_exchange" else 0.0)
    ub_bytes = np.where(ub, ctx.tokens * ctx.model.hidden_size * (UB_AG_BUFFERS * ag_bytes + rs * ctx.act_bytes),
                        0.0)
    workspaces = GEMM_WORKSPACE_BYTES * (1 + np.where(ub, UB_STREAMS, 1))
    nccl = communicators * NCCL_CHANNELS * NCCL_CHANNEL_BYTES
    return CUDA_CONTEXT_BYTES + workspaces + nccl + ub_bytes + calibrated
