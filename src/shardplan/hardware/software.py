"""The software stack a system runs: attention kernels, communication overlap, MoE dispatch and fusion.

Each field is a behaviour of a framework read from its source (docs/physics_sources.md); a system file may set any."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from shardplan.hardware.units import Fraction, NonNeg


class AttentionKernel(StrEnum):
    """How core attention runs on a system's software stack."""

    FLASH = "flash"
    """Fused IO-aware kernel (FlashAttention-2/3, cuDNN): no s² tensor in memory, causal blocks skipped; timed at
    the GPU's ``attention_efficiency``."""
    FLASH2 = "flash2"
    """FlashAttention-2 (PyTorch SDPA's flash backend: torchtitan, llm-foundry): the GPU's measured curves."""
    CUDNN = "cudnn"
    """cuDNN fused attention (Transformer Engine's FusedAttention, preferred on Hopper+: Megatron-LM, NeMo)."""
    CUDNN_FP8 = "cudnn-fp8"
    """cuDNN fused attention on per-tensor fp8 Q/K/V (Transformer Engine's ``fp8_dpa`` under Float8CurrentScaling,
    Megatron-LM ``--fp8-dot-product-attention``): cuDNN's rate times its measured fp8/bf16 speed ratio
    (``kernels.fp8_attention_ratio``; the bf16 rate where no fp8 attention is measured for the GPU's family)."""
    CUDNN_MXFP8 = "cudnn-mxfp8"
    """cuDNN fused attention on MXFP8 Q/K/V (``fp8_dpa`` under an MXFP8 recipe, Transformer Engine v2.16+; Blackwell):
    as ``cudnn-fp8`` at MXFP8's measured ratio."""
    FLASH3 = "flash3"
    """FlashAttention-3 (Hopper)."""
    TRITON = "triton"
    """FlashAttention in Triton (flash-attn's ``flash_attn_triton.py``, llm-foundry's ``attn_impl: triton`` until
    2024): FlashAttention-2's rate over the speedups Dao 2023 measured against it (``kernels.TRITON_SLOWDOWN``)."""
    UNFUSED = "unfused"
    """Batched GEMMs plus a fused softmax kernel (Megatron-LM 2021–22): the s² scores pass through HBM."""


# Context parallelism's K/V exchanges (Transformer Engine's implementations, costmodel/training/cp_comm.py).
CpCommType = Literal["p2p", "all_gather", "a2a"]
CP_COMM_TYPES: tuple[str, ...] = get_args(CpCommType)

class SoftwareSpec(BaseModel):
    """The software stack the efficiencies were measured with (kernels and overlap behaviour)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # The fields a system file states (``hardware.load.system_from_mapping``): a framework's software
    # (``costmodel.training.frameworks.framework_system``) leaves them as the user wrote them. Not serialised.
    _stated: frozenset[str] = PrivateAttr(default_factory=frozenset)

    attention: AttentionKernel = Field(AttentionKernel.FLASH, description="Core-attention implementation.")
    overlap_grad_reduce: bool = Field(True, description="Data-parallel gradient reduction overlaps backward.")
    overlap_param_gather: bool = Field(True, description="ZeRO-3 parameter all-gathers overlap compute.")
    overlap_p2p_comm: bool = Field(True, description="Interleaved-pipeline sends run beside compute, exposed only "
        "along the fill and drain. On as Megatron-LM's CLI, NeMo's perf configs and Megatron-Bridge run it with "
        "interleaving (Megatron-Core's own default is off; sources: docs/physics_sources.md).")
    zero3_overlap_fraction: Fraction = Field(
        0.8, description="Share of the overlappable ZeRO-3 communication (forward gathers under the forward, "
        "backward gathers and reduce-scatters under the backward) that hides when prefetching is on.")
    fsdp_backward_prefetch: Literal["pre", "post"] = Field(
        "pre", description="When ZeRO-3's backward gathers the next layer's weights: 'pre' (PyTorch FSDP "
        "BackwardPrefetch.BACKWARD_PRE; FSDP2, DeepSpeed) before the current layer's gradient computation, hiding "
        "behind it; 'post' (BACKWARD_POST, Composer's FSDPConfig default, so llm-foundry's) after it, so the gather "
        "shows and only the reduce-scatter overlaps the next layer's gradients (PyTorch docs, "
        "torch.distributed.fsdp.BackwardPrefetch).")
    fp8_scaling: Literal["current", "delayed", "mxfp8"] = Field(
        "current", description="How Transformer Engine scales fp8 GEMM inputs, which sets its quantization traffic: "
        "'current' (Float8CurrentScaling: an amax pass, then the cast writing the row- and column-wise copies: "
        "transformer_engine/pytorch/csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl), 'delayed' "
        "(DelayedScaling: one cast_transpose kernel with the previous steps' amax, updating amax on the way) or "
        "'mxfp8' (MXFP8 block scaling: one kernel writing both copies with a scale per 32 elements; "
        "common/cast/dispatch/quantize.cuh at TE d0067d0).")
    zero2_gather_per_forward: bool = Field(
        False, description="ZeRO-2 reshards the weights after every backward and all-gathers them again in every "
        "microbatch's forward, as ZeRO-3's forward does: PyTorch FSDP's SHARD_GRAD_OP ('unshards before the forward, "
        "does not reshard them after the forward, and only reshards them after the backward': torch.distributed.fsdp "
        "ShardingStrategy), driven by Composer, which wraps no FSDP microbatch in no_sync (composer/trainer "
        "dist_strategy.py ddp_sync_context: DDP only). False: DeepSpeed ZeRO-2, which keeps the 16-bit weights whole "
        "and gathers them once a step.")
    fp8_param_gather: bool = Field(
        True, description="Under fp8 the weights' primary copies are fp8, so the data-parallel parameter all-gathers "
        "(ZeRO-1/2 after the optimizer step, ZeRO-3/FSDP per layer) move 1 B per parameter instead of 2 (Megatron-LM "
        "--fp8-param-gather, set by every Megatron-Bridge fp8 recipe: src/megatron/bridge/training/mixed_precision.py "
        "@067f987 l.231-368; with the distributed optimizer or Megatron-FSDP, ZeRO >= 1; under ZeRO 1/2 a layer weight "
        "then holds its quantized copies: 2 B on Hopper, 1 B per-tensor on Blackwell, 2.06 B MXFP8). False: "
        "16-bit gathers (torchtitan's float8 default, enable_fsdp_float8_all_gather off).")
    fp8_weight_cache: bool = Field(
        True, description="Under an fp8/fp4 recipe Transformer Engine quantizes each linear weight in a step's first "
        "microbatch and keeps the quantized copies for the others (Megatron-Core passes is_first_microbatch unless "
        "disable_parameter_transpose_cache: extensions/transformer_engine.py@d98e8a6; TE Linear/GroupedLinear "
        "_fp8_workspaces at d0067d0). Without fp8 primary weights (fp8_param_gather off) the copies sit beside the "
        "16-bit weight in memory. False: the weight is cast again in every microbatch and nothing is kept "
        "(torchao's Float8Linear under torchtitan, PyTorch FSDP, AutoModel).")
    ddp_bucket_params: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Parameters per data-parallel gradient bucket (Megatron-LM --ddp-bucket-size; NeMo's "
        "optim.bucket_size): None is Megatron-Core's default, max(40M, 1M·dp·cp) (distributed/"
        "distributed_data_parallel.py@d98e8a6 l.133-134). The last bucket's reduction and the first bucket's gather "
        "show beside the backward and forward; a bucket never splits a parameter, so on the first stage those hold the "
        "whole embedding.")
    zero3_rail_parallel: bool = Field(
        True, description="ZeRO-3 gathers spread a node's share over all its NICs (NCCL rings per rail); "
        "False: one flat ring, each GPU's NIC carries the whole (n−1)/n of every gather.")
    tp_comm_overlap: Annotated[float, Field(ge=0.0, lt=1.0, allow_inf_nan=False)] = Field(
        0.5, description="Sequence-parallel TP collectives overlap GEMMs when > 0 (0: blocking collectives); with "
        "tp_overlap_method 'share', the share of them hidden (torchtitan async TP, Megatron without userbuffers).")
    tp_overlap_method: Literal["userbuffers", "share"] = Field(
        "userbuffers", description="How SP TP collectives overlap when tp_comm_overlap > 0: 'userbuffers' (Transformer "
        "Engine comm+GEMM overlap: ring-exchange all-gathers, pipelined reduce-scatters, bulk overlap in backward, "
        "each hidden as far as the GEMM beside it lasts) or 'share' (the fixed share tp_comm_overlap hides).")
    tp_overlap_rs: Literal["pipeline", "ring_exchange"] = Field(
        "pipeline", description="How userbuffers overlap the reduce-scatter after the output projection and FC2: "
        "'pipeline' (Transformer Engine's default, initialize_ub at d0067d0: the GEMM in 4 column chunks, each "
        "chunk reduce-scattered behind the next) or 'ring_exchange' (tp row chunks, each partial sum passed around "
        "the ring: Megatron-Bridge's fp8 configurations, training/comm_overlap.py at 067f987).")
    sp_input_regather: bool = Field(
        True, description="Under sequence parallelism a column-parallel layer saves its input's local shard and "
        "all-gathers it again in backward for the weight gradient, beside the data-gradient GEMM (Transformer Engine "
        "v2.7 layernorm_linear.py ln_out_needs_gather; Megatron-LM's own linear layers; Korthikanti et al. 2022 "
        "§4.2.2). False: autograd saves the gathered input (PyTorch DTensor sequence parallelism: torchtitan, "
        "AutoModel).")
    mla_local_down: bool = Field(
        True, description="MLA's down projections are replicated on every TP rank and run on the rank's own sequence "
        "shard, the up projections gathering the latents (Megatron-Core from 720c8b40d8, core 0.14: "
        "multi_latent_attention.py parallel_mode='duplicated'). False: the hidden state is gathered and the down "
        "projections run on every token (PyTorch DTensor TP: torchtitan, AutoModel; approximately Megatron-Core before "
        "0.14, whose column-parallel down projections also gather their outputs, not priced apart).")
    overlap_slowdown: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = Field(
        0.189, description="Compute time lost per second of communication hidden behind it: NCCL kernels take SMs "
        "and share the power budget with the overlapped kernels. 0.189 is the mean slowdown of compute overlapped "
        "with communication measured on A100, H100, MI250 and MI210 (Lee et al. 2025, arXiv 2507.03114)."
    )
    step_overhead_fraction: NonNeg = Field(
        0.0, description="Unmodelled per-step time (data loading, logging, host sync) as a fraction.")
    ep_comm_overlap: bool = Field(
        False, description="MoE expert-parallel all-to-alls hide behind another microbatch's compute (Megatron-Core "
        "overlap_moe_expert_parallel_comm: the combined 1F1B schedule pairs one microbatch's forward with another's "
        "backward; needs PP 1 or interleaving, no full recompute). Off: Megatron-Core's default "
        "(megatron/core/model_parallel_config.py at d98e8a6), every all-to-all exposed."
    )
    ep_overlap_slowdown: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = Field(
        0.59, description="With ep_comm_overlap and the 'deepep' dispatcher, the step time one second of all-to-all "
        "hidden behind compute still costs: DeepEP/HybridEP move tokens with kernels on SMs they hold (HybridEP 32 of "
        "an H100's 132 in the recipe measured), and those kernels run longer beside the GEMMs. From NVIDIA's rank-0 "
        "nsys A/B of Megatron-Bridge Qwen3-30B-A3B on 16 H100 (HybridEP, EP 16; Megatron-Bridge@067f987 skills/"
        "nemo-mbridge-perf-moe-comm-overlap, 'HybridEP production-shape validation'): GPU-active union 22.821 s with "
        "9.079 ms of communication beside compute (0.11% of it: 8.25 s in all) off, 21.221 s with 3.959 s beside "
        "(36.55%: 10.83 s) on, so the kernels took (21.221 + 3.959) − (22.821 + 0.009) = 2.350 s longer for 3.950 s "
        "more overlap: 0.59 of each second of overlap was not saved (the communication kernels grew 2.58 s; the "
        "compute kernels did not slow). The NCCL 'alltoall' dispatcher keeps overlap_slowdown.")
    ep_delay_wgrad: bool = Field(
        False, description="With ep_comm_overlap, the experts' weight gradients run after the backward dispatch "
        "(Megatron-Core delay_wgrad_compute), so that all-to-all hides behind them; False (Megatron-Core's default, "
        "model_parallel_config.py at d98e8a6): the dispatch waits for the whole expert backward, weight gradients "
        "included. Megatron-Bridge's performance scripts set it with the overlap (scripts/performance/utils/"
        "helpers.py set_moe_a2a_overlap_overrides at 7af9601); its Qwen3-30B-A3B H100 recipe does not.")
    moe_host_sync: bool = Field(
        True, description="Each dropless MoE forward copies its per-expert token counts to the host and waits, so the "
        "GPU idles until the host has issued the kernels after it (Megatron-Core d98e8a6 token_dispatcher.py: "
        "alltoall, DeepEP, HybridEP; 616 µs inferred on a DGX H100 host: training.layers.MOE_SYNC_IDLE_S). False: no "
        "such wait (moe_expert_rank_capacity_factor with full-iteration CUDA graphs, or drop-and-pad).")
    moe_balanced_routing: bool = Field(
        False, description="Tokens go to experts round-robin, every rank equally loaded (NeMo AutoModel's benchmark "
        "FakeBalancedGate). False: routing per token (learned, or random logits: Megatron's forced balancing), so the "
        "busiest EP rank carries more than the mean.")
    moe_drop_and_pad: bool = Field(
        False, description="Tokens over each expert's capacity are dropped and every expert's input padded to it "
        "(Megatron-Core moe_pad_expert_input_to_capacity): fixed shapes, no host wait, no busiest rank. False: "
        "dropless.")
    moe_router_padding: bool = Field(
        False, description="The router pads expert token counts to the fp8/fp4 alignment (Megatron-Core "
        "moe_router_padding_for_quantization). False (the default): with the alltoall dispatcher the grouped MLP pads "
        "and unpads with a copy each (TE Fp8Padding/Fp8Unpadding, experts.py at d98e8a6); HybridEP pads in dispatch.")
    elementwise_kernels: Literal["fused", "eager"] = Field("fused", description="Rotary, activation and loss as one "
        "kernel each way ('fused': TE or torch.compile) or as PyTorch eager kernels (costmodel/core/passes.py).")
    norm_kernel: Literal["fused", "native", "composite"] = Field("fused", description="Norm as one kernel each way, "
        "PyTorch's F.layer_norm ('native') or torchtitan's eager RMSNorm ('composite'): costmodel/core/passes.py.")
    attention_unpad: bool = Field(False, description="q, k, v packed around a varlen flash kernel (passes.UNPAD).")
    loss_memory: Literal["vocab_parallel", "torch_fp32", "torch_bf16"] = Field(
        "vocab_parallel", description="How the loss holds the logits at its peak, bytes per logit (per token and vocab "
        "entry of a TP shard): 'vocab_parallel' 6 (Megatron-Core: the bf16 logits beside the loss's fp32 softmax or "
        "gradient buffer, vocab-parallel or Transformer Engine's fused cross entropy); 'torch_fp32' 12 (PyTorch "
        "F.cross_entropy on an fp32 upcast of the logits: log_softmax's saved fp32 output, nll_loss's fp32 gradient "
        "and log_softmax's fp32 input gradient are alive together in the loss backward; torchtitan@9dec370 train.py "
        "l.131-134, HEAD components/loss.py; priced as at TP 1 without PP: training.memory.LOSS_BYTES_PER_LOGIT); "
        "'torch_bf16' 6 (the same on 16-bit logits, e.g. NeMo AutoModel's MaskedCrossEntropy with fp32_upcast false; "
        "AutoModel plans keep the default).")
    cross_entropy_fusion: Literal["native", "te"] = Field(
        "native", description="Which fused vocab-parallel cross entropy a Megatron stack runs (Megatron-LM "
        "--cross-entropy-fusion-impl): 'native' (Megatron-Core's three jit-fused kernels with an fp32 softmax, "
        "Megatron-LM's default) or 'te' (Transformer Engine's Triton kernels, which write the logits' gradient in "
        "place in the forward: Megatron-Bridge's performance recipes, perf_recipes/_common.py@067f987 "
        "_benchmark_common, and the perf configs since 2025-08; NVIDIA's MLPerf Llama 3.1 8B, CE_FUSION_IMPL=te). "
        "Traffic: "
        "costmodel/core/passes.py; memory: training/memory.py.")
    recompute_early_stop: bool = Field(
        False, description="A fully recomputed layer's forward reruns only until the last tensor its backward needs is "
        "back: PyTorch's non-reentrant torch.utils.checkpoint with its default early stop (NeMo AutoModel, llm-foundry "
        "under Composer, torchtitan before 2025-08-29), so a dense MLP's FC2 (its input is saved before the GEMM "
        "runs), the collectives on its output and the residual add are not rerun (training.layers.full_rerun_ops; "
        "measured on an H200: benchmarks/gpu/RESULTS.md §9). False: the whole forward reruns (Megatron-Core's "
        "CheckpointFunction, reentrant checkpointing, torchtitan since 25413d224).")
    cp_comm_type: CpCommType = Field(
        "p2p", description="How context parallelism exchanges K/V (Megatron-Core --cp-comm-type, Transformer Engine's "
        "implementations): 'p2p' (a ring beside the attention kernels, exposed only where it outlasts them), "
        "'all_gather' (K/V all-gathered before attention and dK/dV reduce-scattered after, exposed: Llama 3's CP) or "
        "'a2a' (all-to-alls trade sequence for heads around one whole-sequence kernel, exposed; the heads of Q and "
        "K/V per TP rank must divide by cp). Sources: costmodel/training/cp_comm.py.")
    ep_dispatcher: Literal["alltoall", "deepep"] = Field(
        "alltoall", description="How MoE tokens travel: 'alltoall' (one copy per routed expert, NCCL all-to-all: "
        "Megatron's alltoall dispatcher) or 'deepep' (Megatron's flex dispatcher with DeepEP/HybridEP: a token "
        "crosses the network once per destination node and NVLink fans it out to the ranks there, one copy per rank).")
    expert_mlp: Literal["te_grouped", "fused_ops", "compiled", "grouped_mm"] = Field(
        "te_grouped", description="How the routed experts' MLP runs: 'te_grouped' (Megatron-Core TEGroupedMLP: FC2 "
        "biases added after the GEMM, a clamped GLU's clamps as eager kernels), 'fused_ops' (Transformer Engine's op "
        "fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP: both inside; on Blackwell under MXFP8/NVFP4 its fused grouped MLP: "
        "each FC one grouped GEMM over the local experts, the activation and the inner quantizations in their "
        "epilogues), 'compiled' (torch.compile'd activation, clamps "
        "inside; FC1 and FC2 biases after their GEMMs: NeMo AutoModel) or 'grouped_mm' (torchtitan: each expert "
        "GEMM one torch._grouped_mm CUTLASS kernel over every local expert, biases after it). Every choice but "
        "'grouped_mm' and the fused grouped MLP prices one GEMM per expert. Sources: costmodel/core/passes.py, "
        "benchmarks/gpu/RESULTS.md §4, training/ctx.Ctx.fused_grouped_mlp.")
