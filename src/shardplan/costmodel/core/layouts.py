"""Layout arithmetic every job shares: divisors of a GPU count, the cluster-size rule, where MoE layers fall, and
the representative pipeline stages (first, heaviest middle, last) of each layout row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def fmt_values(values: list[int], limit: int = 12) -> str:
    """Up to ``limit`` values, comma-separated, with an ellipsis when there are more."""
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", …" if len(values) > limit else "")


def check_gpus(system: SystemSpec, num_gpus: int) -> None:
    """``num_gpus`` must be at most one node or whole nodes, within the system's size."""
    from pydantic import ValidationError

    from shardplan.hardware.spec import Cluster

    try:
        Cluster(system=system, num_gpus=num_gpus)
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise ShardplanError(msg, field="gpus") from None


def moe_layers_before(model: ModelSpec, x: np.ndarray) -> np.ndarray:
    """MoE layers among layer indices [0, x): every ``layer_freq``-th layer from ``first_dense_layers``."""
    moe = model.moe
    if moe is None:
        return np.zeros_like(x)
    count = np.ceil(np.maximum(x - moe.first_dense_layers, 0) / moe.layer_freq)
    return np.minimum(count, model.num_moe_layers)


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

    def count(self, kind: str) -> np.ndarray:
        """Layers of ``kind`` on this stage (embedding and head: 0 or 1)."""
        return {"embedding": self.has_embedding.astype(float), "attention": self.layers, "mlp": self.dense_layers,
                "moe": self.moe_layers, "head": self.has_head.astype(float)}[kind]


def representative_stages(model: ModelSpec, pp: np.ndarray, n_first: np.ndarray, n_mid: np.ndarray,
                          n_last: np.ndarray) -> list[StageShape]:
    """First, heaviest middle and last stage from their layer counts (each framework's split rule is its job's):
    the first holds the embedding, the last the LM head; MoE layers counted from where each stage starts."""
    L, p = model.num_layers, np.asarray(pp, dtype=float)
    one = np.ones_like(p, dtype=bool)
    freq = model.moe.layer_freq if model.moe else 1
    mid_moe = np.minimum(np.ceil(n_mid / freq), model.num_moe_layers) if model.moe else np.zeros_like(p)
    last_moe = moe_layers_before(model, np.full_like(p, L)) - moe_layers_before(model, L - n_last)
    return [StageShape("first", np.zeros_like(p), n_first, moe_layers_before(model, n_first), one, p == 1, one),
            StageShape("middle", np.minimum(1.0, p - 1), n_mid, mid_moe, ~one, ~one, p > 2),
            StageShape("last", p - 1, n_last, last_moe, p == 1, one, p > 1)]
