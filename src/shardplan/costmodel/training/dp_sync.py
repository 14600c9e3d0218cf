"""Data-parallel synchronisation and the optimizer step of one stage, for many layouts at once.

Gradient reduction (all-reduce, or reduce-scatter + the distributed optimizer's parameter all-gather), ZeRO-3's
per-microbatch gathers, and the Adam step. Every collective runs over two groups (``dp_collective``): the
dense parameters over the dp·cp ranks, and the experts' over their expert-data-parallel ranks, which sit
outside the EP group, so the EP ranks of one node do not pool their NICs for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import multi_tensor_time
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.ddp_buckets import bucket_params, edge_bucket, sixteen_bit_params
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.schedule_overlap import chunked_gather_exposed, chunked_reduce_exposed
from shardplan.hardware.spec import SystemSpec
from shardplan.units import DTYPE_BYTES

if TYPE_CHECKING:
    from shardplan.costmodel.training.step import StageCost

Collective = Callable[[SystemSpec, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

def fsdp_under_pp(r: LayoutArrays) -> np.ndarray:
    """Rows running FSDP (ZeRO-3) under pipeline parallelism: weights gathered once per step and kept."""
    return (r.zero >= 3) & (r.pp > 1)


class HeldParams(Protocol):
    """A stage's parameters held per GPU (before ZeRO sharding), and of them the experts'."""

    @property
    def params(self) -> np.ndarray: ...

    @property
    def expert_params(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class _Held:
    params: np.ndarray
    expert_params: np.ndarray


def dp_collective(ctx: Ctx, fn: Collective, st: HeldParams, bytes_per_param: float, stride: np.ndarray, *,
                  across_nodes: bool = False, dense_bytes: np.ndarray | None = None) -> np.ndarray:
    """One data-parallel collective over the stage's parameters: the dense ones across the dp·cp ranks with
    rank stride ``stride``, the experts' across the edp = tp·cp·dp/(etp·ep) expert-data-parallel ranks, whose
    stride is etp·ep (Megatron-Core parallel_state.py@d98e8a6: expert ranks ordered tp-ep-dp-pp), so with the
    EP group inside a node each GPU moves its experts' share over its own NIC alone (``across_nodes``: ZeRO-3
    placed one member per node, both groups stay so). Separate buckets and process groups on the same NICs: the
    times add. ``dense_bytes``: the dense share's bytes where not all its parameters move ``bytes_per_param``."""
    r, s = ctx.rows, ctx.system
    dense = st.params - st.expert_params
    t = fn(s, dense * bytes_per_param if dense_bytes is None else dense_bytes, (r.dp * r.cp).astype(float), stride)
    e_stride = np.full_like(r.tp, s.gpus_per_node) if across_nodes else r.etp * r.ep
    t_e = fn(s, st.expert_params * bytes_per_param, r.edp, e_stride)
    return t + np.where(st.expert_params > 0, t_e, 0.0)


def fsdp_collectives(ctx: Ctx, st: HeldParams, sixteen: np.ndarray | float = 0.0
                     ) -> tuple[np.ndarray, np.ndarray, float]:
    """ZeRO-3's collectives over the data-parallel ranks (rail-aligned or across nodes as the software places
    them) for the stage's parameters held: the all-gather of the weights (``sixteen`` of the dense ones in 16 bit
    under fp8 primary weights: ``gathered_dense_bytes``), the reduce-scatter of the gradients in the reduce dtype,
    and the share of an overlappable gather that prefetching hides (0 without prefetching)."""
    r, w, s = ctx.rows, ctx.work, ctx.system
    rail = s.software.zero3_rail_parallel
    z_stride = r.tp if rail else np.full_like(r.tp, s.gpus_per_node)
    ag = dp_collective(ctx, comm.all_gather_time, st, gathered_bytes(ctx), z_stride, across_nodes=not rail,
                       dense_bytes=gathered_dense_bytes(ctx, st.params - st.expert_params, sixteen))
    rs = dp_collective(ctx, comm.reduce_scatter_time, st, DTYPE_BYTES[w.grad_reduce_dtype or w.grad_dtype],
                       z_stride, across_nodes=not rail)
    return ag, rs, fsdp_overlap(s)


def gathered_bytes(ctx: Ctx) -> float:
    """Bytes per parameter a data-parallel weight all-gather moves: the fp8 primary copy under fp8 with
    ``SoftwareSpec.fp8_param_gather``, else the 16-bit weight."""
    fp8 = ctx.work.dtype == "fp8" and ctx.system.software.fp8_param_gather
    return DTYPE_BYTES["fp8"] if fp8 else DTYPE_BYTES["bf16"]


def gathered_dense_bytes(ctx: Ctx, dense: np.ndarray, sixteen: np.ndarray | float) -> np.ndarray:
    """Bytes of a gather of ``dense`` parameters of which ``sixteen`` stay 16-bit under fp8 primary weights
    (``ddp_buckets.sixteen_bit_params``), the rest at ``gathered_bytes``."""
    p_bytes = gathered_bytes(ctx)
    sixteen = np.minimum(sixteen, dense)
    return (dense - sixteen) * p_bytes + sixteen * max(p_bytes, DTYPE_BYTES["bf16"])


def fsdp_overlap(system: SystemSpec) -> float:
    """The share of an overlappable ZeRO-3 gather that prefetching hides (0 without prefetching)."""
    return system.software.zero3_overlap_fraction if system.software.overlap_param_gather else 0.0


def synchronised(ctx: Ctx, st: StageCost) -> np.ndarray:
    """Rows with a data-parallel group to synchronise: dense over dp·cp > 1, or experts over edp > 1 (with expert
    tensor parallelism folded, edp can exceed 1 at dp = 1)."""
    r = ctx.rows
    return (r.dp * r.cp > 1) | ((r.edp > 1) & (st.expert_params > 0))


def tail_floor(ctx: Ctx, st: StageCost) -> np.ndarray:
    """A lower bound on rank 0's tail (gradient sync, ZeRO-3 gathers, optimizer step) for every layer count at
    least ``st``'s: the optimizer step, plus under FSDP with PP the exposed reduce-scatter and the part of the
    gather no forward can hide, ``(1 − f)·AG``, once per schedule (``data_parallel``); each grows with the
    parameters held."""
    r = ctx.rows
    ag, rs, f = fsdp_collectives(ctx, st, sixteen_bit_params(ctx.model, st.shape.has_embedding, st.shape.has_head,
                                                             r.tp, r.pp))
    return optimizer_time(ctx, st) + np.where(fsdp_under_pp(ctx.rows), ctx.schedules * (rs + (1 - f) * ag), 0.0)


def _equal_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows equal in every column (float64, bit for bit): the first row of each group and each row's group.
    Grouped by a 64-bit hash of the columns' bits, then checked bit for bit against each group's first row; a
    collision (never seen) falls back to comparing whole rows."""
    bits = [np.ascontiguousarray(c).view(np.uint64) for c in cols]
    h = np.zeros(len(bits[0]), dtype=np.uint64)
    for b in bits:
        h = h * np.uint64(0x9E3779B97F4A7C15) + b  # wraps modulo 2**64
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if all(np.array_equal(b, b[first][inverse]) for b in bits):
        return first, inverse
    key = np.ascontiguousarray(np.stack(cols, axis=1)).view(np.dtype((np.void, 8 * len(cols)))).ravel()
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _collective_times(ctx: Ctx, st: StageCost, overlap: bool) -> tuple[dict[str, np.ndarray], float]:
    """Every collective ``data_parallel`` prices, per row: evaluated once per distinct (parameters held, degrees,
    model chunks), the only inputs they read, and spread back to the rows that share them (a table's rows differ
    mostly in microbatch, recompute, ZeRO stage and offload). Element for element the same arithmetic as on every
    row."""
    r, w, s = ctx.rows, ctx.work, ctx.system
    shape = np.shape(r.tp)
    cols = [np.broadcast_to(np.asarray(x, dtype=float), shape) for x in
            (st.params, st.expert_params, r.dp, r.cp, r.tp, r.etp, r.ep, r.v, st.shape.has_embedding,
             st.shape.has_head, r.pp, st.shape.layers)]
    first, inverse = _equal_rows(cols)
    sub = Ctx(ctx.model, s, w, r.take(first))
    held = _Held(cols[0][first], cols[1][first])
    u = sub.rows
    n = (u.dp * u.cp).astype(float)
    stride = u.tp
    g_bytes = DTYPE_BYTES[w.grad_reduce_dtype or w.grad_dtype]
    z3_g_bytes = DTYPE_BYTES[w.grad_reduce_dtype or ("bf16" if w.dtype in ("fp8", "fp4") else w.dtype)]
    p_bytes = gathered_bytes(ctx)
    has_emb, has_head, dense = cols[8][first] > 0, cols[9][first] > 0, held.params - held.expert_params
    # Megatron buckets the first pipeline stage's first model chunk only; other chunks and stages are one bucket
    # each (``ddp_buckets``): there the edge is the whole chunk
    chunk = held.params / u.v
    bucket = np.where(has_emb, np.minimum(bucket_params(s, u.dp), held.params), held.params) if overlap \
        else held.params
    chunk_bucket = np.minimum(bucket, chunk)
    sim, sim16 = edge_bucket(ctx.model, bucket, np.ceil(cols[11][first] / u.v), has_emb,
                             has_head & (u.pp == 1) & (u.v == 1), u.tp, fp8_split=p_bytes < DTYPE_BYTES["bf16"],
                             shared_embedding=(ctx.model.tied_embeddings or w.mtp_layers > 0) & (u.pp > 1))
    edge = np.where(has_emb & overlap, np.minimum(sim, dense), dense / u.v)
    edge_gathered = gathered_dense_bytes(ctx, edge, np.where(has_emb & overlap, sim16, 0.0))
    sixteen = sixteen_bit_params(ctx.model, has_emb, has_head, u.tp, u.pp)
    dense_gathered = gathered_dense_bytes(ctx, dense, sixteen)
    # Only the collectives some row's ZeRO stage reads (``data_parallel``; every row's stage, not only the distinct
    # keys' representatives): ZeRO-0 all-reduces; ZeRO-1/2 reduce-scatter and gather; ZeRO-3 (and ZeRO-2 gathering
    # per forward) gathers and reduce-scatters layer by layer. The others stay 0 on rows that never select them.
    zero = set(np.unique(r.zero).tolist())
    per_layer = 3 in zero or (2 in zero and s.software.zero2_gather_per_forward)
    z_ag, pp_rs, f = fsdp_collectives(sub, held, sixteen) if per_layer else (0.0, 0.0, fsdp_overlap(s))
    z_stride = stride if s.software.zero3_rail_parallel else np.full_like(stride, s.gpus_per_node)
    ar, sharded = 0 in zero, bool(zero & {1, 2})
    out = {
        "ar": dp_collective(sub, comm.all_reduce_time, held, g_bytes, stride) if ar else 0.0,
        "rs": dp_collective(sub, comm.reduce_scatter_time, held, g_bytes, stride) if sharded else 0.0,
        "ag": dp_collective(sub, comm.all_gather_time, held, p_bytes, stride,
                            dense_bytes=dense_gathered) if sharded else 0.0,
        "ar_last": comm.all_reduce_time(s, edge * g_bytes, n, stride) if ar else 0.0,
        "rs_last": comm.reduce_scatter_time(s, edge * g_bytes, n, stride) if sharded else 0.0,
        "ag_first": comm.all_gather_time(s, edge_gathered, n, stride) if sharded else 0.0,  # chunk 0's
        "z_ag": z_ag, "pp_rs": pp_rs,
        "z_rs": dp_collective(sub, comm.reduce_scatter_time, held, z3_g_bytes, z_stride,
                              across_nodes=not s.software.zero3_rail_parallel) if 3 in zero else 0.0,
        "bucket": bucket, "chunk_bucket": chunk_bucket,
    }
    return {k: np.broadcast_to(np.asarray(v, dtype=float), first.shape)[inverse].reshape(shape)
            for k, v in out.items()}, f


def data_parallel(ctx: Ctx, st: StageCost, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exposed gradient-sync time per step, and exposed ZeRO-3 gather time per step.

    Megatron enables gradient sync only for the last microbatch (``schedules.py``: ``no_sync`` for the others),
    so the bucketed reduce-scatter/all-reduce overlaps that microbatch's backward only: exposed
    ``max(comm − last backward·(1 − bucket share), last bucket)`` (the network idles until the first bucket
    fills, and the last bucket starts only when the backward ends; interleaved, each chunk's after its own last
    backward: ``schedule_overlap``). The distributed optimizer's parameter all-gather overlaps the next step's first
    forward the same way (interleaved, each chunk's before its own first forward, chunk k+1's launched at chunk k's:
    ``schedule_overlap.chunked_gather_exposed``). ZeRO-2 keeps no full gradient buffer, so every microbatch
    reduce-scatters its gradients (DeepSpeed ZeRO-2, FSDP SHARD_GRAD_OP), each behind its own backward.
    Without overlap the whole collective is exposed.
    """
    r, w, s = ctx.rows, ctx.work, ctx.system
    overlap = s.software.overlap_grad_reduce if w.overlap_grad_reduce is None else w.overlap_grad_reduce
    c, f = _collective_times(ctx, st, overlap)
    ar, rs, ag, ar_last, rs_last, ag_first = (c[k] for k in ("ar", "rs", "ag", "ar_last", "rs_last", "ag_first"))
    bucket, chunk_bucket = c["bucket"], c["chunk_bucket"]
    last_bwd = st.bwd_s if overlap else 0.0
    gather_overlap = overlap and s.software.overlap_param_gather

    def exposed(t: np.ndarray, window: np.ndarray | float, edge: np.ndarray, on: bool) -> np.ndarray:
        # Buckets stream out while the window's compute produces (or consumes) them; the first bucket takes
        # its share of the window to fill, and the edge bucket waits for the window's end.
        if not on:
            return t
        return comm.with_overlap_cost(s, t, np.maximum(t - window * (1 - bucket / np.maximum(st.params, 1.0)), edge))

    def chunked(t: np.ndarray, edge: np.ndarray) -> np.ndarray:  # each chunk's reduction after its last backward
        return comm.with_overlap_cost(s, t, chunked_reduce_exposed(t, edge, st.bwd_s, chunk_bucket, st.params,
                                                                   r.pp, r.v, m)) if overlap else t
    reduce = np.where(r.zero == 0, chunked(ar, ar_last),
                      np.where(r.zero == 2, m * exposed(rs, last_bwd, rs_last, overlap), chunked(rs, rs_last)))

    def gathered(t: np.ndarray, edge: np.ndarray) -> np.ndarray:  # each chunk's gather before its first forward
        return comm.with_overlap_cost(s, t, chunked_gather_exposed(t, edge, st.fwd_s, chunk_bucket, st.params,
                                                                   r.pp, r.v, m)) if gather_overlap else t
    gather = np.where(r.zero >= 1, gathered(ag, ag_first), 0.0)
    z_ag, pp_rs, z_rs = c["z_ag"], c["pp_rs"], c["z_rs"]
    fwd_gather = comm.with_overlap_cost(s, z_ag, z_ag - f * np.minimum(z_ag, st.fwd_s))  # prefetched under the forward
    # PyTorch FSDP's SHARD_GRAD_OP reshards the weights after every backward, so every microbatch's forward gathers
    # them again, layer by layer, as ZeRO-3's forward does (``SoftwareSpec.zero2_gather_per_forward``); the first
    # microbatch's gathers are the step's, so none is added at the step's start.
    regather = (r.zero == 2) & s.software.zero2_gather_per_forward
    gather = np.where(regather, m * fwd_gather, gather)
    # Gradient accumulation over whole schedules (``layout.pipeline_schedules``): torch pipelining reduces the
    # gradients at each schedule's last backward (pytorch@88fa1e7 pipelining/stage.py backward_maybe_with_nosync).
    n_s = ctx.schedules
    sync = np.where(r.zero == 2, reduce, n_s * reduce) + gather
    # ZeRO-3: every microbatch gathers weights for forward and for backward (and again for a full recompute)
    # and reduce-scatters gradients, layer by layer. With prefetching (FSDP forward/backward prefetch,
    # DeepSpeed's prefetch bucket) layer i+1's gather runs under layer i's compute, so the forward's gathers
    # can hide only behind the forward and the backward's gathers and reduce-scatters only behind the
    # backward; of that overlappable part the measured share ``zero3_overlap_fraction`` hides (Primus measured
    # 93% for FSDP; the presets keep 0.8). Without prefetching all of it is exposed.
    # With BACKWARD_POST prefetching (``SoftwareSpec.fsdp_backward_prefetch``) a layer's backward gather is issued
    # once the layer after it has its gradients: it shows whole, and only the reduce-scatters overlap the backward.
    bwd_ag = z_ag * (1 + (r.rc == 2))
    post = s.software.fsdp_backward_prefetch == "post"
    bwd_comm = z_rs if post else bwd_ag + z_rs
    per_mb = fwd_gather + comm.with_overlap_cost(s, bwd_comm, bwd_comm - f * np.minimum(bwd_comm, st.bwd_s)) \
        + (bwd_ag if post else 0.0)
    z3 = np.where(r.zero >= 3, m * per_mb, 0.0)
    # ZeRO-3 under PP (torchtitan FSDP2, ``fsdp_under_pp``): weights gathered once per step under the first
    # forward (the forward term above, once); gradients reduce-scattered once, in fp32 (torchtitan
    # mixed_precision_reduce), after the last backward, exposed: torch pipelining runs FSDP's post-backward only
    # then (pytorch@88fa1e7 pipelining/stage.py backward_maybe_with_nosync; later: a REDUCE_GRAD action).
    # Each schedule's post-backward also reshards the weights (set_reshard_after_backward(True)), so every schedule
    # gathers them again under its first forward.
    pp_fsdp = fsdp_under_pp(r)
    z3 = np.where(pp_fsdp, n_s * comm.with_overlap_cost(s, z_ag, z_ag - f * np.minimum(z_ag, st.fwd_s)), z3)
    sync = np.where(pp_fsdp, n_s * pp_rs, sync)
    on = synchronised(ctx, st)
    return np.where(on & ((r.zero < 3) | pp_fsdp), sync, 0.0), np.where(on, z3, 0.0)


def optimizer_bytes_per_param(work: TrainWorkload) -> float:
    """HBM traffic of one mixed-precision Adam step per parameter (Megatron's optimizer passes):
    grad-norm read, Adam read grad + state, write state, then the 16-bit weights: read the fp32 master and write the
    16-bit copy (Megatron-Core d98e8a6 distrib_optimizer.py ``_copy_main_params_to_model_params``), or, with no fp32
    master (``optimizer_bytes_per_param`` set: the moments alone), Adam reads and writes the 16-bit weights
    themselves; fp16 adds loss-scale unscaling and the inf/nan check (two more passes over the fp32 gradients)."""
    g = DTYPE_BYTES[work.grad_dtype]
    weights_read = DTYPE_BYTES["bf16"] if work.optimizer_bytes_per_param is not None else DTYPE_BYTES["fp32"]
    per = g + (g + work.optimizer_state_bytes) + work.optimizer_state_bytes + weights_read + DTYPE_BYTES["bf16"]
    if work.dtype == "fp16":
        per += 3 * DTYPE_BYTES["fp32"]  # unscale (read + write) and the overflow check (read)
    return per


def optimizer_time(ctx: Ctx, st: StageCost) -> np.ndarray:
    """Adam step: memory-bound on the GPU, or on the CPU (and PCIe) for the offloaded share; plus zeroing the
    gradient buffer the next step accumulates into (Megatron ``zero_grad_buffer`` at every train step: a write
    of the buffer, whole under ZeRO-0/1, sharded under ZeRO-2/3)."""
    r, w, s = ctx.rows, ctx.work, ctx.system
    dpz = np.where(r.zero >= 1, (r.dp * r.cp).astype(float), 1.0)
    edpz = np.where(r.zero >= 1, r.edp, 1.0)  # experts' optimizer shards over their own DP ranks (param_memory)
    local = (st.params - st.expert_params) / dpz + st.expert_params / edpz
    per_param = optimizer_bytes_per_param(w)
    grad_buffer = np.where(r.zero >= 2, local, st.params) * DTYPE_BYTES[w.grad_dtype]
    gpu = multi_tensor_time(s.gpu, local * per_param * (1 - r.f_opt)) + multi_tensor_time(s.gpu, grad_buffer)
    # Offloaded share runs on the CPU (ZeRO-Offload): CPU DRAM traffic, and grads/weights over PCIe.
    cpu_bw = s.cpu_memory_bandwidth_bytes_per_s / s.gpus_per_node
    cpu = local * r.f_opt * per_param / cpu_bw
    pcie = local * r.f_opt * (DTYPE_BYTES[w.grad_dtype] + DTYPE_BYTES["bf16"]) / s.pcie.effective_bytes_per_s
    return gpu + np.maximum(cpu, pcie)
