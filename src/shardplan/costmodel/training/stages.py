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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardplan.costmodel.core.layouts import (
    LAYER_KINDS,
    StageShape,
    layer_kind_names,
    model_kind_counts,
    representative_stages,
)
from shardplan.costmodel.core.ops import COMM, HOST, Op, PhaseCost
from shardplan.costmodel.training import layers as Lyr
from shardplan.costmodel.training.backward import backward, selective_part
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.ep_overlap import overlap_ep
from shardplan.costmodel.training.layout import LayoutArrays
from shardplan.costmodel.training.memory import (
    LayerActivations,
    LayerParams,
    layer_activations,
    layer_params,
    mtp_ffn_kind,
)
from shardplan.costmodel.training.recompute_modules import ModuleCost, module_costs
from shardplan.costmodel.training.row_trees import map_rows
from shardplan.costmodel.training.space import row_keys
from shardplan.costmodel.training.tp_overlap import overlap_tp
from shardplan.models.spec import ModelSpec

STAGES = ("first", "middle", "last")


@dataclass(frozen=True, slots=True)
class KindCost:
    """One layer of a kind, one microbatch, one GPU: ops and sums per phase, parameters, activations."""

    kind: str
    fwd_ops: list[Op]
    bwd_ops: list[Op]
    fwd: PhaseCost
    bwd: PhaseCost
    selective: PhaseCost  # what core_attn recompute reruns (core attention, flash or unfused)
    rerun: PhaseCost  # what a full recompute of the layer reruns (``layers.full_rerun_ops``)
    params: LayerParams
    acts: LayerActivations | None
    modules: dict[str, ModuleCost]  # selective recompute modules of this kind (``recompute_modules``)


def kind_cost(ctx: Ctx, kind: str) -> KindCost:
    """Costs of one layer of ``kind`` (attention, mlp, moe, embedding, head)."""
    builder = {"attention": Lyr.attention_ops, "sliding": Lyr.sliding_ops, "chunked": Lyr.chunked_ops,
               "linear": Lyr.linear_ops, "mamba": Lyr.mamba_ops, "mlp": Lyr.mlp_ops, "moe": Lyr.moe_ops,
               "embedding": Lyr.embedding_ops, "head": Lyr.head_ops}[kind]
    raw = builder(ctx)
    fwd = overlap_tp(ctx, kind, raw, backward=False)
    bwd = overlap_tp(ctx, kind, backward(ctx, raw), backward=True)
    like = ctx.tokens
    acts = layer_activations(ctx, kind) if kind in LAYER_KINDS else None
    return KindCost(kind, fwd, bwd, PhaseCost.of(fwd, like), PhaseCost.of(bwd, like),
                    PhaseCost.of(selective_part(fwd), like), PhaseCost.of(Lyr.full_rerun_ops(ctx, kind, fwd), like),
                    layer_params(ctx, kind), acts,
                    module_costs(ctx, kind, fwd) if kind in LAYER_KINDS else {})


# The row columns a layer's costs depend on (parallel shapes, microbatch, batch). Recompute, interleaving, ZeRO
# and offload act only where ``step._stage`` composes stages, so rows differing only in those share per-kind costs.
KIND_COLUMNS = ("tp", "pp", "dp", "ep", "cp", "mb", "sp", "gb", "etp")


def kind_costs(ctx: Ctx, *, ops: bool = True) -> dict[str, KindCost]:
    """Every layer kind the model has (``core.layouts.layer_kind_names``), with the embedding and the head; full
    attention and the dense MLP always (the MFU convention and reports refer to them).

    ``ops=False``: the sums only (operator lists left empty), each distinct ``KIND_COLUMNS`` row costed once."""
    if not ops and len(ctx.rows) > 1:
        return kind_table(ctx).expand()
    costs = _every_kind(ctx)
    return costs if ops else take_kinds(costs, slice(None), len(ctx.rows))


@dataclass(frozen=True, slots=True)
class KindTable:
    """Per-kind costs (sums only) of distinct ``KIND_COLUMNS`` rows, and the distinct row each row's are."""

    rows: LayoutArrays  # the distinct rows
    kinds: dict[str, KindCost]  # theirs
    index: np.ndarray  # per row, its distinct row
    own: bool = False  # every row distinct: ``kinds`` are the rows' own, in their order

    def take(self, idx: np.ndarray) -> KindTable:
        """The table of rows ``idx``."""
        return KindTable(self.rows, self.kinds, self.index[idx])

    def expand(self) -> dict[str, KindCost]:
        """The rows' per-kind costs, one entry per row (``kind_costs(ctx, ops=False)``)."""
        return self.kinds if self.own else take_kinds(self.kinds, self.index, len(self.rows))


def kind_table(ctx: Ctx) -> KindTable:
    """The rows' per-kind costs, each distinct ``KIND_COLUMNS`` row costed once."""
    r = ctx.rows
    if len(r) > 1:
        # the EP all-to-all overlap of the combined 1F1B schedule depends on interleaving and recompute too
        cols = KIND_COLUMNS + (("v", "rc") if ctx.system.software.ep_comm_overlap else ())
        _, first, inverse = np.unique(row_keys([getattr(r, c) for c in cols]), return_index=True, return_inverse=True)
        if len(first) < len(r):
            distinct = r.take(first)
            kinds = _every_kind(Ctx(ctx.model, ctx.system, ctx.work, distinct))
            return KindTable(distinct, take_kinds(kinds, slice(None), len(first)), inverse.ravel())
    return KindTable(r, take_kinds(_every_kind(ctx), slice(None), len(r)), np.arange(len(r)), own=True)


def kind_count(kinds: dict[str, KindCost]) -> int:
    """Rows per-kind costs hold (the length of any of their per-row arrays)."""
    return len(next(iter(kinds.values())).fwd.time)


def _every_kind(ctx: Ctx) -> dict[str, KindCost]:
    kinds = ["embedding", *dict.fromkeys(["attention", "mlp", *layer_kind_names(ctx.model)]), "head"]
    costs = {k: kind_cost(ctx, k) for k in kinds}
    if "moe" in costs and ctx.system.software.ep_comm_overlap:
        costs["moe"] = _moe_overlapped(ctx, costs)
    if ctx.work.mtp_layers:
        costs["head"] = _head_with_mtp(ctx, costs)
    return costs


def _head_with_mtp(ctx: Ctx, costs: dict[str, KindCost]) -> KindCost:
    """The LM head followed by the workload's MTP modules, each its entry (``layers.mtp_entry_ops``), a full-attention
    layer and a layer of the last layer's feed-forward kind as the model's own layers cost, and the head again with
    its loss; the head's parameters already hold the modules' (``memory.layer_params``)."""
    raw = Lyr.mtp_entry_ops(ctx)
    entry_f = overlap_tp(ctx, "head", raw, backward=False)
    entry_b = overlap_tp(ctx, "head", backward(ctx, raw), backward=True)
    head, attn, ffn = costs["head"], costs["attention"], costs[mtp_ffn_kind(ctx)]
    n = ctx.work.mtp_layers
    fwd = head.fwd_ops + n * (entry_f + attn.fwd_ops + ffn.fwd_ops + head.fwd_ops)
    bwd = head.bwd_ops + n * (head.bwd_ops + ffn.bwd_ops + attn.bwd_ops + entry_b)
    like = ctx.tokens
    whole = PhaseCost.of(fwd, like)
    return KindCost(head.kind, fwd, bwd, whole, PhaseCost.of(bwd, like), head.selective, whole, head.params, head.acts,
                    head.modules)


def take_kinds(kinds: dict[str, KindCost], idx: np.ndarray | slice, n: int) -> dict[str, KindCost]:
    """Rows ``idx`` of per-kind costs computed for ``n`` rows at once (operator lists dropped)."""
    return map_rows(kinds, lambda x: x[idx], n, drop_lists=True)


def _moe_overlapped(ctx: Ctx, costs: dict[str, KindCost]) -> KindCost:
    """The MoE layer with its EP all-to-alls hidden behind the paired microbatch's layer (``ep_overlap``); the
    token mixer beside it is the mean of the model's mixer kinds."""
    mixers = [k for k in layer_kind_names(ctx.model) if k not in ("mlp", "moe")]

    def compute(ops: list[Op]) -> np.ndarray:
        return sum((op.time for op in ops if op.kind not in (COMM, HOST)), start=np.zeros_like(ctx.tokens))

    n = max(len(mixers), 1)
    mixer_f = sum((compute(costs[k].fwd_ops) for k in mixers), start=np.zeros_like(ctx.tokens)) / n
    mixer_b = sum((compute(costs[k].bwd_ops) for k in mixers), start=np.zeros_like(ctx.tokens)) / n
    c = costs["moe"]
    fwd, bwd = overlap_ep(ctx, c.fwd_ops, c.bwd_ops, mixer_f, mixer_b)
    like = ctx.tokens
    whole = PhaseCost.of(fwd, like)  # an MoE layer reruns whole (``layers.full_rerun_ops``)
    return KindCost(c.kind, fwd, bwd, whole, PhaseCost.of(bwd, like), c.selective, whole, c.params, c.acts,
                    module_costs(ctx, c.kind, fwd))


def layer_sum(k: dict[str, KindCost], counts: dict[str, np.ndarray | float], value: Callable[[KindCost], Any]
              ) -> Any:
    """Σ over the layer kinds of ``counts[kind] · value(cost of one layer of kind)``."""
    total: Any = 0.0
    for kind, n in counts.items():
        if kind in k and kind in LAYER_KINDS:
            total = total + n * value(k[kind])
    return total


def mixer_mean(k: dict[str, KindCost], counts: dict[str, np.ndarray | float], value: Callable[[KindCost], Any]
               ) -> Any:
    """The mean of ``value`` over a stage's token-mixer layers (attention, sliding, chunked, linear, mamba)."""
    mixers = {kind: n for kind, n in counts.items() if kind in k and kind not in ("mlp", "moe")}
    total: Any = sum(n * value(k[kind]) for kind, n in mixers.items())
    return total / np.maximum(sum(mixers.values()), 1.0)


def stage_counts(shape: StageShape) -> dict[str, np.ndarray]:
    """Layers of each kind on a stage."""
    return {kind: shape.count(kind) for kind in LAYER_KINDS}


def model_counts(model: ModelSpec) -> dict[str, float]:
    """Layers of each kind in the whole model."""
    return model_kind_counts(model)


def stage_shapes(ctx: Ctx) -> list[StageShape]:
    """First, heaviest-middle and last stage of each row."""
    L, p = ctx.model.num_layers, ctx.rows.pp.astype(float)
    base, extra = np.floor(L / p), np.mod(L, p)
    middles = np.maximum(p - 2, 0)
    n_mid = base + (extra > 0) * (middles > 0)
    spill = np.maximum(extra - middles, 0)  # extras that did not fit in the middle stages
    n_first = np.where(p == 1, L, base + (spill >= 1))
    n_last = np.where(p == 1, L, base + (spill >= 2))
    return representative_stages(ctx.model, p, n_first, n_mid, n_last)


@dataclass(frozen=True, slots=True)
class ModelFlops:
    """Model FLOPs per trained token (Megatron/PaLM convention) in parts."""

    weights_fwd: float  # 2 per weight a token passes through in the layers
    mixers_fwd: float  # attention scores and context over the keys a query may see, recurrent cores
    attention_fwd: float  # the softmax-attention part of ``mixers_fwd``
    head_fwd: float  # 2·V·h

    @property
    def layers_fwd(self) -> float:
        return self.weights_fwd + self.mixers_fwd

    @property
    def total(self) -> float:
        """Forward and backward (×3) of every part."""
        return 3.0 * (self.layers_fwd + self.head_fwd)


def model_flops_parts(model: ModelSpec, seq_len: int, mtp_layers: int = 0) -> ModelFlops:
    """Model FLOPs per token (Narayanan et al. 2021 App. A; Chowdhery et al. 2022 App. B), per layer kind: 2 per
    active weight, 4·span·a·d per attention layer for scores and context over the keys a query may see (the whole
    sequence, not discounted for causality as Megatron, PaLM and torchtitan count; the window for sliding layers,
    the chunk for chunked ones), the forward core FLOPs of linear-attention and Mamba layers (chunkwise forms),
    2·V·h for the head; training is 3× the forward. Each MTP module counts as one more full-attention layer of the
    last layer's feed-forward kind, its 2h→h projection with enorm, hnorm and final norm (3h) and one more head
    (Megatron-LM d98e8a6 training.py ``num_floating_point_operations``)."""
    from shardplan.costmodel.core import operators as inv
    from shardplan.costmodel.core import recurrent as rec
    from shardplan.models import params as P

    m, counts = model, model_counts(model)
    attn = P.attention_qkv_params(m) + P.attention_out_params(m)
    mixer_params = {"attention": attn, "sliding": attn, "chunked": attn}
    if m.linear_attention is not None:
        mixer_params["linear"] = P.linear_attention_params(m)
    if m.mamba is not None:
        mixer_params["mamba"] = P.mamba_params(m)
    active = sum(counts.get(k, 0.0) * v for k, v in mixer_params.items())
    active += counts["mlp"] * P.mlp_params(m, m.ffn_hidden_size)
    if m.moe is not None:
        moe = m.moe
        per = moe.experts_per_token * P.mlp_params(m, moe.expert_ffn_hidden_size)
        per += moe.num_shared_experts * P.mlp_params(m, moe.shared_ffn) + P.router_params(m)
        active += counts["moe"] * per
    d_att = (m.mla.qk_head_dim + m.mla.v_head_dim) / 2 if m.mla else m.head_size
    spans = sum(counts.get(k, 0.0) * float(inv.mixer_span(m, k, seq_len)) for k in ("attention", "sliding", "chunked"))
    attention = 4.0 * spans * m.num_heads * d_att
    cores = 0.0
    if m.linear_attention is not None:
        cores += counts.get("linear", 0.0) * float(rec.gdn_core_flops(m, 1.0, m.linear_attention.num_value_heads,
                                                                       recurrent=False))
    if m.mamba is not None:
        cores += counts.get("mamba", 0.0) * float(rec.ssd_core_flops(m, 1.0, m.mamba.num_heads, m.mamba.n_groups,
                                                                      recurrent=False))
    if mtp_layers:
        ffn = per if m.moe is not None and m.num_moe_layers else P.mlp_params(m, m.ffn_hidden_size)
        active += mtp_layers * (attn + ffn + 2 * m.hidden_size * m.hidden_size + 3 * m.hidden_size)  # + 3 norms
        attention += mtp_layers * 4.0 * float(inv.mixer_span(m, "attention", seq_len)) * m.num_heads * d_att
    head = (1 + mtp_layers) * 2.0 * m.vocab_size * m.hidden_size
    return ModelFlops(2.0 * active, attention + cores, attention, head)
