"""Training step time and memory of many layouts at once (numpy columns, one row per layout).

``train_cost`` is the single implementation: ``evaluate.estimate_training`` calls it with one row and
``table.build_train_table`` with thousands, so a table row equals the evaluation of that layout.

Step composition (per iteration):
- pipeline: ``(m + (p−1)/v)·max_s(F_s + B_s)`` for m microbatches, p stages, v interleaved chunks
  (Narayanan et al. 2021 §2.2: bubble fraction ``(p−1)/(v·m)``), where F/B are a stage's forward and
  backward time per microbatch including recompute, exposed TP/CP/EP collectives, pipeline sends and
  exposed offload transfers;
- data-parallel gradient reduction (all-reduce, or reduce-scatter + all-gather with ZeRO), exposed
  unless overlapped with the last backward; ZeRO-3 parameter gathers per microbatch;
- the optimizer step, memory-bound on the GPU or on the CPU for offloaded state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import memory_time
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.memory import embedding_activations, head_activations
from shardplan.costmodel.training.stages import KindCost, StageShape, kind_costs, stage_shapes
from shardplan.hardware.spec import SystemSpec
from shardplan.models import params as P
from shardplan.models.spec import ModelSpec
from shardplan.units import DTYPE_BYTES


@dataclass(frozen=True, slots=True)
class StageCost:
    """One representative stage of every row: time per microbatch and memory per GPU by category."""

    shape: StageShape
    fwd_s: np.ndarray
    bwd_s: np.ndarray  # includes recompute
    recompute_s: np.ndarray
    p2p_s: np.ndarray
    offload_exposed_s: np.ndarray
    weights: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    framework: np.ndarray
    params: np.ndarray  # parameters held (before ZeRO sharding)
    cpu_bytes: np.ndarray  # offloaded to host memory
    # What the planner's closed-form memory fixes need (bytes per GPU):
    inflight: np.ndarray  # microbatches whose activations are stored at once
    stored_mb: np.ndarray  # stored activations of one microbatch (all layers of the stage)
    layer_none: np.ndarray  # one layer storing everything
    layer_full: np.ndarray  # one fully recomputed layer
    weights_on_gpu_if_kept: np.ndarray  # weights bytes without weight offload
    optimizer_if_kept: np.ndarray  # optimizer bytes without optimizer offload

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.grads + self.optimizer + self.activations + self.framework

    @property
    def per_microbatch_s(self) -> np.ndarray:
        return self.fwd_s + self.bwd_s + self.offload_exposed_s


@dataclass(frozen=True, slots=True)
class TrainCost:
    """Everything the planner and the report need, one entry per row."""

    ctx: Ctx
    kinds: dict[str, KindCost]
    stages: list[StageCost]
    num_microbatches: np.ndarray
    pipeline_s: np.ndarray
    bubble_s: np.ndarray
    dp_exposed_s: np.ndarray
    zero3_exposed_s: np.ndarray
    optimizer_s: np.ndarray
    step_time_s: np.ndarray
    model_flops: np.ndarray  # per step, whole cluster (no recompute, full attention)
    hardware_flops: np.ndarray  # per step, whole cluster, as executed
    peak_memory: np.ndarray  # max over stages, bytes per GPU
    host_bytes_per_node: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    pp_exposed_s: np.ndarray

    @property
    def binding_stage(self) -> np.ndarray:
        totals = np.stack([np.where(s.shape.exists, s.total, -1.0) for s in self.stages])
        return np.argmax(totals, axis=0)


def _phase(kind: KindCost, attr: str) -> np.ndarray:
    return getattr(kind, attr).time


def weight_bytes(work: TrainWorkload) -> float:
    """Bytes per stored weight: 16-bit copies for mixed precision, fp32 for fp32 training."""
    return DTYPE_BYTES["fp32"] if work.dtype == "fp32" else DTYPE_BYTES["bf16"]


def param_memory(ctx: Ctx, dense: np.ndarray, expert: np.ndarray, *, offloaded: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU bytes of weights, gradients and optimizer state for ``dense`` + ``expert`` parameters held.

    ZeRO-1/2/3 shard optimizer state / + gradients / + weights over the data-parallel group (dp·cp;
    experts over dp·cp/ep) (Rajbhandari et al. 2020); offloaded fractions live on the CPU instead.
    """
    r, w = ctx.rows, ctx.work
    dpz = (r.dp * r.cp).astype(float)
    edpz = np.maximum(dpz / r.ep, 1.0)

    def sharded(stage_min: int) -> np.ndarray:
        return np.where(r.zero >= stage_min, dense / dpz + expert / edpz, dense + expert)

    keep_w = (1 - r.f_w) if offloaded else 1.0
    keep_o = (1 - r.f_opt) if offloaded else 1.0
    weights = sharded(3) * weight_bytes(w) * keep_w
    grads = sharded(2) * DTYPE_BYTES[w.grad_dtype]
    optimizer = sharded(1) * w.optimizer_state_bytes * keep_o
    return weights, grads, optimizer


def _stage(ctx: Ctx, k: dict[str, KindCost], shape: StageShape, m: np.ndarray) -> StageCost:
    r, w, sysm = ctx.rows, ctx.work, ctx.system
    att, mlp = k["attention"], k["mlp"]
    moe = k.get("moe")
    dense, nmoe, n = shape.dense_layers, shape.moe_layers, shape.layers
    emb, head = shape.has_embedding, shape.has_head

    def per_layer(attr: str) -> np.ndarray:
        total = n * _phase(att, attr) + dense * _phase(mlp, attr)
        return total + (nmoe * _phase(moe, attr) if moe is not None else 0.0)

    fwd = per_layer("fwd") + emb * k["embedding"].fwd.time + head * k["head"].fwd.time
    bwd = per_layer("bwd") + emb * k["embedding"].bwd.time + head * k["head"].bwd.time
    # Recompute: selective reruns core attention in every layer; full reruns the first rk layers' forward.
    full_layers = np.minimum(r.rk, n)
    layer_fwd = per_layer("fwd") / np.maximum(n, 1)
    rc = np.where(r.rc == 1, n * att.selective.time, np.where(r.rc == 2, full_layers * layer_fwd, 0.0))
    # Pipeline sends: one activation (scatter/gather over TP, Narayanan et al. 2021 §4.1) per chunk each way.
    stride = r.tp * r.cp * r.dp
    crosses = (stride >= sysm.gpus_per_node) | (stride * r.pp > sysm.gpus_per_node)
    p2p_bytes = ctx.tokens * ctx.model.hidden_size * ctx.act_bytes / r.tp
    p2p = np.where(r.pp > 1, r.v * comm.p2p_time(sysm, p2p_bytes, crosses), 0.0)

    # Parameters held, and the memory they take with ZeRO sharding and offload.
    def params_of(attr: str) -> np.ndarray:
        total = n * getattr(att.params, attr) + dense * getattr(mlp.params, attr)
        total = total + (nmoe * getattr(moe.params, attr) if moe is not None else 0.0)
        return total + emb * getattr(k["embedding"].params, attr) + head * getattr(k["head"].params, attr)

    dense_p, expert_p = params_of("dense"), params_of("expert")
    w_bytes = weight_bytes(w)
    weights_full = (dense_p + expert_p) * w_bytes
    weights, grads, optimizer = param_memory(ctx, dense_p, expert_p)
    w_kept, _, opt_full = param_memory(ctx, dense_p, expert_p, offloaded=False)

    # Activations: layers storing everything vs. fully recomputed ones, times microbatches in flight.
    def acts(mode: str) -> np.ndarray:
        total = n * getattr(att.acts, mode) + dense * getattr(mlp.acts, mode)
        return total + (nmoe * getattr(moe.acts, mode) if moe is not None else 0.0)

    per_layer_none = acts("none") / np.maximum(n, 1)
    per_layer_full = acts("full") / np.maximum(n, 1)
    stored = np.where(r.rc == 0, acts("none"), np.where(r.rc == 1, acts("selective"),
                      full_layers * per_layer_full + (n - full_layers) * per_layer_none))
    stored = stored + emb * embedding_activations(ctx)
    p = r.pp.astype(float)
    interleave = np.where(r.v > 1, 1 + (p - 1) / (p * r.v), 1.0)  # Korthikanti et al. 2022 §4.2.3
    inflight = np.minimum(m, p - shape.index) * interleave
    working = np.where(r.rc == 2, per_layer_none, 0.0) + head * head_activations(ctx)
    # ZeRO-3 holds the gathered weights of the module in use plus the prefetched next: about one layer.
    gathered = np.where(r.zero >= 3, (dense_p + expert_p) / np.maximum(n, 1) * w_bytes, 0.0)
    activations = stored * inflight * (1 - r.f_act) + working + gathered
    framework = np.full_like(activations, float(w.framework_bytes))

    # Offload traffic per microbatch over PCIe (weights streamed for every pass, activations out and back).
    passes = 2 + (r.rc == 2)
    pcie_bw = sysm.pcie.effective_bytes_per_s
    xfer = (weights_full * r.f_w * passes + 2 * stored * r.f_act) / pcie_bw
    off_exposed = np.maximum(xfer - (fwd + bwd + rc), 0.0)
    cpu = (opt_full * r.f_opt + weights_full * r.f_w
           + stored * inflight * r.f_act)
    return StageCost(shape, fwd + p2p, bwd + rc + p2p, rc, 2 * p2p, off_exposed, weights, grads, optimizer,
                     activations, framework, dense_p + expert_p, cpu, inflight, stored, per_layer_none,
                     per_layer_full, w_kept, opt_full)


def _data_parallel(ctx: Ctx, st: StageCost, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exposed gradient-sync time per step, and exposed ZeRO-3 gather time per step."""
    r, w, s = ctx.rows, ctx.work, ctx.system
    n = (r.dp * r.cp).astype(float)
    stride = r.tp
    g_bytes = DTYPE_BYTES[w.grad_reduce_dtype or w.grad_dtype]
    z3_g_bytes = DTYPE_BYTES[w.grad_reduce_dtype or ("bf16" if w.dtype == "fp8" else w.dtype)]
    grad_bytes = st.params * g_bytes
    ar = comm.all_reduce_time(s, grad_bytes, n, stride)
    rs = comm.reduce_scatter_time(s, grad_bytes, n, stride)
    ag = comm.all_gather_time(s, st.params * DTYPE_BYTES["bf16"], n, stride)
    overlap = s.software.overlap_grad_reduce if w.overlap_grad_reduce is None else w.overlap_grad_reduce
    last_bwd = st.bwd_s if overlap else 0.0
    next_fwd = st.fwd_s if (overlap and s.software.overlap_param_gather) else 0.0
    sync = np.where(r.zero == 0, np.maximum(ar - last_bwd, 0.0),
                    np.maximum(rs - last_bwd, 0.0) + np.maximum(ag - next_fwd, 0.0))
    # ZeRO-3: every microbatch gathers weights for forward, backward (and recompute) and reduce-scatters
    # gradients; a share of it hides behind compute (DeepSpeed prefetching; Primus measured 93% for FSDP).
    z_stride = stride if s.software.zero3_rail_parallel else np.full_like(stride, s.gpus_per_node)
    z_ag = comm.all_gather_time(s, st.params * DTYPE_BYTES["bf16"], n, z_stride)
    z_rs = comm.reduce_scatter_time(s, st.params * z3_g_bytes, n, z_stride)
    per_mb = z_ag * (2 + (r.rc == 2)) + z_rs
    prefetch = s.software.overlap_param_gather
    hidden = s.software.zero3_overlap_fraction * np.minimum(per_mb, st.fwd_s + st.bwd_s) if prefetch else 0.0
    z3 = np.where(r.zero >= 3, m * (per_mb - hidden), 0.0)
    return np.where((n > 1) & (r.zero < 3), sync, 0.0), np.where(n > 1, z3, 0.0)


def optimizer_bytes_per_param(work: TrainWorkload) -> float:
    """HBM traffic of one mixed-precision Adam step per parameter (Megatron's optimizer passes):
    grad-norm read, Adam read grad + state, write state, write the 16-bit copy; fp16 adds loss-scale
    unscaling and the inf/nan check (two more passes over the fp32 gradients)."""
    g = DTYPE_BYTES[work.grad_dtype]
    per = g + (g + work.optimizer_state_bytes) + work.optimizer_state_bytes + DTYPE_BYTES["bf16"]
    if work.dtype == "fp16":
        per += 3 * DTYPE_BYTES["fp32"]  # unscale (read + write) and the overflow check (read)
    return per


def _optimizer_time(ctx: Ctx, st: StageCost) -> np.ndarray:
    """Adam step: memory-bound on the GPU, or on the CPU (and PCIe) for the offloaded share."""
    r, w, s = ctx.rows, ctx.work, ctx.system
    dpz = np.where(r.zero >= 1, (r.dp * r.cp).astype(float), 1.0)
    local = st.params / dpz
    per_param = optimizer_bytes_per_param(w)
    gpu = memory_time(s.gpu, local * per_param * (1 - r.f_opt))
    # Offloaded share runs on the CPU (ZeRO-Offload): CPU DRAM traffic, and grads/weights over PCIe.
    cpu_bw = s.cpu_memory_bandwidth_bytes_per_s / s.gpus_per_node
    cpu = local * r.f_opt * per_param / cpu_bw
    pcie = local * r.f_opt * (DTYPE_BYTES[w.grad_dtype] + DTYPE_BYTES["bf16"]) / s.pcie.effective_bytes_per_s
    return gpu + np.maximum(cpu, pcie)


def _flops(ctx: Ctx, k: dict[str, KindCost], m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Model FLOPs (Megatron/PaLM convention) and executed FLOPs per step, whole cluster."""
    mdl, r, w = ctx.model, ctx.rows, ctx.work
    layer_params = P.attention_qkv_params(mdl) + P.attention_out_params(mdl)
    active = mdl.num_layers * layer_params + mdl.num_dense_layers * P.mlp_params(mdl, mdl.ffn_hidden_size)
    if mdl.moe is not None:
        moe = mdl.moe
        per = moe.experts_per_token * P.mlp_params(mdl, moe.expert_ffn_hidden_size)
        per += moe.num_shared_experts * P.mlp_params(mdl, moe.shared_ffn) + P.router_params(mdl)
        active += mdl.num_moe_layers * per
    d_att = (mdl.mla.qk_head_dim + mdl.mla.v_head_dim) / 2 if mdl.mla else mdl.head_size
    tokens = r.gb * w.seq_len
    # 6 FLOPs per weight per token, 12·L·s·a·d for attention scores and context, 6·V·h for the LM head.
    model = tokens * (6.0 * active + 12.0 * mdl.num_layers * w.seq_len * mdl.num_heads * d_att
                      + 6.0 * mdl.vocab_size * mdl.hidden_size)
    att, mlp, moek = k["attention"], k["mlp"], k.get("moe")
    per_mb = mdl.num_layers * (att.fwd.flops + att.bwd.flops) + mdl.num_dense_layers * (mlp.fwd.flops + mlp.bwd.flops)
    fwd_all = mdl.num_layers * att.fwd.flops + mdl.num_dense_layers * mlp.fwd.flops
    if moek is not None:
        per_mb = per_mb + mdl.num_moe_layers * (moek.fwd.flops + moek.bwd.flops)
        fwd_all = fwd_all + mdl.num_moe_layers * moek.fwd.flops
    per_mb = per_mb + sum(k[x].fwd.flops + k[x].bwd.flops for x in ("embedding", "head"))
    full_frac = np.minimum(r.rk * r.pp, mdl.num_layers) / mdl.num_layers
    rc = np.where(r.rc == 1, mdl.num_layers * att.selective.flops, np.where(r.rc == 2, full_frac * fwd_all, 0.0))
    hardware = m * r.dp * r.cp * r.tp * (per_mb + rc)
    return model + 0.0 * hardware, hardware


def train_cost(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays) -> TrainCost:
    """Time and memory of every layout row (layouts are assumed valid: see ``space.validate_layout``)."""
    ctx = Ctx(model, system, work, rows)
    k = kind_costs(ctx)
    m = (rows.gb / (rows.dp * rows.mb)).astype(float)
    stages = [_stage(ctx, k, shape, m) for shape in stage_shapes(ctx)]
    per_mb = np.max(np.stack([np.where(s.shape.exists, s.per_microbatch_s, 0.0) for s in stages]), axis=0)
    p, v = rows.pp.astype(float), rows.v.astype(float)
    bubble = (p - 1) / v * per_mb
    pipeline = m * per_mb + bubble
    first = stages[0]
    dp_exposed, z3 = _data_parallel(ctx, first, m)
    opt = _optimizer_time(ctx, first)
    base = pipeline + dp_exposed + z3 + opt
    step = base * (1 + system.software.step_overhead_fraction)
    model_flops, hw_flops = _flops(ctx, k, m)
    peak = np.max(np.stack([np.where(s.shape.exists, s.total, 0.0) for s in stages]), axis=0)
    host_gpu = np.max(np.stack([np.where(s.shape.exists, s.cpu_bytes, 0.0) for s in stages]), axis=0)
    layers_per_stage = first.shape.layers
    moe = k.get("moe")

    def comm_exposed(attr: str) -> np.ndarray:
        att, mlp = getattr(k["attention"].fwd, attr) + getattr(k["attention"].bwd, attr), \
            getattr(k["mlp"].fwd, attr) + getattr(k["mlp"].bwd, attr)
        total = layers_per_stage * att + first.shape.dense_layers * mlp
        if moe is not None:
            total = total + first.shape.moe_layers * (getattr(moe.fwd, attr) + getattr(moe.bwd, attr))
        return (m + (p - 1) / v) * total

    return TrainCost(
        ctx=ctx, kinds=k, stages=stages, num_microbatches=m, pipeline_s=pipeline, bubble_s=bubble,
        dp_exposed_s=dp_exposed, zero3_exposed_s=z3, optimizer_s=opt, step_time_s=step,
        model_flops=model_flops, hardware_flops=hw_flops, peak_memory=peak,
        host_bytes_per_node=host_gpu * system.gpus_per_node,
        tp_exposed_s=comm_exposed("comm_tp"), cp_exposed_s=comm_exposed("comm_cp"),
        ep_exposed_s=comm_exposed("comm_ep"), pp_exposed_s=(m + (p - 1) / v) * first.p2p_s,
    )
