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
    """``num_gpus`` must be at most one node or whole nodes, within the system's size; on a rack-scale NVLink
    system (``gpus_per_tray``), whole trays, and ``system`` laid out for the job (``hardware.domains.job_system``)
    so that its node is the NVLink domain the job uses."""
    from pydantic import ValidationError

    from shardplan.hardware.domains import job_system
    from shardplan.hardware.spec import Cluster

    laid = job_system(system, num_gpus)
    if laid.gpus_per_node != system.gpus_per_node:  # a caller that skipped the layout would cost the wrong fabric
        d = laid.gpus_per_node
        raise ShardplanError(f"gpus ({num_gpus}): {system.name} runs them as {num_gpus // d} NVLink domains of {d}, "
                             f"which this command does not lay out (use ≤ {system.gpus_per_node} GPUs or whole "
                             f"multiples of {system.gpus_per_node} here)", field="gpus")
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


# Layer kinds a stage is made of: the token mixers (``Mixer`` F, S, C, L, M; MLP-only 'N' layers have none) and
# the feed-forwards (dense, MoE; MLP-less layers have none).
MIXER_KINDS = {"F": "attention", "S": "sliding", "C": "chunked", "L": "linear", "M": "mamba"}
LAYER_KINDS = (*MIXER_KINDS.values(), "mlp", "moe")


@dataclass(frozen=True, slots=True)
class StageShape:
    """Layer counts of one representative stage, per row (``exists`` is False where it is not distinct);
    ``kinds`` holds the layers of each kind in ``LAYER_KINDS`` (absent: none)."""

    name: str
    index: np.ndarray  # stage index 0..pp-1
    layers: np.ndarray
    moe_layers: np.ndarray
    has_embedding: np.ndarray
    has_head: np.ndarray
    exists: np.ndarray
    kinds: dict[str, np.ndarray]

    @property
    def dense_layers(self) -> np.ndarray:
        return self.kinds.get("mlp", np.zeros_like(self.layers))

    def count(self, kind: str) -> np.ndarray:
        """Layers of ``kind`` on this stage (embedding and head: 0 or 1)."""
        if kind == "embedding":
            return self.has_embedding.astype(float)
        if kind == "head":
            return self.has_head.astype(float)
        if kind not in LAYER_KINDS:
            raise ValueError(f"unknown layer kind {kind}")
        return self.kinds.get(kind, np.zeros_like(self.layers))


def layer_kind_names(model: ModelSpec) -> list[str]:
    """Kinds of ``LAYER_KINDS`` the model has, in that order."""
    mixers = {MIXER_KINDS[m.value] for m in model.mixer_counts() if m.value in MIXER_KINDS}
    slots = {"mlp" if s.value == "d" else "moe" for s in model.mlp_counts() if s.value in ("d", "e")}
    return [k for k in LAYER_KINDS if k in mixers | slots]


def model_kind_counts(model: ModelSpec) -> dict[str, float]:
    """Layers of each kind of ``LAYER_KINDS`` in the whole model (zero for kinds it lacks)."""
    out = dict.fromkeys(LAYER_KINDS, 0.0)
    for m, n in model.mixer_counts().items():
        if m.value in MIXER_KINDS:
            out[MIXER_KINDS[m.value]] += n
    for slot, n in model.mlp_counts().items():
        if slot.value in ("d", "e"):
            out["mlp" if slot.value == "d" else "moe"] += n
    return out


def _prefix_table(model: ModelSpec) -> dict[str, np.ndarray]:
    """Layers of each kind among indices [0, x), for x = 0..L (cumulative counts from the layer pattern)."""
    from shardplan.models.pattern import kind_at, moe_at

    L, moe = model.num_layers, model.moe
    fd, freq = (moe.first_dense_layers, moe.layer_freq) if moe else (0, 1)
    table = {k: np.zeros(L + 1) for k in LAYER_KINDS}
    for i in range(L):
        mixer, slot = kind_at(model.layer_pattern, i, model.default_mixer)
        slot_v = slot.value if slot is not None else ("e" if moe is not None and moe_at(i, fd, freq) else "d")
        for v in table.values():
            v[i + 1] = v[i]
        if mixer.value in MIXER_KINDS:
            table[MIXER_KINDS[mixer.value]][i + 1] += 1
        if slot_v in ("d", "e"):
            table["mlp" if slot_v == "d" else "moe"][i + 1] += 1
    return table


def _window(table: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    lo_i, hi_i = lo.astype(int), hi.astype(int)
    return {k: v[hi_i] - v[lo_i] for k, v in table.items() if v[-1] > 0}


def _heaviest_middle(table: dict[str, np.ndarray], n_first: np.ndarray, n_mid: np.ndarray, n_last: np.ndarray
                     ) -> np.ndarray:
    """Start of the middle window of ``n_mid`` layers, inside the middle stages, with the most full-attention
    layers (then MoE layers): the heaviest middle stage of a hybrid pattern. Searched once per distinct
    (first, middle, last) split: a table's many rows share a few."""
    L = len(table["attention"]) - 1
    weight = table["attention"] * (L + 1) + table["moe"]
    base = L + 1
    for x in (n_first, n_mid, n_last):  # the packed key below holds whole layer counts in [0, L]
        if np.any((np.asarray(x) < 0) | (np.asarray(x) > L)):
            raise ValueError(f"stage layer counts must lie in [0, {L}]")
    key = (np.ravel(n_first).astype(np.int64) * base + np.ravel(n_mid).astype(np.int64)) * base \
        + np.ravel(n_last).astype(np.int64)
    distinct, inverse = np.unique(key, return_inverse=True)
    best = np.zeros(len(distinct))
    for i, k in enumerate(distinct.tolist()):
        a, n, z = k // (base * base), k // base % base, k % base
        starts = np.arange(a, max(L - z - n, a) + 1)
        starts = starts[starts + n <= L]
        if len(starts):
            best[i] = starts[np.argmax(weight[starts + n] - weight[starts])]
    return best[np.ravel(inverse)].reshape(np.shape(n_mid))


def uniform_kinds(model: ModelSpec, layers: np.ndarray, moe_layers: np.ndarray) -> dict[str, np.ndarray]:
    """Layers per kind of a stage of a model without a layer pattern: every layer has the model's token mixer;
    ``moe_layers`` of them an MoE MLP, the rest a dense one."""
    out = {MIXER_KINDS[model.default_mixer.value]: layers, "mlp": layers - moe_layers}
    return out | ({"moe": moe_layers} if model.moe is not None else {})


def representative_stages(model: ModelSpec, pp: np.ndarray, n_first: np.ndarray, n_mid: np.ndarray,
                          n_last: np.ndarray) -> list[StageShape]:
    """First, heaviest middle and last stage from their layer counts (each framework's split rule is its job's):
    the first holds the embedding, the last the LM head; MoE layers counted from where each stage starts. A model
    with a layer pattern counts each kind from the pattern over the stage's layer range; the middle stage is the
    middle window with the most full-attention (then MoE) layers."""
    L, p = model.num_layers, np.asarray(pp, dtype=float)
    one = np.ones_like(p, dtype=bool)
    n_first, n_mid, n_last = (np.asarray(x, dtype=float) + np.zeros_like(p) for x in (n_first, n_mid, n_last))
    if model.layer_pattern is None:
        freq = model.moe.layer_freq if model.moe else 1
        mid_moe = np.minimum(np.ceil(n_mid / freq), model.num_moe_layers) if model.moe else np.zeros_like(p)
        last_moe = moe_layers_before(model, np.full_like(p, L)) - moe_layers_before(model, L - n_last)
        first_moe = moe_layers_before(model, n_first)
        k_first, k_mid, k_last = (uniform_kinds(model, n, moe) for n, moe in
                                  ((n_first, first_moe), (n_mid, mid_moe), (n_last, last_moe)))
    else:
        table = _prefix_table(model)
        start = _heaviest_middle(table, n_first, n_mid, n_last)
        k_first = _window(table, np.zeros_like(p), n_first)
        k_mid = _window(table, start, start + n_mid)
        k_last = _window(table, L - n_last, np.full_like(p, L))
    zero = np.zeros_like(p)
    return [StageShape("first", zero, n_first, k_first.get("moe", zero), one, p == 1, one, k_first),
            StageShape("middle", np.minimum(1.0, p - 1), n_mid, k_mid.get("moe", zero), ~one, ~one, p > 2, k_mid),
            StageShape("last", p - 1, n_last, k_last.get("moe", zero), p == 1, one, p > 1, k_last)]
