"""Data-parallel gradient buckets as Megatron-Core builds them, for the bucket whose collectives show in the step.

Megatron-Core lays a model chunk's parameters out in backprop order (the module's parameters reversed) and closes a
bucket at the first parameter that takes it to the bucket size (distributed/param_and_grad_buffer.py@d98e8a6
l.980-991; optimizer/distrib_optimizer.py l.552-575 with the distributed optimizer), so the last bucket, whose
reduce-scatter starts when the backward ends and whose gather opens the next forward, holds the model's first
parameter, the word embedding, with whatever the bucket before it left. Under fp8 primary weights the fp8 and the
16-bit parameters (embedding, norms, biases, router, LM head) sit in separate buffers, and every 16-bit bucket joins
the last fp8 bucket's group (``partition_buckets`` case 3, l.1658-1790): that group is the edge. Bucket size:
``--ddp-bucket-size``, else max(40M, 1M·dp) over the data-parallel group without CP (distributed_data_parallel.py
l.126-134). Expert parameters have their own buffers and groups (not part of the edge here); the DDP modules of
model chunks after the first, and of pipeline stages after the first, hold one bucket each (l.160-171;
megatron/training/models/dist_utils.py l.357-372).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core.layouts import MIXER_KINDS
from shardplan.costmodel.core.shards import layer_shard
from shardplan.hardware.spec import SystemSpec
from shardplan.models import params as P
from shardplan.models.spec import ModelSpec

BUCKET_MIN_PARAMS = 40_000_000
BUCKET_PARAMS_PER_DP_RANK = 1_000_000


def bucket_params(system: SystemSpec, dp: np.ndarray) -> np.ndarray:
    """Parameters per DDP bucket over ``dp`` data-parallel ranks (CP not counted): the recipe's
    ``ddp_bucket_params``, else Megatron-Core's default max(40M, 1M·dp)."""
    size = system.software.ddp_bucket_params
    dp = np.asarray(dp, dtype=float)
    return np.full_like(dp, float(size)) if size else np.maximum(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * dp)


def layer_sequence(model: ModelSpec) -> list[tuple[str | None, str | None]]:
    """(mixer kind, MLP kind) of every layer in order: a ``layouts.MIXER_KINDS`` value or None, and "mlp",
    "moe" or None."""
    from shardplan.models.pattern import kind_at, moe_at

    moe = model.moe
    fd, freq = (moe.first_dense_layers, moe.layer_freq) if moe else (0, 1)
    out: list[tuple[str | None, str | None]] = []
    for i in range(model.num_layers):
        mixer, slot = kind_at(model.layer_pattern, i, model.default_mixer)
        code = slot.value if slot is not None else ("e" if moe is not None and moe_at(i, fd, freq) else "d")
        out.append((MIXER_KINDS.get(mixer.value), {"d": "mlp", "e": "moe"}.get(code)))
    return out


def _mixer_split(model: ModelSpec, kind: str) -> float:
    """Share of a mixer's linear weights in the tensor registered after the other (QKV after the output
    projection in Megatron's attention; a recurrent mixer's weights taken as one tensor)."""
    if kind in ("linear", "mamba"):
        return 1.0
    qkv, out = P.attention_qkv_params(model), P.attention_out_params(model)
    return qkv / (qkv + out)


def edge_bucket(model: ModelSpec, bucket: np.ndarray, layers: np.ndarray, has_embedding: np.ndarray,
                has_head: np.ndarray, tp: np.ndarray, *, fp8_split: bool,
                shared_embedding: np.ndarray | bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Parameters of the edge bucket group of a stage's first model chunk (``layers`` transformer layers from
    layer 0 when ``has_embedding``, else from the stage's first), per row, and of them the 16-bit ones: Megatron's
    greedy fill replayed over the chunk's tensors in backprop order (the head and final norm where the chunk
    holds them; each layer's FC2, FC1, the router and shared experts of an MoE layer, its norms and biases, QKV,
    the output projection; the embedding last). ``fp8_split``: fp8 primary weights, so the fill runs over the
    linear weights alone and every 16-bit parameter of the chunk joins the edge. ``shared_embedding``: the
    embedding is shared with a later stage (tied weights or MTP at pp > 1), and the distributed optimizer closes
    the bucket before it and gives it a bucket of its own (distrib_optimizer.py l.530-565): with 16-bit weights
    the edge is the embedding alone."""
    tp = np.asarray(tp, dtype=float)
    one = np.ones_like(tp)
    bucket = np.broadcast_to(np.asarray(bucket, dtype=float), tp.shape)
    n = np.asarray(layers, dtype=float)
    acc, last, sixteen = np.zeros_like(tp), np.zeros_like(tp), np.zeros_like(tp)

    def add(linear: np.ndarray | float, other: np.ndarray | float, on: np.ndarray) -> None:
        nonlocal acc, last, sixteen
        lin, oth = np.where(on, linear, 0.0), np.where(on, other, 0.0)
        if fp8_split:
            sixteen = sixteen + oth
        size = lin if fp8_split else lin + oth
        acc = acc + size
        closed = (size > 0) & (acc >= bucket)
        last, acc = np.where(closed, acc, last), np.where(closed, 0.0, acc)

    head = layer_shard(model, "head", tp, one, one)  # a first chunk holds the head only at pp = 1 (tied: no copy)
    add(0.0, head.dense, np.asarray(has_head, dtype=bool))
    seq = layer_sequence(model)
    mlp = layer_shard(model, "mlp", tp, one, one)
    moe = layer_shard(model, "moe", tp, one, one) if model.moe is not None else None
    fc1 = 2 / 3 if model.mlp.gated else 0.5
    mixers = {k: (layer_shard(model, k, tp, one, one), _mixer_split(model, k)) for k, _ in set(seq) if k is not None}
    for j in range(int(np.max(n, initial=0)) - 1, -1, -1):
        on = j < n
        mixer, slot = seq[j]
        if slot == "mlp":
            add(mlp.linear * (1 - fc1), 0.0, on)
            add(mlp.linear * fc1, mlp.other, on)
        elif slot == "moe" and moe is not None:
            add(moe.linear, moe.other, on)  # shared experts and router; the routed experts' buffer is apart
        if mixer is not None:
            shard, share = mixers[mixer]
            add(shard.linear * share, shard.other, on)
            add(shard.linear * (1 - share), 0.0, on)
    emb = layer_shard(model, "embedding", tp, one, one).dense
    add(0.0, emb, np.asarray(has_embedding, dtype=bool))
    edge = np.where(acc > 0, acc, last)
    if fp8_split:
        return edge + sixteen, sixteen
    word = P.embedding_params(model) / tp  # the shared parameter: the word embedding alone
    edge = np.where(np.asarray(shared_embedding, dtype=bool) & np.asarray(has_embedding, dtype=bool), word, edge)
    return edge, np.where(has_embedding, np.minimum(emb, edge), 0.0)


def sixteen_bit_params(model: ModelSpec, has_embedding: np.ndarray, has_head: np.ndarray, tp: np.ndarray,
                       pp: np.ndarray) -> np.ndarray:
    """Parameters of a stage that stay 16-bit under fp8 primary weights: the embedding, and the LM head with the
    final norm (Megatron-Core's output layer is a plain ColumnParallelLinear, outside Transformer Engine's fp8
    modules); ``fp8_param_gather`` gathers only TE's linear weights in fp8. (Norms and biases are left out: a few
    parameters per layer.)"""
    one = np.ones_like(np.asarray(tp, dtype=float))
    emb = layer_shard(model, "embedding", tp, one, one).dense
    head = layer_shard(model, "head", tp, one, pp).dense
    return np.where(has_embedding, emb, 0.0) + np.where(has_head, head, 0.0)
