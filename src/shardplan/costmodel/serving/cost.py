"""Serving cost of many layouts at once: weights, paged KV cache, TTFT, TPOT and throughput.

``infer_cost`` is the single implementation: ``infer_report.estimate_inference`` calls it with one row
and the planner's table with thousands, so a table row equals the evaluation of that layout.

Two serving views (``InferWorkload.mode``):
- ``continuous`` (default): the steady state of a continuous-batching engine with chunked prefill — a token
  budget per step shared by decodes and prefill chunks, ``batch`` = sequences in flight per replica
  (``max_num_seqs``), per-request TTFT/TPOT and throughput at saturation or at an offered Poisson load
  (``request_rate``); see ``continuous``.
- ``static``: a replica (``tp·pp`` GPUs) serves ``batch`` sequences that arrive together. Prefill: the
  ``batch·prompt`` prompt tokens run in chunks of at most ``max_num_batched_tokens``; TTFT is the time to
  prefill the whole batch, chunks flowing through the pipeline one after another:
  ``Σ_stages t(chunk) + (chunks−1)·max_stage t(chunk)``. Decode: one token per sequence per step; TPOT is the
  step time at the mean context ``prompt + gen/2``. With pipeline parallelism the batch is split into
  ``m = min(batch, pp)`` micro-batches kept in flight (vLLM runs pp virtual engines), so one round costs
  ``max(Σ_stages t(b) + pp·p2p, m·max_stage (t(b) + p2p))`` with ``b = ⌈batch/m⌉``. End-to-end latency
  ``TTFT + (gen−1)·TPOT`` and throughput ``replicas·batch·gen / latency``.
GPUs = replicas·tp·pp in both.

Memory per GPU (vLLM's accounting, ``worker.determine_available_memory``): a share
``gpu_memory_utilization`` of the device is budgeted; weights, the peak activation workspace of a
profile forward pass of ``max_num_batched_tokens`` tokens (plus the sampler's fp32 logits for
``max_num_seqs`` sequences) and non-PyTorch allocations are taken out, and the rest becomes the paged KV
cache in blocks of ``block_size`` tokens. The CUDA context, NCCL buffers and CUDA graphs live in the
remaining ``1 − utilisation`` reserve. SGLang and TensorRT-LLM budget differently (``engines``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardplan.costmodel.core.shards import layer_shard
from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.continuous import SteadyState, steady_state
from shardplan.costmodel.serving.engines import ENGINES, STEP_HOST_GAP_S, Engine, kv_pool_bytes
from shardplan.costmodel.serving.kvcache import blocks_per_request, stage_pool
from shardplan.costmodel.serving.steps import (
    PhaseTimes,
    StageShape,
    beat,
    phase_times,
    pipelined,
    serving_kinds,
    stage_shapes,
)
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import GiB

WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")
KV_DTYPES = ("bf16", "fp16", "fp8")
# Sampler workspace in vLLM's profile run: fp32 logits, softmax, log-softmax and the top-p/top-k sort of
# every sampled row (4 vocab-wide fp32 buffers). Calibrated on vLLM PR #10511's log (Llama-3-8B, 8192
# tokens, 256 sequences: 1.26 GiB activation peak = 0.78 GiB of layer workspace + 4·256·V·4 bytes).
SAMPLER_BUFFERS = 4


class InferWorkload(BaseModel):
    """What is served and how the engine is configured: fixed by the user, not chosen by the planner."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_len: Annotated[int, Field(ge=1)] = Field(description="Prompt tokens per sequence.")
    gen_len: Annotated[int, Field(ge=1)] = Field(description="Generated tokens per sequence.")
    dtype: Literal["bf16", "fp16", "fp8"] = Field(
        "bf16", description="Compute datatype; fp8 means fp8 weights with fp8 GEMMs (W8A8), 16-bit activations.")
    weight_dtype: Literal["bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4"] | None = Field(
        None, description="Stored weights (default: fp8 for fp8 checkpoints or --dtype fp8, else --dtype). "
        "int8/int4 are weight-only (GPTQ/AWQ): dequantised to 16-bit, 16-bit GEMMs. mxfp4/nvfp4: block-scaled "
        "4-bit floats, fp4 GEMMs where the GPU has an fp4 peak. An MXFP4 checkpoint (gpt-oss) keeps its routed "
        "experts in MXFP4 unless this is given.")
    kv_dtype: Literal["bf16", "fp16", "fp8"] | None = Field(None, description="KV-cache datatype (default: 16-bit).")
    block_size: Annotated[int, Field(ge=1)] = Field(16, description="Tokens per paged KV-cache block (vLLM: 16).")
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = Field(
        0.9, description="Share of GPU memory the engine may use (vLLM default 0.9).")
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = Field(
        2048, description="Token budget of one step: prefill chunk size and the profile run's size (vLLM V1 "
        "server default with chunked prefill: 2048).")
    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        256, description="The engine's cap on sequences in flight (the planner's largest continuous batch) and the "
        "rows of its profile run's sampler (vLLM: 256, 1024 on ≥ 70 GiB non-A100 GPUs).")
    non_torch_bytes: Annotated[int, Field(ge=0)] = Field(
        int(0.15 * GiB), description="Non-PyTorch allocations vLLM measures during its profile run (cuBLAS and "
        "attention workspaces): 0.07–0.19 GiB in vLLM's logs (PRs #10511, #12126, #21489).")
    quant_group_size: Annotated[int, Field(ge=1)] = Field(128, description="Weights per int8/int4 scale group.")
    engine: Engine = Field("vllm", description=f"Serving engine whose memory rules apply: {', '.join(ENGINES)}.")
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="SGLang --mem-fraction-static (default: SGLang's rule from GPU memory and tp·pp).")
    mode: Literal["continuous", "static"] = Field(
        "continuous", description="continuous: engine steady state (chunked prefill mixed with decodes); static: "
        "one batch arriving together.")
    decode_split_kv: bool = Field(
        True, description="Decode attention splits a sequence's KV over several thread blocks when batch × heads "
        "leaves SMs idle (flash-decoding: vLLM, SGLang/FlashInfer, TensorRT-LLM multi_block_mode); False: one "
        "block per (sequence, head) streams it alone (TensorRT-LLM engines built without --multi_block_mode).")
    request_rate: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Offered load, requests/s over the whole deployment (Poisson); None: saturation.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.dtype == "fp8" and self.weight_dtype not in (None, "fp8"):
            raise ValueError(f"--dtype fp8 runs fp8 GEMMs on fp8 weights; weight_dtype {self.weight_dtype} conflicts")
        if self.request_rate is not None and self.mode != "continuous":
            raise ValueError("an offered load needs --mode continuous (a static batch arrives all at once)")
        return self

    def weights(self, model: ModelSpec) -> str:
        """Datatype of the stored linear-layer weights."""
        if self.weight_dtype is not None:
            return self.weight_dtype
        if self.dtype == "fp8" or model.dtype == "fp8":
            return "fp8"
        return self.dtype

    def expert_weights(self, model: ModelSpec) -> str:
        """Datatype of the routed experts: the checkpoint's MXFP4/NVFP4 experts unless --weight-dtype says."""
        if self.weight_dtype is None and model.dtype in ("mxfp4", "nvfp4") and self.dtype != "fp8":
            return model.dtype
        return self.weights(model)

    def kv(self) -> str:
        return self.kv_dtype or ("bf16" if self.dtype == "fp8" else self.dtype)

    def gemm_dtype(self, model: ModelSpec) -> str:
        """fp8 weights run fp8 GEMMs (vLLM's W8A8 path, falling back to 16-bit peaks where absent)."""
        return "fp8" if self.weights(model) == "fp8" else ("bf16" if self.dtype == "fp8" else self.dtype)


@dataclass(frozen=True, slots=True, kw_only=True)
class InferLayout:
    """One serving layout: parallel degrees and concurrent sequences per replica."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    replicas: int = 1
    batch: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.replicas


@dataclass(frozen=True, slots=True)
class InferRows:
    """Many layouts as int64 numpy columns of equal length."""

    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray  # replicas
    batch: np.ndarray

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_layouts(cls, layouts: list[InferLayout]) -> InferRows:
        def col(name: str) -> np.ndarray:
            return np.array([getattr(x, name) for x in layouts], dtype=np.int64)

        return cls(col("tp"), col("pp"), col("ep"), col("replicas"), col("batch"))

    def row(self, i: int) -> InferLayout:
        return InferLayout(tp=int(self.tp[i]), pp=int(self.pp[i]), ep=int(self.ep[i]), replicas=int(self.dp[i]),
                           batch=int(self.batch[i]))

    def take(self, idx: np.ndarray) -> InferRows:
        return InferRows(*(getattr(self, f.name)[idx] for f in fields(self)))


# --- memory --------------------------------------------------------------------------------------------
def kind_weight_bytes(model: ModelSpec, work: InferWorkload, rows: InferRows, kind: str) -> np.ndarray:
    """Weight bytes one GPU holds for one layer of ``kind`` (or the embedding / the LM head): linear layers and
    experts in the weight datatype, norms, routers, biases, embeddings and the LM head in 16 bits."""
    q = O.weight_bytes_per_param(work.weights(model), work.quant_group_size)
    q_exp = O.weight_bytes_per_param(work.expert_weights(model), work.quant_group_size)
    shard = layer_shard(model, kind, rows.tp, rows.ep, rows.pp)
    return O.ACT_BYTES * shard.other + q * shard.linear + q_exp * shard.experts


def workspace_per_token(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """Peak live activation bytes per token inside one layer of a forward pass on one GPU.

    The residual stream and the layer output (2·h) plus the largest block intermediate: QKV and the
    attention output, the MLP's gate/up and activation outputs ((g+1)·f/t), or an MoE layer's k token
    copies with their expert intermediates; everything else is freed between layers.
    """
    m, t = model, np.asarray(tp, dtype=float)
    e, h = O.ACT_BYTES, model.hidden_size
    g = 2 if m.mlp.gated else 1
    if m.mla is not None:
        attn = m.num_heads / t * (2 * m.mla.qk_head_dim + 2 * m.mla.v_head_dim)
    else:
        attn = (2 * m.num_heads / t + 2 * O.kv_heads_per_rank(m, tp)) * m.head_size
    mlp = (g + 1) * m.ffn_hidden_size / t if m.num_dense_layers else 0.0 * t
    if m.moe is not None:
        moe = m.moe.num_experts * 4 / e + m.moe.experts_per_token * (h + (g + 1) * m.moe.expert_ffn_hidden_size / t)
        moe = moe + m.moe.num_shared_experts * (g + 1) * m.moe.shared_ffn / t
        mlp = np.maximum(mlp, moe)
    return e * (2 * h + np.maximum(attn, mlp))


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Bytes per GPU of one representative stage, and its KV-cache capacity in blocks."""

    shape: StageShape
    weights: np.ndarray
    activations: np.ndarray
    non_torch: np.ndarray
    kv_pool: np.ndarray  # budget left for the KV cache (may be negative)
    kv_token: np.ndarray  # KV bytes per token position on this GPU (all its layers)
    blocks: np.ndarray  # whole KV blocks that fit (≥ 0)
    reserve: np.ndarray  # what the engine holds back beyond these (vLLM: (1 − utilisation)·memory)


def stage_memory(model: ModelSpec, system: SystemSpec, work: InferWorkload, rows: InferRows, shape: StageShape,
                 kv_layer: np.ndarray) -> StageMemory:
    """Weights, workspace and KV capacity of one stage (vLLM: budget − weights − peak activations − non-torch)."""
    weights = sum(shape.count(k) * kind_weight_bytes(model, work, rows, k) for k in serving_kinds(model))
    sampler = work.max_num_seqs * model.vocab_size * (SAMPLER_BUFFERS * O.LOGIT_BYTES + O.ACT_BYTES / rows.tp)
    acts = work.max_num_batched_tokens * workspace_per_token(model, rows.tp) + np.where(shape.has_head, sampler, 0.0)
    non_torch = np.full(len(rows), float(work.non_torch_bytes))
    fraction = work.mem_fraction_static if work.engine == "sglang" else work.gpu_memory_utilization
    pool, reserve = kv_pool_bytes(work.engine, system.gpu, fraction=fraction, weights=weights, activations=acts,
                                  non_torch=non_torch, parallel=rows.tp * rows.pp)
    # vLLM's hybrid allocator (``kvcache``): one pool of G_w tensors shared by the model's KV-cache groups.
    hybrid = stage_pool(model, shape, kv_layer, pool, work.block_size)
    kv_token = hybrid.tensors * hybrid.groups * kv_layer  # pool bytes per reported token slot
    return StageMemory(shape, weights, acts, non_torch, pool, kv_token, hybrid.reported_blocks, reserve)


@dataclass(frozen=True, slots=True)
class InferCost:
    """Everything the planner and the report need, one entry per row."""

    rows: InferRows
    ctx: O.InferCtx
    shapes: list[StageShape]
    memory: list[StageMemory]
    prefill: PhaseTimes
    decode: PhaseTimes
    chunks: np.ndarray
    micro_batches: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    tokens_per_s: np.ndarray
    kv_layer_bytes: np.ndarray  # per token, per layer, per GPU
    kv_blocks: np.ndarray  # blocks per GPU = per replica (the binding stage)
    blocks_per_seq: float  # a whole sequence (prompt + output), in reported blocks (per KV-cache group)
    blocks_held: float  # a sequence on average while it runs (continuous: prompt + half the output)
    max_batch: np.ndarray  # sequences per replica that fit
    binding_stage: np.ndarray
    block_size: int
    mode: str = "static"
    steady: SteadyState | None = None  # continuous mode: the engine's average step

    @property
    def kv_tokens(self) -> np.ndarray:
        """KV-cache token slots per replica (whole blocks)."""
        return self.kv_blocks * self.block_size

    @property
    def fits(self) -> np.ndarray:
        return (self.rows.batch <= self.max_batch) & (self.max_batch >= 1)


def infer_cost(model: ModelSpec, system: SystemSpec, work: InferWorkload, rows: InferRows) -> InferCost:
    """Time and memory of every row (the vectorised reference; one row is ``estimate_inference``)."""
    ctx = O.InferCtx(model=model, system=system, tp=rows.tp, pp=rows.pp, ep=rows.ep, weight_dtype=work.weights(model),
                     kv_dtype=work.kv(), gemm_dtype=work.gemm_dtype(model), quant_group_size=work.quant_group_size,
                     expert_weight_dtype=work.expert_weights(model), decode_split_kv=work.decode_split_kv)
    shapes = stage_shapes(model, rows.pp)
    kv_layer = O.kv_layer_bytes_per_token(model, work.kv(), rows.tp)
    memory = [stage_memory(model, system, work, rows, sh, kv_layer) for sh in shapes]
    blocks = np.stack([np.where(mem.shape.exists, mem.blocks, np.inf) for mem in memory])
    binding = np.argmin(blocks, axis=0)
    kv_blocks = np.min(blocks, axis=0)
    P_, G = work.prompt_len, work.gen_len
    kv_tok = float(O.kv_layer_bytes_per_token(model, work.kv(), np.ones(1))[0])

    def per_request(tokens: int) -> float:
        n = blocks_per_request(model, tokens, work.block_size, work.max_num_batched_tokens, kv_tok, O.ACT_BYTES)
        return int(n) if float(n).is_integer() else float(n)

    blocks_per_seq = per_request(P_ + G)
    # Engines allocate KV blocks as tokens arrive (vLLM and SGLang preempt or retract when the pool runs out),
    # so in the continuous steady state a sequence holds its prompt and, on average, half its output: the pool
    # carries B·(P + G/2) tokens (Little's law over staggered requests). Static batches hold all P + G, and so does
    # TensorRT-LLM: its default GUARANTEED_NO_EVICT capacity scheduler admits a request only once blocks for its
    # prompt and all its output tokens are reserved (``llmapi/llm_args.py`` ``SchedulerConfig``). One whole
    # sequence must fit either way.
    held = per_request(P_ + -(-G // 2)) if work.mode == "continuous" and work.engine != "trtllm" else blocks_per_seq
    max_batch = np.where(kv_blocks >= blocks_per_seq, np.floor(kv_blocks / held), 0.0)

    B = rows.batch.astype(float)
    pp = rows.pp.astype(float)
    common = dict(rows=rows, ctx=ctx, shapes=shapes, memory=memory, kv_layer_bytes=kv_layer, kv_blocks=kv_blocks,
                  blocks_per_seq=blocks_per_seq, blocks_held=held, max_batch=max_batch, binding_stage=binding,
                  block_size=work.block_size, mode=work.mode)
    if work.mode == "continuous":
        # one prompt's own chunk, for the per-layer prefill table (the steady state mixes it with decodes)
        c = float(min(work.max_num_batched_tokens, P_))
        one = np.ones_like(B)
        prefill = phase_times(ctx, O.Step("prefill", c * one, c * (c + 1) / 2 * one, c * one, one), shapes,
                              rows.tp, pp)
        st = steady_state(ctx, shapes, tp=rows.tp, pp=pp, replicas=rows.dp, batch=rows.batch,
                          budget=work.max_num_batched_tokens, prompt=P_, gen=G, request_rate=work.request_rate,
                          host_s=STEP_HOST_GAP_S[work.engine])
        e2e = st.ttft_s + (G - 1) * st.round_s
        return InferCost(prefill=prefill, decode=st.step, chunks=st.chunks, micro_batches=np.minimum(B, pp),
                         ttft_s=st.ttft_s, tpot_s=st.round_s, e2e_s=e2e, tokens_per_s=st.tokens_per_s, steady=st,
                         **common)
    # Static: batch·prompt tokens in equal chunks of at most max_num_batched_tokens.
    chunks = np.ceil(B * P_ / work.max_num_batched_tokens)
    pairs = B * P_ * (P_ + 1) / 2 / chunks  # causal (query, key) pairs per head, spread over the chunks
    pre_step = O.Step("prefill", B * P_ / chunks, pairs, B * P_ / chunks, B / chunks, context=P_)
    prefill = phase_times(ctx, pre_step, shapes, rows.tp, pp)
    ttft = pipelined(prefill, shapes, pp, chunks)
    # Decode: micro-batches in flight over the pipeline, at the mean context.
    micro = np.minimum(B, pp)
    b = np.ceil(B / micro)
    context = P_ + G / 2
    dec_step = O.Step("decode", b, b * context, b * context, b, context=context)
    decode = phase_times(ctx, dec_step, shapes, rows.tp, pp)
    hop = np.where(pp > 1, decode.p2p_s, 0.0)
    tpot = np.maximum(decode.total_s + pp * hop, micro * (beat(decode, shapes) + hop))
    e2e = ttft + (G - 1) * tpot
    tps = rows.dp * B * G / e2e
    return InferCost(prefill=prefill, decode=decode, chunks=chunks, micro_batches=micro, ttft_s=ttft, tpot_s=tpot,
                     e2e_s=e2e, tokens_per_s=tps, **common)
