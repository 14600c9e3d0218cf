"""What a stage reads of its layers' per-kind costs: each cost summed over the stage's layers (``stages.layer_sum``),
with the embedding and the head where the stage holds them, and the selective recompute module set's terms.

These sums depend on the per-kind costs, the stage's shape and the module set alone, not on the rest of recompute, nor
on ZeRO or offload, so a table's rows that differ only in those share them (``stages.KIND_COLUMNS``; a stage's shape
follows from ``pp``): ``SharedSums`` sums once per group of such rows and spreads the sums to the rows, element for
element the arithmetic of summing on every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from shardplan.costmodel.core.layouts import StageShape
from shardplan.costmodel.training.recompute_modules import module_masks, module_sums, selective_of
from shardplan.costmodel.training.row_trees import map_rows
from shardplan.costmodel.training.space import row_keys
from shardplan.costmodel.training.stages import KindCost, KindTable, layer_sum, mixer_mean, stage_counts

COMM_PARTS = ("comm_tp", "comm_cp", "comm_ep", "host")
_Tree = TypeVar("_Tree")


@dataclass(frozen=True, slots=True)
class StageSums:
    """One representative stage's sums over its layers, per row (what ``step._stage`` reads of the per-kind costs)."""

    fwd: np.ndarray  # forward seconds per microbatch, the embedding and the head included
    bwd: np.ndarray
    # what a full recompute reruns of one layer (``layers.full_rerun_ops``): its forward, less what early stop skips
    mixer_rerun: np.ndarray | float  # a token mixer's, the stage's mixer kinds in proportion
    mlp_rerun: np.ndarray  # one dense MLP layer's
    moe_rerun: np.ndarray | None  # one MoE layer's (None: no MoE)
    # Selective recompute with the row's module set (its change from the default, core attention's rerun:
    # ``recompute_modules.selective_terms``): seconds rerun per microbatch, activation bytes stored per microbatch,
    # and the largest recomputed module's bytes (live during its backward)
    selective_s: np.ndarray
    selective_stored: np.ndarray
    selective_transient: np.ndarray
    dense_params: np.ndarray
    expert_params: np.ndarray
    acts_none: np.ndarray | float  # activation bytes stored per microbatch with nothing recomputed
    save_dense: np.ndarray | float  # bytes a dense layer stores beyond its input (``_stage``)
    save_moe: np.ndarray | float
    layer_unit: np.ndarray  # one layer's parameters on average (ZeRO-3's gathered unit)
    head_params: np.ndarray  # the head's parameters
    embedding_params: np.ndarray


def stage_sums(k: dict[str, KindCost], shape: StageShape, masks: dict[str, np.ndarray], row_shape: tuple[int, ...]
               ) -> StageSums:
    """``StageSums`` of a stage of ``shape`` with per-kind costs ``k``, for rows whose module sets are ``masks``
    (``recompute_modules.module_masks``; ``row_shape``: the rows' shape)."""
    n, counts = shape.layers, stage_counts(shape)
    emb, head = shape.has_embedding, shape.has_head

    def per_layer(attr: str) -> np.ndarray:
        return layer_sum(k, counts, lambda c: getattr(c, attr).time)

    fwd = per_layer("fwd") + emb * k["embedding"].fwd.time + head * k["head"].fwd.time
    bwd = per_layer("bwd") + emb * k["embedding"].bwd.time + head * k["head"].bwd.time
    mlp, moe = k["mlp"], k.get("moe")

    # Parameters held (ZeRO sharding and offload act on them per row: ``step._memory``).
    def params_of(attr: str) -> np.ndarray:
        total = layer_sum(k, counts, lambda c: getattr(c.params, attr))
        return total + emb * getattr(k["embedding"].params, attr) + head * getattr(k["head"].params, attr)

    # Activations: layers storing everything vs. fully recomputed ones.
    def acts(mode: str) -> np.ndarray:
        return layer_sum(k, counts, lambda c: getattr(c.acts, mode))

    mixer_saving = mixer_mean(k, counts, lambda c: c.acts.none - c.acts.full)

    def saving(kind: KindCost | None) -> np.ndarray | float:
        """Bytes one layer (its token mixer + this MLP kind) stores beyond its checkpointed input."""
        if kind is None:
            return 0.0
        return mixer_saving + kind.acts.none - kind.acts.full

    mods = selective_of(module_sums(k, counts, row_shape, masks), masks, row_shape)
    return StageSums(
        fwd=fwd, bwd=bwd, mixer_rerun=mixer_mean(k, counts, lambda c: c.rerun.time), mlp_rerun=mlp.rerun.time,
        moe_rerun=moe.rerun.time if moe else None,
        selective_s=layer_sum(k, counts, lambda c: c.selective.time) + mods.time,
        selective_stored=acts("selective") - mods.freed, selective_transient=mods.transient,
        dense_params=params_of("dense"), expert_params=params_of("expert"), acts_none=acts("none"),
        save_dense=saving(mlp), save_moe=saving(moe),
        layer_unit=layer_sum(k, counts, lambda c: c.params.dense + c.params.expert) / np.maximum(n, 1),
        head_params=k["head"].params.total, embedding_params=k["embedding"].params.total)


def comm_sums(k: dict[str, KindCost], shape: StageShape) -> dict[str, np.ndarray]:
    """Forward plus backward seconds of the stage's layers in each collective dimension and on host syncs
    (``COMM_PARTS``), per microbatch (``train_cost``'s exposed collectives): the layers' and, on the stages that hold
    them, the embedding's and the LM head's (the lookup's reduction, the head's SP gather and loss all-reduces), as
    the stage times count them."""
    counts = stage_counts(shape)

    def both(c: KindCost, a: str) -> np.ndarray:
        return getattr(c.fwd, a) + getattr(c.bwd, a)
    return {attr: layer_sum(k, counts, lambda c, a=attr: both(c, a))
            + shape.has_embedding * both(k["embedding"], attr) + shape.has_head * both(k["head"], attr)
            for attr in COMM_PARTS}


@dataclass(frozen=True, slots=True)
class FlopSums:
    """The whole model's layers (``stages.model_counts``), per row: what ``step._flops`` reads of the per-kind costs."""

    per_mb: np.ndarray  # forward and backward FLOPs per microbatch, the embedding and the head included
    fwd_all: np.ndarray  # the layers' forward FLOPs
    skipped: np.ndarray  # the GEMM FLOPs of those a full recompute does not rerun (``layers.full_rerun_ops``)
    core: np.ndarray | float  # core attention's rerun, as executed
    mods: np.ndarray  # the row's module set's change from the default rerun FLOPs (less core when dropped)


def flop_sums(k: dict[str, KindCost], counts: dict[str, float], masks: dict[str, np.ndarray],
              row_shape: tuple[int, ...]) -> FlopSums:
    """``FlopSums`` of the model's layers (``counts``) with per-kind costs ``k``, for rows whose module sets are
    ``masks``."""
    per_mb = layer_sum(k, counts, lambda c: c.fwd.flops + c.bwd.flops)
    per_mb = per_mb + sum(k[x].fwd.flops + k[x].bwd.flops for x in ("embedding", "head"))
    mods = selective_of(module_sums(k, counts, row_shape, masks), masks, row_shape).flops
    return FlopSums(per_mb, layer_sum(k, counts, lambda c: c.fwd.flops),
                    layer_sum(k, counts, lambda c: c.fwd.flops - c.rerun.flops),
                    layer_sum(k, counts, lambda c: c.selective.flops), mods)


def take_rows(tree: _Tree, idx: np.ndarray, n: int) -> _Tree:
    """Sums computed for ``n`` distinct rows, spread to the rows ``idx`` names (``row_trees.map_rows``)."""
    return map_rows(tree, lambda x: x[idx], n)


@dataclass(frozen=True, slots=True)
class SharedSums:
    """Rows (or pipeline ranks of many layouts) grouped by their per-kind costs (``stages.KindTable`` row), their
    selective module set and the ``keys`` their stages' shapes follow from: each group's sums are summed once, on its
    first entry, and spread to its entries (``sums``, ``spread``)."""

    table: KindTable  # the entries' per-kind costs
    sel: np.ndarray  # the entries' module sets
    kinds: dict[str, KindCost]  # the groups', one entry per group
    masks: dict[str, np.ndarray]  # the groups' module sets (``recompute_modules.module_masks``)
    first: np.ndarray  # per group, its first entry
    inverse: np.ndarray  # per entry, its group

    @classmethod
    def of(cls, table: KindTable, sel: np.ndarray, keys: list[np.ndarray]) -> SharedSums:
        """Entries ``table.index`` (their per-kind costs' rows) with module sets ``sel``, grouped by those and by
        integer ``keys``. A module set's terms read only the modules some entry differs in from the default, so the
        groups' masks are the entries' (every entry's set is its group's)."""
        _, first, inverse = np.unique(row_keys([table.index, sel, *keys]), return_index=True, return_inverse=True)
        return cls(table, sel, table.take(first).expand(), module_masks(sel[first]), first, inverse.ravel())

    def spread(self, tree: _Tree) -> _Tree:
        """Sums of the groups (one entry per group), spread to the entries."""
        return take_rows(tree, self.inverse, len(self.first))

    def sums(self, shape: StageShape) -> StageSums:
        """``stage_sums`` of the entries' stages of ``shape`` (one entry per entry), summed per group. Where the shape
        differs within a group in what the sums read (the keys did not determine it), summed per entry instead."""
        n, entries = len(self.first), len(self.inverse)
        cols = [shape.layers, shape.has_embedding, shape.has_head, *shape.kinds.values()]  # what ``stage_sums`` reads
        if not all(np.ndim(c) == 0 or (np.shape(c) == (entries,) and np.array_equal(c, c[self.first][self.inverse]))
                   for c in map(np.asarray, cols)):
            return stage_sums(self.table.expand(), shape, module_masks(self.sel), (entries,))
        return self.spread(stage_sums(self.kinds, take_rows(shape, self.first, entries), self.masks, (n,)))
