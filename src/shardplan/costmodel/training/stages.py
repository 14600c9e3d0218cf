"""Per-layer-kind costs, and how layers fall onto pipeline stages.

Layers are split evenly over ``pp`` stages; when ``L`` is not a multiple of ``pp`` the extra layers go
to middle stages first, since the first and last stages also carry the embedding and the LM head
(Megatron's uneven first/last stages; with interleaving, each stage's layers form ``v`` chunks).
Three representative stages are costed for every layout: the first (most microbatches in flight),
the heaviest middle stage, and the last (LM head, logits). Dense layers precede MoE layers
(DeepSeek's ``first_k_dense``); the middle representative takes the most MoE layers any middle stage
can hold, so its memory is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.layouts import moe_layers_before
from shardplan.costmodel.core.ops import Op, PhaseCost
from shardplan.costmodel.training import layers as Lyr
from shardplan.costmodel.training.ctx import Ctx, backward, selective_part
from shardplan.costmodel.training.memory import LayerActivations, LayerParams, layer_activations, layer_params

STAGES = ("first", "middle", "last")


@dataclass(frozen=True, slots=True)
class KindCost:
    """One layer of a kind, one microbatch, one GPU: ops and sums per phase, parameters, activations."""

    kind: str
    fwd_ops: list[Op]
    bwd_ops: list[Op]
    fwd: PhaseCost
    bwd: PhaseCost
    selective: PhaseCost  # what selective recompute reruns (zero with flash attention)
    params: LayerParams
    acts: LayerActivations | None


def kind_cost(ctx: Ctx, kind: str) -> KindCost:
    """Costs of one layer of ``kind`` (attention, mlp, moe, embedding, head)."""
    builder = {"attention": Lyr.attention_ops, "mlp": Lyr.mlp_ops, "moe": Lyr.moe_ops,
               "embedding": Lyr.embedding_ops, "head": Lyr.head_ops}[kind]
    fwd = builder(ctx)
    bwd = backward(ctx, fwd)
    like = ctx.tokens
    acts = layer_activations(ctx, kind) if kind in ("attention", "mlp", "moe") else None
    return KindCost(kind, fwd, bwd, PhaseCost.of(fwd, like), PhaseCost.of(bwd, like),
                    PhaseCost.of(selective_part(fwd), like), layer_params(ctx, kind), acts)


def kind_costs(ctx: Ctx) -> dict[str, KindCost]:
    kinds = ["embedding", "attention", "mlp", "head"]
    if ctx.model.moe is not None:
        kinds.insert(3, "moe")
    return {k: kind_cost(ctx, k) for k in kinds}


@dataclass(frozen=True, slots=True)
class StageShape:
    """Layer counts of one representative stage, per row (``exists`` is False where it is not distinct)."""

    name: str
    index: np.ndarray  # stage index 0..pp-1
    layers: np.ndarray
    moe_layers: np.ndarray
    has_embedding: np.ndarray
    has_head: np.ndarray
    exists: np.ndarray

    @property
    def dense_layers(self) -> np.ndarray:
        return self.layers - self.moe_layers


def stage_shapes(ctx: Ctx) -> list[StageShape]:
    """First, heaviest-middle and last stage of each row."""
    L, p = ctx.model.num_layers, ctx.rows.pp.astype(float)
    base, extra = np.floor(L / p), np.mod(L, p)
    middles = np.maximum(p - 2, 0)
    n_mid = base + (extra > 0) * (middles > 0)
    spill = np.maximum(extra - middles, 0)  # extras that did not fit in the middle stages
    n_first = np.where(p == 1, L, base + (spill >= 1))
    n_last = np.where(p == 1, L, base + (spill >= 2))
    one = np.ones_like(p, dtype=bool)
    first = StageShape("first", np.zeros_like(p), n_first, moe_layers_before(ctx.model, n_first), one, p == 1, one)
    last_moe = moe_layers_before(ctx.model, np.full_like(p, L)) - moe_layers_before(ctx.model, L - n_last)
    last = StageShape("last", p - 1, n_last, last_moe,
                      p == 1, one, p > 1)
    freq = ctx.model.moe.layer_freq if ctx.model.moe else 1
    mid_moe = np.minimum(np.ceil(n_mid / freq), ctx.model.num_moe_layers) if ctx.model.moe else np.zeros_like(p)
    middle = StageShape("middle", np.minimum(1.0, p - 1), n_mid, mid_moe, ~one, ~one, p > 2)
    return [first, middle, last]
