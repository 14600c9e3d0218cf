"""The training context: per-row shapes of a microbatch on one GPU, and how backward and recompute derive
from the forward operators.

Layer builders (``layers.py``) emit forward ops; ``backward.backward`` and recompute turn
them into the other phases with the usual rules: a GEMM's backward is two GEMMs of the same size
(activation and weight gradients), an elementwise kernel's backward moves 1.5× the bytes,
flash attention's backward does 2.5× the forward FLOPs (five matmuls instead of two; Dao 2023), and a
collective in forward has a mirror collective in backward (Megatron's f/g operators).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import (
    attention_efficiency,
    attention_peak,
    attention_time,
    check_fp8_attention,
    elementwise_time,
    gemm_time,
    kernel_time,
    memory_time,
    outside_recipe,
    window_factor,
    with_launch,
)
from shardplan.costmodel.core.operators import (
    Attention,
    Elementwise,
    Gemm,
    attention_dims,
    unfused_attention,
)
from shardplan.costmodel.core.ops import ATTN, COMM, GEMM, MEM, GemmGrads, Op
from shardplan.costmodel.core.passes import FUSED, traffic
from shardplan.costmodel.core.routing import round_robin_blocks, routed_blocks
from shardplan.costmodel.training import sp_comm
from shardplan.costmodel.training.cp_comm import cp_ops
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload, fill_drain_slots, pipeline_schedules
from shardplan.costmodel.training.quantization import (
    LOW_PRECISION,
    NVFP4_BYTES,
    quantize_kernels,
    quantized_copy_bytes,
    split_quantize_kernels,
)
from shardplan.costmodel.training.sp_comm import masked
from shardplan.costmodel.training.userbuffers import ub_chunks
from shardplan.hardware.spec import AttentionKernel, GpuSpec, SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES

DROPOUT_FAMILIES = ("gpt", "opt", "bloom")
# A fused attention backward recomputes QKᵀ and the softmax and runs four matmuls against the forward's two: 2.5× its
# FLOPs (FlashAttention-2, Dao 2023 §4.1, which counts the backward so)
BWD_ATTN_FLOPS = 2.5


@dataclass(slots=True)
class Ctx:
    """Everything the formulas need for a batch of layout rows, with derived per-row quantities."""

    model: ModelSpec
    system: SystemSpec
    work: TrainWorkload
    rows: LayoutArrays
    tokens: np.ndarray = field(init=False)  # tokens per GPU per microbatch: b·s/cp
    norm_tokens: np.ndarray = field(init=False)  # tokens an elementwise kernel sees (÷t under SP)
    act_bytes: float = field(init=False)
    mm_dtype: str = field(init=False)
    flash: np.ndarray = field(init=False)  # flash attention per row (context parallel requires it)
    flash_kernel: AttentionKernel = field(init=False)  # which fused kernel times it
    dropout: bool = field(init=False)
    memo: dict[str, tuple[Any, Any]] = field(init=False, repr=False, compare=False)  # ``stage_memory.once``

    def __post_init__(self) -> None:
        self.memo = {}
        r, w = self.rows, self.work
        self.tokens = (r.mb * w.seq_len / r.cp).astype(float)
        self.norm_tokens = np.where(r.sp == 1, self.tokens / r.tp, self.tokens)
        self.act_bytes = DTYPE_BYTES["bf16"] if w.dtype in LOW_PRECISION else DTYPE_BYTES[w.dtype]
        self.mm_dtype = w.dtype
        kernel = w.attention or self.system.software.attention
        check_fp8_attention(self.gpu, str(kernel), w.dtype)
        self.flash = (r.cp > 1) | (kernel != AttentionKernel.UNFUSED)
        # context parallelism needs a fused kernel: the stack's generic one when it runs unfused otherwise
        self.flash_kernel = AttentionKernel.FLASH if kernel == AttentionKernel.UNFUSED else kernel
        self.dropout = w.dropout if w.dropout is not None else self.model.family in DROPOUT_FAMILIES

    @property
    def schedules(self) -> np.ndarray:
        """Pipeline schedules per step (``layout.pipeline_schedules``)."""
        r = self.rows
        return pipeline_schedules(r.gb, r.dp, r.pp, self.work.local_batch)

    @property
    def fill_slots(self) -> np.ndarray:
        """Microbatch slots of fill and drain per step (``layout.fill_drain_slots``)."""
        r = self.rows
        return fill_drain_slots(r.gb, r.dp, r.pp, r.v, self.work.local_batch)

    @property
    def microbatches(self) -> np.ndarray:
        """Microbatches per data-parallel rank per step (at least one)."""
        r = self.rows
        return np.maximum(r.gb / (r.dp * r.mb), 1.0)

    @property
    def gpu(self) -> GpuSpec:
        return self.system.gpu

    @property
    def tp(self) -> np.ndarray:
        return self.rows.tp.astype(float)

    @property
    def etp(self) -> np.ndarray:
        return self.rows.etp.astype(float)

    @property
    def kv_cache(self) -> bool:
        return False

    @property
    def expert_bias_apart(self) -> bool:
        """FC2's per-expert biases after the GEMM (TEGroupedMLP, AutoModel; core.passes ``expert_bias``)."""
        return self.system.software.expert_mlp != "fused_ops"

    @property
    def expert_fc1_bias_apart(self) -> bool:
        """FC1's per-expert biases after the GEMM (AutoModel; torchtitan, whose torch._grouped_mm takes no bias;
        core.passes ``expert_fc1_bias``)."""
        return self.system.software.expert_mlp in ("compiled", "grouped_mm")

    @property
    def fused_grouped_mlp(self) -> bool:
        """The routed experts run Transformer Engine's fused grouped MLP (``SoftwareSpec.expert_mlp`` 'fused_ops'
        where it applies: TE's ``_GroupedMLP_CuTeGEMMBase.is_supported`` needs compute capability 10 — the GPUs
        whose FP8 GEMMs take any layout, ``GpuSpec.fp8_any_layout`` — and its block-scaled quantizers, MXFP8 or
        NVFP4; TransformerEngine@d0067d0 transformer_engine/pytorch/ops/fused/grouped_mlp.py, from PR #2769): each
        FC one cuDNN CuTe-DSL grouped GEMM over every local expert, the activation, its probability scaling and FC2's
        input quantization in FC1's epilogue, the activation's backward and FC1's output-gradient quantization in
        FC2's dgrad epilogue. Elsewhere TE's op fuser runs its basic ops."""
        blocks = self.mm_dtype == "fp4" or (self.mm_dtype == "fp8" and self.system.software.fp8_scaling == "mxfp8")
        return self.system.software.expert_mlp == "fused_ops" and blocks and self.gpu.fp8_any_layout

    @property
    def expert_act_apart(self) -> bool:
        """The routed experts' activation as its own kernel (not in FC1's epilogue: ``fused_grouped_mlp``)."""
        return not self.fused_grouped_mlp

    @property
    def mla_local_down(self) -> bool:
        """MLA's down projections on the rank's own tokens, its latents gathered (``SoftwareSpec.mla_local_down``)."""
        return self.system.software.mla_local_down

    @property
    def glu_clamp_apart(self) -> bool:
        """A clamped GLU's clamps as eager kernels (Megatron-Core TEGroupedMLP; core.passes ``glu_clamp``)."""
        return self.system.software.expert_mlp == "te_grouped"

    @property
    def capacity_factor(self) -> float:
        return self.model.moe.capacity_factor if self.model.moe is not None else 1.0

    @property
    def quantized_copy_bytes(self) -> float:
        """Bytes per element of the copies a low-precision cast writes (``quantization.quantized_copy_bytes``)."""
        return quantized_copy_bytes(self.gpu, self.mm_dtype, self.system.software.fp8_scaling)

    # --- pricing the operator inventory (``core.operators.Pricer``) ----------------------------------------------
    def gemm(self, g: Gemm) -> list[Op]:
        """A linear layer's forward GEMM with its backward GEMMs attached (``gemm_grads``); under fp8 plus its cast
        kernels (torchao roofline)."""
        e = self.act_bytes
        if g.high_precision:
            # The router and the LM head stay out of the fp8/fp4 recipe, as 16-bit GEMMs with no cast kernels. Router:
            # fp32 logits (Megatron-Core d98e8a6 moe_utils.RouterGatingLinearFunction: te_general_gemm on the bf16
            # input and weight, out dtype ``moe_router_dtype`` fp32 as the performance recipes set it). LM head:
            # Megatron-Core's ``output_layer`` is a plain tensor_parallel.ColumnParallelLinear outside Transformer
            # Engine's fp8 autocast unless ``fp8_output_proj`` with mxfp8 (models/gpt/gpt_model.py @d98e8a6).
            dtype = outside_recipe(self.mm_dtype)
            nbytes = g.nbytes(e, e, 4.0 if g.name.startswith("moe.") else e)
            return [Op(g.name, GEMM, g.flops, nbytes, gemm_time(self.gpu, g.flops, nbytes, dtype, experts=g.experts,
                                                                m=g.m, n=g.n, k=g.k),
                       grads=self.gemm_grads(g, e, dtype))]
        wbytes = {"fp8": 1.0, "fp4": NVFP4_BYTES}.get(self.mm_dtype, e)
        fused = g.routed and self.fused_grouped_mlp
        one_kernel = g.routed and (self.system.software.expert_mlp == "grouped_mm" or fused)
        # userbuffers' chunks (``userbuffers.ub_chunks``): a row chunk reads the whole weight, a column chunk the input
        rc, cc, dc = ub_chunks(self.rows, self.system.software, self.model, self.mm_dtype, g.name)
        nbytes = g.nbytes(wbytes, wbytes, e) + wbytes * g.k * (g.n * g.experts * (rc - 1) + g.m * (cc - 1))
        t = cc * gemm_time(self.gpu, g.flops / cc, nbytes / cc, self.mm_dtype, experts=g.experts * rc, m=g.m,
                           n=g.n / cc, k=g.k, one_kernel=one_kernel)
        ops = [Op(g.name, GEMM, g.flops, nbytes, t,
                  grads=self.gemm_grads(g, wbytes, self.mm_dtype, one_kernel=one_kernel, dgrad_chunks=dc))]
        if self.mm_dtype in LOW_PRECISION:
            # Quantization (Transformer Engine's cast kernels). Per element: current scaling reads the 16-bit tensor
            # twice (amax, then cast), delayed scaling and MXFP8 once; each writes the copies its GEMMs read
            # (``quantized_copy_bytes``; TE quantizer.cpp ``nvte_is_non_tn_fp8_gemm_supported`` at d0067d0). Forward:
            # the input, and the weight once per step, cached for the other microbatches (TE
            # ``Linear.forward(is_first_microbatch)``, which Megatron-Core's TE layers pass; in every microbatch without
            # ``SoftwareSpec.fp8_weight_cache``; the cache's memory: ``memory.cached_weight_bytes``); backward: the
            # output gradient, which dgrad and wgrad both read.
            # Streaming kernels at the HBM rate (``stream_time``), as TE's own benchmark measures them (docs/examples/
            # gemm_profiling at d0067d0, a 5B model's 12 layer GEMMs, autocast less pre-quantized time: H200 NVL
            # current scaling 3.50 ms, delayed 2.19 ms per layer, priced 3.35 and 2.20; B300 at the measured 0.77 of
            # that rate: tests/costmodel/test_fp8_quantization.py, docs/physics_sources.md).
            scaling = self.system.software.fp8_scaling if self.mm_dtype == "fp8" else "current"
            per = (4.0 if scaling == "current" else 2.0) + self.quantized_copy_bytes
            # The fused grouped MLP (``fused_grouped_mlp``) quantizes FC2's input in FC1's epilogue and FC1's output
            # gradient in FC2's dgrad epilogue: those two casts are not kernels of their own.
            into = 0.0 if fused and g.name.endswith(".fc2") else 1.0
            out = 0.0 if fused and g.name.endswith(".fc1") else 1.0
            casts = 1 / self.microbatches if self.system.software.fp8_weight_cache else 1.0  # weight casts a microbatch
            cast = np.asarray(per * (into * g.m * g.k + g.k * g.n * g.experts * casts), dtype=float)
            grad = np.asarray(out * per * g.m * g.n, dtype=float) + np.zeros_like(cast)
            # Routed experts under TE's GroupedLinear (or its op fuser's unfused grouped linear, which splits alike):
            # every kernel past the one priced above pays the fixed per-kernel time. Forward: the split input and each
            # expert's weight on its own (none with fp8 primary weights); backward: the split output gradient.
            extra = (0.0, 0.0)  # kernels past the one priced here, forward and backward
            if g.routed and not fused and self.system.software.expert_mlp in ("te_grouped", "fused_ops"):
                k_in = split_quantize_kernels(self.gpu, self.mm_dtype, scaling, g.experts)
                k_w = 0.0 if self.system.software.fp8_param_gather else \
                    quantize_kernels(self.mm_dtype, scaling) * np.maximum(g.experts, 1.0) * casts
                extra = (k_in + k_w - 1.0, k_in - 1.0)
            fixed = self.gpu.kernel_fixed_s
            ops.append(Op(f"{g.name}.{self.mm_dtype}_cast", MEM, np.zeros_like(cast), cast,
                          self.stream_time(cast) + extra[0] * fixed, bwd_nbytes=grad,
                          bwd_time=(self.stream_time(grad) + extra[1] * fixed) * out))
        return ops

    def gemm_grads(self, g: Gemm, operand: float, dtype: str, *, one_kernel: bool = False,
                   dgrad_chunks: np.ndarray | float = 1.0) -> GemmGrads:
        """The backward GEMMs of ``g`` at their own shapes. dgrad dX = dY·Wᵀ: M×K over inner N, reading dY and W
        (``operand`` bytes: fp8 copies under fp8), writing dX. wgrad dW = Xᵀ·dY per expert: K×N over inner
        M/experts (the tokens), reading X and dY, writing dW in ``grad_dtype`` and reading it back on every
        microbatch after a step's first, as Megatron-Core fuses the accumulation into the fp32 ``main_grad`` (TE
        ``fuse_wgrad_accumulation``: accumulate = not first microbatch, grouped_linear.py at d0067d0; Megatron-LM
        ``wgrad_gemm_accum_fp32`` at d98e8a6). Every stack is charged so: autograd's ``.grad +=`` moves more."""
        e = self.act_bytes
        acc = DTYPE_BYTES[self.work.grad_dtype] * (2.0 - 1.0 / self.microbatches)
        z = np.zeros_like(self.tokens)
        d_experts = g.experts * dgrad_chunks  # userbuffers' row chunks (``userbuffers.ub_chunks``)
        d_bytes = operand * (g.m * g.n + g.k * g.n * d_experts) + e * g.m * g.k + z
        w_bytes = operand * g.m * (g.k + g.n) + acc * g.k * g.n * g.experts + z
        rows = np.maximum(np.asarray(g.m, dtype=float) / np.maximum(np.asarray(g.experts, dtype=float), 1e-9), 1.0)
        return GemmGrads(
            gemm_time(self.gpu, g.flops, d_bytes, dtype, experts=d_experts, m=g.m, n=g.k, k=g.n, one_kernel=one_kernel,
                      split_accumulate=True),
            d_bytes, gemm_time(self.gpu, g.flops, w_bytes, dtype, experts=g.experts, m=g.k * g.experts, n=g.n, k=rows,
                               one_kernel=one_kernel, split_accumulate=True), w_bytes)

    def stream_time(self, nbytes: np.ndarray) -> np.ndarray:
        """A quantization (cast) kernel moving ``nbytes``: the HBM streaming rate at the GPU's measured share of it
        (``GpuSpec.quantize_efficiency``), with the launch floor."""
        return with_launch(self.gpu, memory_time(self.gpu, nbytes) / self.gpu.quantize_efficiency)

    def mem_time(self, nbytes: np.ndarray, kernels: int = 1) -> np.ndarray:
        """``kernels`` elementwise kernels moving ``nbytes`` between them (each its share, each its launch)."""
        return elementwise_time(self.gpu, nbytes) if kernels == 1 else kernels * elementwise_time(self.gpu,
                                                                                                 nbytes / kernels)

    def elementwise(self, x: Elementwise, *, selective: bool = False) -> Op:
        """An elementwise op as the stack runs it (``SoftwareSpec.elementwise_kernels``/``norm_kernel``: its row of
        ``core.passes``), its traffic spread evenly over the row's kernels, forward and backward."""
        sw = self.system.software
        row = traffic(x.kind, sw.elementwise_kernels, sw.norm_kernel) if x.kind else None
        if row is not None and row is not FUSED.get(x.kind):
            x = replace(x, passes=row.passes, extra=row.extra)
        nbytes = x.nbytes(self.act_bytes) + np.zeros_like(self.tokens)
        bwd = row.bwd_bytes(self.act_bytes) if row is not None else None
        return Op(x.name, MEM, np.zeros_like(nbytes), nbytes, self.mem_time(nbytes, row.kernels if row else 1),
                  selective=selective, bwd_nbytes=None if bwd is None else x.elements * bwd + np.zeros_like(nbytes),
                  bwd_kernels=row.bwd_kernels if row else 1)

    def bmm(self, name: str, flops: np.ndarray, nbytes: np.ndarray, *, selective: bool,
            floor_s: np.ndarray | None = None, stream_share: float = 1.0, stream_cap: float | None = None) -> Op:
        """A batched matmul (the unfused attention path, recurrent cores; selective recompute reruns it) in 16 bit
        under an fp8/fp4 recipe (``outside_recipe``), at least ``floor_s`` where a kernel's measured time bounds it;
        its traffic at ``stream_share`` of the streaming rate and at most ``stream_cap`` where its kernels are
        measured slower (``kernels.kernel_time``)."""
        t = kernel_time(self.gpu, flops, nbytes, outside_recipe(self.mm_dtype), stream_share=stream_share,
                        stream_cap=stream_cap)
        return Op(name, GEMM, flops, nbytes, t if floor_s is None else np.maximum(t, floor_s), selective=selective)

    def attention(self, a: Attention) -> list[Op]:
        """Flash or unfused attention per row; under CP its communication as ``SoftwareSpec.cp_comm_type`` runs it
        (``cp_comm``: the K/V ring exposed only where it outlasts the kernels, by default). core_attn recompute
        reruns the kernels and the CP exchange, flash included (Megatron-Core checkpoints core attention whatever
        its kernel: attention.py ``checkpoint_core_attention`` at d98e8a6; legacy Megatron-LM's flash path did
        not)."""
        nbytes = a.nbytes(self.act_bytes)
        bwd_flash = self.flash_time(BWD_ATTN_FLOPS * a.flops, 2.0 * nbytes, backward=True, window=a.window)
        flash = Op(f"{a.name}.flash", ATTN, a.flops, nbytes,
                   self.flash_time(a.flops, nbytes, backward=False, window=a.window), selective=True,
                   bwd_time=bwd_flash)
        unfused = unfused_attention(self, a, mask_passes=0, selective=True)
        ops = [masked(op, ~self.flash) for op in unfused] + [masked(flash, self.flash)]
        if self.system.software.attention_unpad:  # packed rows in and out of a varlen flash kernel (core.passes)
            kv = a.q_tokens * a.kv_token_bytes / self.act_bytes
            ops += [masked(self.elementwise(Elementwise(f"{a.name}.unpad_qkv", a.q_tokens * a.heads * a.d_qk + kv, 0,
                                                        kind="attn.unpad_qkv")), self.flash),
                    masked(self.elementwise(Elementwise(f"{a.name}.pad_out", a.q_tokens * a.heads * a.d_v, 0,
                                                        kind="attn.pad_out")), self.flash)]
        return ops + cp_ops(self, a, flash, bwd_flash)

    def flash_time(self, flops: np.ndarray, nbytes: np.ndarray, *, backward: bool,
                   window: float | None = None) -> np.ndarray:
        """The fused attention kernel(s) of a microbatch. Without context parallelism one causal kernel over the
        sequence; with it (ring attention) each rank runs kernels on chunks of s/cp keys: the diagonal chunk
        causal, 1/cp of the pairs, the others full (Transformer Engine's load-balanced ring; its all-gather CP's two
        kernels per rank, Q of s/(2cp) against a K/V prefix, compute as many causal and full pairs and are priced the
        same, an approximation). All-to-all CP runs one causal kernel over the whole sequence with heads/cp heads
        (``cp_comm``). A sliding layer's kernel (``window``) runs at its measured windowed rate (``window_factor``)."""
        whole = self.system.software.cp_comm_type == "a2a"
        cp = np.ones_like(self.rows.cp, dtype=float) if whole else self.rows.cp.astype(float)
        kernel, seq = str(self.flash_kernel), self.work.seq_len / cp
        head_dim = max(attention_dims(self.model))
        eff_c, eff_f = (attention_efficiency(self.gpu, kernel, backward=backward, causal=causal, head_dim=head_dim,
                                             seq=seq) for causal in (True, False))
        if eff_c is None or eff_f is None:
            return attention_time(self.gpu, flops, nbytes, self.mm_dtype, backward=backward, kernel=kernel,
                                  head_dim=head_dim, seq=seq)
        eff = 1.0 / (1.0 / (cp * eff_c) + (cp - 1.0) / (cp * eff_f))  # FLOP-weighted harmonic mean
        eff = eff * window_factor(self.gpu, kernel, backward=backward, head_dim=head_dim, seq=seq, window=window,
                                  span=self.work.seq_len)
        dtype, to_peak = attention_peak(self.gpu, kernel, self.mm_dtype)
        return kernel_time(self.gpu, flops, nbytes, dtype, efficiency=eff * to_peak)

    def tp_entry(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return sp_comm.tp_entry(self, prefix, elements)

    def tp_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return sp_comm.tp_exit(self, prefix, elements)

    shared_tp_entry = tp_entry
    shared_tp_exit = tp_exit

    def expert_tp_entry(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return sp_comm.expert_tp_entry(self, prefix, elements)

    def expert_tp_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return sp_comm.expert_tp_exit(self, prefix, elements)

    def ep_all_to_all(self, name: str, elements: np.ndarray | float) -> Op:
        """Token dispatch or combine over the EP group (``elements``: the token copies' values leaving this GPU).
        The alltoall dispatcher sends one copy per routed expert; DeepEP/HybridEP (``SoftwareSpec.ep_dispatcher``)
        send a token once to each node holding one of its experts (RDMA, one NIC per GPU) and once to each rank
        there (NVLink forwarding; DeepEP README "normal kernels"), so the network carries the distinct remote
        nodes and the fabric the distinct other ranks (``core.routing.routed_blocks``: group-limited routing
        bounds the nodes, DeepSeek-V3's 4 of 8; ``round_robin_blocks`` under AutoModel's round-robin gate)."""
        op = self.collective(name, "all_to_all", elements * self.act_bytes, "ep")
        if self.system.software.ep_dispatcher != "deepep" or self.model.moe is None:
            return op
        r = self.rows
        n, stride = r.ep.astype(float), self._ep_stride()
        k = comm.members_per_node(self.system, n, stride).astype(float)
        token = np.asarray(elements, dtype=float) * self.act_bytes / (self.model.moe.experts_per_token
                                                                      * self.capacity_factor)
        blocks = round_robin_blocks if self.system.software.moe_balanced_routing else routed_blocks
        ranks, nodes = blocks(self.model.moe, n), blocks(self.model.moe, n / k)
        intra, inter = token * ranks * (n - 1) / n, token * nodes * (n / k - 1) / (n / k)
        t = comm.two_level_all_to_all_time(self.system, intra, inter, n, stride,
                                           intra_rate=comm.ep_kernel_rate(self.system, n, stride))
        return Op(name, COMM, np.zeros_like(op.nbytes), intra + inter + np.zeros_like(self.tokens), t, dim="ep")

    def _ep_stride(self) -> np.ndarray:
        """Rank stride of the EP group: etp, Megatron-Core's expert rank order tp-ep-dp-pp with the expert TP size
        (megatron/core/parallel_state.py@d98e8a6: the expert generator folds cp into the expert-data-parallel
        ranks, so the EP group is contiguous after expert TP whatever cp is; the data-parallel sync of the experts,
        ``dp_sync.dp_collective``, reads the same order)."""
        r = self.rows
        return np.broadcast_to(r.etp, np.shape(r.ep))

    def moe_exit(self, prefix: str, elements: np.ndarray | float) -> list[Op]:
        return []

    def kv_cache_write(self, tokens: np.ndarray | float) -> np.ndarray:
        return np.zeros_like(self.tokens)

    def touched_experts(self, routed_tokens: np.ndarray | float) -> np.ndarray:
        """Training batches reach every local expert."""
        assert self.model.moe is not None
        return self.model.moe.num_experts / self.rows.ep.astype(float)

    def collective(self, name: str, kind: str, nbytes: np.ndarray, dim: str) -> Op:
        """A collective over the TP, expert-TP, CP or EP group of each row (zero when the group has one rank). EP
        ranks follow expert TP (Megatron-Core's expert rank order tp-ep-dp-pp: stride etp); expert-TP traffic is
        accounted as TP."""
        r, s = self.rows, self.system
        n, stride = {"tp": (r.tp, 1), "etp": (r.etp, 1), "cp": (r.cp, r.tp), "ep": (r.ep, self._ep_stride())}[dim]
        dim = "tp" if dim == "etp" else dim
        stride = np.broadcast_to(np.asarray(stride), np.shape(n))
        fn = {"all_reduce": comm.all_reduce_time, "reduce_scatter": comm.reduce_scatter_time,
              "all_gather": comm.all_gather_time, "all_to_all": comm.all_to_all_time}[kind]
        nbytes = np.asarray(nbytes, dtype=float) + np.zeros_like(self.tokens)
        t = fn(s, nbytes, n, stride)  # whole: what TP overlap hides is taken off by ``tp_overlap.overlap_tp``
        return Op(name, COMM, np.zeros_like(nbytes), nbytes, t, dim=dim)
