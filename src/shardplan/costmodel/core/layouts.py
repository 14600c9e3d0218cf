"""Layout arithmetic every job shares: divisors of a GPU count, the cluster-size rule, where MoE layers fall."""

from __future__ import annotations

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
