"""A cheap necessary condition for a training layout to fit memory, for many layouts at once (numpy).

``step.train_cost`` builds every layer's operators to time a layout; deciding that a layout can *not* fit needs
only parameters, the LM head's logits and the framework's buffers, which are a few array operations. Per GPU of
a stage that exists (the first, and the last, which holds the LM head; the same stage when pp = 1), the cost
model's total ``weights + grads + optimizer + activations + framework`` (``step._stage``) is at least:

- gradients: ``step.param_memory``'s exact bytes (gradients are never offloaded);
- activations: on the head's stage, the LM head's working set (``memory.head_activations``), which ``_stage``
  adds whole (``working = max(recomputed, head)``, never offloaded); elsewhere ≥ 0;
- framework: ``memory.framework_memory`` exactly (it depends only on tp, cp, dp, pp, ep and sp).

Offload moves optimizer state, weights and stored activations to the host; a stage's host bytes per GPU are
at most ``host_capacity / gpus_per_node`` (``evaluate.fits``), and what moves costs the host at least what it
saved the GPU (offloaded weights count unsharded and 16-bit, ``step._stage``; MXFP8 primary weights free 2/32 B a
layer weight more on the GPU than the host takes, which the floor's weights, counted at 16 bits, leave out). So GPU
plus host bytes are at least the ZeRO-sharded weights + gradients + optimizer state + the head's working set +
framework, the weights less what fp8 primary weights hold under 16 bits (``memory.cached_weight_bytes_floor``; the
cache beside 16-bit weights only adds). A row fails ``may_fit`` only when one of these two sums exceeds what its GPU
(plus, with offload allowed, its share of host memory) can hold: such a row fails ``evaluate.fits`` whatever
recompute and offload the table gives it.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core.layouts import layer_kind_names
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import gpu_capacity, host_capacity
from shardplan.costmodel.training.layout import LayoutArrays, TrainWorkload
from shardplan.costmodel.training.memory import (
    cached_mtp_params,
    cached_weight_bytes_floor,
    framework_memory,
    head_activations,
    layer_params,
)
from shardplan.costmodel.training.stage_memory import param_memory
from shardplan.costmodel.training.stages import stage_shapes
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec

# Float sums here run in another order than step._stage's; a bound this close to the capacity keeps the row.
REL_TOL = 1e-9


def memory_floor(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, lower bounds on (GPU bytes, GPU + host bytes) per GPU of its tightest exact stage (first or
    last), valid for every recompute and offload choice."""
    ctx = Ctx(model, system, work, rows)
    # stage shapes depend on pp alone: build them once per distinct pp
    _, first, inv = np.unique(rows.pp, return_index=True, return_inverse=True)
    inv = inv.ravel()
    shapes = stage_shapes(Ctx(model, system, work, rows.take(first)))
    kinds = layer_kind_names(model)
    params = {k: layer_params(ctx, k) for k in [*kinds, "embedding", "head"]}
    frame = framework_memory(ctx)
    head_acts = head_activations(ctx)
    below = cached_weight_bytes_floor(ctx)  # fp8 primary weights under their 16 bits (Blackwell per-tensor)
    mtp = cached_mtp_params(ctx) if work.mtp_layers else 0.0
    gpu_lb = np.zeros(len(rows))
    all_lb = np.zeros(len(rows))
    for st in (shapes[0], shapes[2]):  # first and last: exact (the middle is an upper bound)
        exists = st.exists[inv]
        emb, head = st.has_embedding[inv].astype(float), st.has_head[inv].astype(float)
        dense = emb * params["embedding"].dense + head * params["head"].dense
        expert = emb * params["embedding"].expert + head * params["head"].expert
        layer = head * mtp if work.mtp_layers else 0.0  # parameters with quantized copies (memory.cached_weight_bytes)
        for k in kinds:
            n = st.count(k)[inv]
            dense = dense + n * params[k].dense
            expert = expert + n * params[k].expert
            layer = layer + n * params[k].total
        w, g, o = param_memory(ctx, dense, expert, offloaded=False)
        gpu = g + frame + head * head_acts
        gpu_lb = np.where(exists, np.maximum(gpu_lb, gpu), gpu_lb)
        all_lb = np.where(exists, np.maximum(all_lb, gpu + w + o + below * layer), all_lb)
    return gpu_lb, all_lb


def may_fit(model: ModelSpec, system: SystemSpec, work: TrainWorkload, rows: LayoutArrays, *,
            allow_offload: bool) -> np.ndarray:
    """False for rows that provably cannot fit memory with any recompute or (if allowed) offload choice."""
    if len(rows) == 0:
        return np.zeros(0, dtype=bool)
    gpu_lb, all_lb = memory_floor(model, system, work, rows)
    cap = gpu_capacity(system, work)
    host = host_capacity(system, work) / system.gpus_per_node if allow_offload else 0.0
    slack = 1 + REL_TOL
    return (gpu_lb <= cap * slack) & (all_lb <= (cap + max(host, 0.0)) * slack)
