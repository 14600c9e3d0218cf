"""Serving cost of many layouts at once: weights, paged KV cache, TTFT, TPOT and throughput.

``infer_cost`` is the single implementation: ``infer_report.estimate_inference`` calls it with one row
and the planner's table with thousands, so a table row equals the evaluation of that layout.

Serving model (static batching, documented assumptions):
- A replica (``tp·pp`` GPUs) serves ``batch`` sequences that arrive together. GPUs = replicas·tp·pp.
- Prefill: the ``batch·prompt`` prompt tokens run in chunks of at most ``max_num_batched_tokens``
  (vLLM chunked prefill); TTFT is the time to prefill the whole batch, chunks flowing through the
  pipeline one after another: ``Σ_stages t(chunk) + (chunks−1)·max_stage t(chunk)``.
- Decode: one token per sequence per step; TPOT is the step time at the mean context
  ``prompt + gen/2``. With pipeline parallelism the batch is split into ``m = min(batch, pp)``
  micro-batches kept in flight (vLLM runs pp virtual engines), so one round costs
  ``max(Σ_stages t(b) + pp·p2p, m·max_stage (t(b) + p2p))`` with ``b = ⌈batch/m⌉``; batch 1 is one pass.
- The first output token comes from the prefill: end-to-end latency ``TTFT + (gen−1)·TPOT`` and
  throughput ``replicas·batch·gen / latency`` output tokens per second over all GPUs.

Memory per GPU (vLLM's accounting, ``worker.determine_available_memory``): a share
``gpu_memory_utilization`` of the device is budgeted; weights, the peak activation workspace of a
profile forward pass of ``max_num_batched_tokens`` tokens (plus the sampler's fp32 logits for
``max_num_seqs`` sequences) and non-PyTorch allocations are taken out, and the rest becomes the paged KV
cache in blocks of ``block_size`` tokens. The CUDA context, NCCL buffers and CUDA graphs live in the
remaining ``1 − utilisation`` reserve.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.layouts import moe_layers_before
from shardplan.costmodel.core.ops import PhaseCost
from shardplan.costmodel.serving import layers as O
from shardplan.hardware.spec import SystemSpec
from shardplan.models import params as P
from shardplan.models.spec import ModelSpec
from shardplan.units import GiB

WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")
KINDS = ("embedding", "attention", "mlp", "moe", "head")
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
    weight_dtype: Literal["bf16", "fp16", "fp8", "int8", "int4"] | None = Field(
        None, description="Stored weights (default: fp8 for fp8 checkpoints or --dtype fp8, else --dtype). "
        "int8/int4 are weight-only (GPTQ/AWQ): dequantised to 16-bit, 16-bit GEMMs.")
    kv_dtype: Literal["bf16", "fp16", "fp8"] | None = Field(None, description="KV-cache datatype (default: 16-bit).")
    block_size: Annotated[int, Field(ge=1)] = Field(16, description="Tokens per paged KV-cache block (vLLM: 16).")
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = Field(
        0.9, description="Share of GPU memory the engine may use (vLLM default 0.9).")
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = Field(
        2048, description="Token budget of one step: prefill chunk size and the profile run's size (vLLM V1 "
        "server default with chunked prefill: 2048).")
    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        256, description="Sequences sampled in the profile run (vLLM default 256); sizes the sampler workspace.")
    non_torch_bytes: Annotated[int, Field(ge=0)] = Field(
        int(0.15 * GiB), description="Non-PyTorch allocations vLLM measures during its profile run (cuBLAS and "
        "attention workspaces): 0.07–0.19 GiB in vLLM's logs (PRs #10511, #12126, #21489).")
    quant_group_size: Annotated[int, Field(ge=1)] = Field(128, description="Weights per int8/int4 scale group.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.dtype == "fp8" and self.weight_dtype not in (None, "fp8"):
            raise ValueError(f"--dtype fp8 runs fp8 GEMMs on fp8 weights; weight_dtype {self.weight_dtype} conflicts")
        return self

    def weights(self, model: ModelSpec) -> str:
        """Datatype of the stored linear-layer weights."""
        if self.weight_dtype is not None:
            return self.weight_dtype
        if self.dtype == "fp8" or model.dtype == "fp8":
            return "fp8"
        return self.dtype

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


# --- pipeline stages -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StageShape:
    """Layer counts of one representative stage (first, heaviest middle, last) per row."""

    name: str
    layers: np.ndarray
    moe_layers: np.ndarray
    has_embedding: np.ndarray
    has_head: np.ndarray
    exists: np.ndarray

    @property
    def dense_layers(self) -> np.ndarray:
        return self.layers - self.moe_layers

    def count(self, kind: str) -> np.ndarray:
        return {"embedding": self.has_embedding.astype(float), "attention": self.layers, "mlp": self.dense_layers,
                "moe": self.moe_layers, "head": self.has_head.astype(float)}[kind]


def stage_shapes(model: ModelSpec, pp: np.ndarray) -> list[StageShape]:
    """vLLM's split (``get_pp_indices``): ⌊L/pp⌋ layers each, the remainder added to stages pp−2, pp−3, …"""
    L, p = model.num_layers, pp.astype(float)
    base, extra = np.floor(L / p), np.mod(L, p)
    n_first = np.where(p == 1, L, base + (extra >= p - 1))
    n_mid = base + (extra >= 1)
    n_last = base
    one = np.ones_like(p, dtype=bool)
    freq = model.moe.layer_freq if model.moe else 1
    mid_moe = np.minimum(np.ceil(n_mid / freq), model.num_moe_layers) if model.moe else np.zeros_like(p)
    last_moe = moe_layers_before(model, np.full_like(p, L)) - moe_layers_before(model, L - n_last)
    return [StageShape("first", n_first, moe_layers_before(model, n_first), one, p == 1, one),
            StageShape("middle", n_mid, mid_moe, ~one, ~one, p > 2),
            StageShape("last", n_last, last_moe, ~one, one, p > 1)]


# --- memory --------------------------------------------------------------------------------------------
def kind_weight_bytes(model: ModelSpec, work: InferWorkload, rows: InferRows, kind: str) -> np.ndarray:
    """Weight bytes one GPU holds for one layer of ``kind`` (or the embedding / the LM head).

    Linear layers are sharded over TP (MLA down-projections and K/V heads beyond their count are
    replicated), experts over EP then TP; norms, routers, embeddings and the LM head stay 16-bit.
    """
    m, t = model, rows.tp.astype(float)
    q = O.weight_bytes_per_param(work.weights(m), work.quant_group_size)
    e = O.ACT_BYTES
    h = m.hidden_size
    if kind == "attention":
        norms = P.layer_norms_params(m) * e
        if m.mla is not None:
            mla = m.mla
            down = h * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.q_lora_rank + mla.kv_lora_rank
            split = P.attention_qkv_params(m) + P.attention_out_params(m) - down
            return norms + q * (down + split / t)
        d = m.head_size
        qkv = h * (m.num_heads / t + 2 * O.kv_heads_per_rank(m, rows.tp)) * d
        bias = (m.num_heads / t + 2 * O.kv_heads_per_rank(m, rows.tp)) * d * e if m.qkv_bias else 0.0
        return norms + q * (qkv + P.attention_out_params(m) / t) + bias
    if kind == "mlp":
        return q * P.mlp_params(m, m.ffn_hidden_size) / t
    if kind == "moe":
        assert m.moe is not None
        shared = m.moe.num_shared_experts * P.mlp_params(m, m.moe.shared_ffn) / t
        experts = m.moe.num_experts / rows.ep * P.mlp_params(m, m.moe.expert_ffn_hidden_size) / t
        return e * P.router_params(m) + q * (shared + experts)
    if kind == "embedding":
        extra = P.position_params(m) + (P.norm_params(m, h) if m.embedding_norm else 0)
        return e * (P.embedding_params(m) / t + extra)
    if kind == "head":
        lm = m.vocab_size * h / t
        head = lm if not m.tied_embeddings else np.where(rows.pp > 1, lm, 0.0)  # tied: last stage keeps a copy
        return e * (P.norm_params(m, h) + head)
    raise ValueError(f"unknown layer kind {kind}")


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


def stage_memory(model: ModelSpec, system: SystemSpec, work: InferWorkload, rows: InferRows, shape: StageShape,
                 kv_layer: np.ndarray) -> StageMemory:
    """Weights, workspace and KV capacity of one stage (vLLM: budget − weights − peak activations − non-torch)."""
    weights = sum(shape.count(k) * kind_weight_bytes(model, work, rows, k) for k in KINDS
                  if k != "moe" or model.moe is not None)
    sampler = work.max_num_seqs * model.vocab_size * (SAMPLER_BUFFERS * O.LOGIT_BYTES + O.ACT_BYTES / rows.tp)
    acts = work.max_num_batched_tokens * workspace_per_token(model, rows.tp) + np.where(shape.has_head, sampler, 0.0)
    non_torch = np.full(len(rows), float(work.non_torch_bytes))
    pool = work.gpu_memory_utilization * system.gpu.memory_bytes - weights - acts - non_torch
    kv_token = shape.layers * kv_layer
    blocks = np.floor(np.maximum(pool, 0.0) / (work.block_size * kv_token))
    return StageMemory(shape, weights, acts, non_torch, pool, kv_token, blocks)


# --- time ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PhaseTimes:
    """Per-kind ops and sums of one step, plus stage and whole-pass times."""

    step: O.Step
    ops: dict[str, list]
    sums: dict[str, PhaseCost]
    stage_s: list[np.ndarray]  # per representative stage, compute + collectives of one step
    total_s: np.ndarray  # Σ over all stages
    p2p_s: np.ndarray  # one stage-to-stage send of the step's activations


def _phase(ctx: O.InferCtx, step: O.Step, shapes: list[StageShape], rows: InferRows) -> PhaseTimes:
    m = ctx.model
    kinds = [k for k in KINDS if k != "moe" or m.moe is not None]
    ops = {k: O.BUILDERS[k](ctx, step) for k in kinds}
    sums = {k: PhaseCost.of(ops[k], step.tokens) for k in kinds}
    stage_s = [sum(sh.count(k) * sums[k].time for k in kinds) for sh in shapes]
    moe_total = float(m.num_moe_layers)
    counts = {"embedding": 1.0, "attention": float(m.num_layers), "mlp": float(m.num_layers) - moe_total,
              "moe": moe_total, "head": 1.0}
    total = sum(counts[k] * sums[k].time for k in kinds)
    crosses = rows.tp * rows.pp > ctx.system.gpus_per_node
    p2p = np.where(rows.pp > 1, comm.p2p_time(ctx.system, O.ACT_BYTES * step.tokens * m.hidden_size, crosses), 0.0)
    return PhaseTimes(step, ops, sums, stage_s, total, p2p)


def _beat(ph: PhaseTimes, shapes: list[StageShape]) -> np.ndarray:
    """The slowest stage's time for one step."""
    return np.max(np.stack([np.where(s.exists, t, 0.0) for s, t in zip(shapes, ph.stage_s, strict=True)]), axis=0)


def _pipelined(ph: PhaseTimes, shapes: list[StageShape], pp: np.ndarray, passes: np.ndarray) -> np.ndarray:
    """Time for ``passes`` steps to flow through the stages (first one end to end, the rest one per beat)."""
    hop = np.where(pp > 1, ph.p2p_s, 0.0)
    return ph.total_s + (pp - 1) * hop + (passes - 1) * (_beat(ph, shapes) + hop)


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
    blocks_per_seq: int
    max_batch: np.ndarray  # sequences per replica that fit
    binding_stage: np.ndarray

    block_size: int

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
                     kv_dtype=work.kv(), gemm_dtype=work.gemm_dtype(model), quant_group_size=work.quant_group_size)
    shapes = stage_shapes(model, rows.pp)
    kv_layer = O.kv_layer_bytes_per_token(model, work.kv(), rows.tp)
    memory = [stage_memory(model, system, work, rows, sh, kv_layer) for sh in shapes]
    blocks = np.stack([np.where(mem.shape.exists, mem.blocks, np.inf) for mem in memory])
    binding = np.argmin(blocks, axis=0)
    kv_blocks = np.min(blocks, axis=0)
    P_, G = work.prompt_len, work.gen_len
    blocks_per_seq = -(-(P_ + G) // work.block_size)
    max_batch = np.floor(kv_blocks / blocks_per_seq)

    B = rows.batch.astype(float)
    pp = rows.pp.astype(float)
    # Prefill: batch·prompt tokens in equal chunks of at most max_num_batched_tokens.
    chunks = np.ceil(B * P_ / work.max_num_batched_tokens)
    pairs = B * P_ * (P_ + 1) / 2 / chunks  # causal (query, key) pairs per head, spread over the chunks
    pre_step = O.Step("prefill", B * P_ / chunks, pairs, B * P_ / chunks, B / chunks)
    prefill = _phase(ctx, pre_step, shapes, rows)
    ttft = _pipelined(prefill, shapes, pp, chunks)
    # Decode: micro-batches in flight over the pipeline, at the mean context.
    micro = np.minimum(B, pp)
    b = np.ceil(B / micro)
    context = P_ + G / 2
    dec_step = O.Step("decode", b, b * context, b * context, b)
    decode = _phase(ctx, dec_step, shapes, rows)
    hop = np.where(pp > 1, decode.p2p_s, 0.0)
    tpot = np.maximum(decode.total_s + pp * hop, micro * (_beat(decode, shapes) + hop))
    e2e = ttft + (G - 1) * tpot
    tps = rows.dp * B * G / e2e
    return InferCost(rows=rows, ctx=ctx, shapes=shapes, memory=memory, prefill=prefill, decode=decode, chunks=chunks,
                     micro_batches=micro, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, tokens_per_s=tps,
                     kv_layer_bytes=kv_layer, kv_blocks=kv_blocks, blocks_per_seq=blocks_per_seq, max_batch=max_batch,
                     binding_stage=binding, block_size=work.block_size)
