"""KV-cache capacity of a hybrid model, the way vLLM v1's hybrid KV-cache manager allocates it.

vLLM (vllm/v1/core/kv_cache_utils.py and vllm/v1/kv_cache_interface.py at commit
001cabc1be16a59a70d720ed61a13b678c060a18):

1. Layers are typed by their cache spec: full attention, sliding window (one type per window), chunked local
   attention, and the recurrent (Mamba-style) state of linear-attention and Mamba layers.
2. ``_get_kv_cache_groups_uniform_page_size``: the group size G is the fewest layers of any type (the largest when
   that is under 1.5× the fewest); a type of n layers forms ⌈n/G⌉ groups, its layers dealt round robin
   (``layers[i::num_groups]``), the last group padded. A model of one type is one group of all its layers.
3. ``get_kv_cache_config_from_groups``: per worker (pipeline stage) the pool is split into G_w tensors, G_w the
   largest group on that worker; ``num_blocks = available // page_size // G_w`` with ``page_size = block_size ·
   bytes per token of one layer``. All groups draw their blocks from that one pool.
4. ``_report_kv_cache_config`` logs "GPU KV cache size: num_blocks // len(groups) · block_size tokens".
5. A request of ``n`` tokens takes, per group, ``⌈n/bs⌉`` blocks (full), ``⌈min(w − 1 + max_num_batched_tokens,
   n)/bs⌉ + 1`` (sliding window w), ``⌈min(c + max_num_batched_tokens, n)/bs⌉`` (chunk c); vLLM's maximum
   concurrency is ``num_blocks / Σ_groups blocks`` (``get_max_concurrency_for_kv_cache_config``).

Recurrent state: vLLM enlarges the attention block until one page holds a layer's state and keeps one page per
sequence and recurrent group; here the state takes ⌈state/page⌉ pages of the shared pool at the configured block
size (the same bytes when the page was sized to the state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.layouts import StageShape
from shardplan.models.spec import ModelSpec

CACHE_TYPES = ("attention", "sliding", "chunked", "linear", "mamba")
# vLLM's heuristic: one group per type when the largest type has fewer than 1.5× the layers of the smallest.
GROUP_SIZE_SLACK = 1.5


def type_counts(model: ModelSpec) -> dict[str, int]:
    """Layers of each cache type in the whole model (MLP-only layers keep no cache)."""
    names = {"F": "attention", "S": "sliding", "C": "chunked", "L": "linear", "M": "mamba"}
    return {names[m.value]: n for m, n in model.mixer_counts().items() if m.value in names and n}


def group_size(counts: dict[str, int]) -> int:
    """vLLM's G: the fewest layers of any type, or the most when that is under 1.5× the fewest."""
    lo, hi = min(counts.values()), max(counts.values())
    return hi if hi < lo * GROUP_SIZE_SLACK else lo


def groups_per_type(counts: dict[str, int]) -> dict[str, int]:
    g = group_size(counts)
    return {k: math.ceil(n / g) for k, n in counts.items()}


@dataclass(frozen=True, slots=True)
class HybridPool:
    """One stage's pool: vLLM's num_blocks, its groups, and what the report shows."""

    num_blocks: np.ndarray  # blocks of the shared pool (vLLM's num_blocks)
    groups: int  # KV-cache groups of the whole model
    tensors: np.ndarray  # G_w: layers per group on this stage (the pool's tensors)
    page_bytes: np.ndarray  # one block of one layer

    @property
    def reported_blocks(self) -> np.ndarray:
        """Blocks per group as vLLM logs them (× block_size = "GPU KV cache size")."""
        return np.floor(self.num_blocks / self.groups)


def stage_pool(model: ModelSpec, shape: StageShape, kv_layer: np.ndarray, pool_bytes: np.ndarray, block_size: int
               ) -> HybridPool:
    """vLLM's num_blocks for one stage with ``pool_bytes`` free for the cache (rule 3 of the module doc)."""
    counts = type_counts(model)
    per_type = groups_per_type(counts) if counts else {}
    page = block_size * np.asarray(kv_layer, dtype=float)
    tensors = np.zeros_like(page)
    for kind, n_groups in per_type.items():
        tensors = np.maximum(tensors, np.ceil(shape.count(kind) / n_groups))
    blocks = np.floor(np.maximum(pool_bytes, 0.0) / (page * np.maximum(tensors, 1.0)))
    return HybridPool(blocks, max(sum(per_type.values()), 1), tensors, page)


def blocks_per_request(model: ModelSpec, tokens: int, block_size: int, max_num_batched_tokens: int,
                       kv_token_layer_bytes: float, state_nbytes: float) -> float:
    """Σ over the model's groups of the blocks one request of ``tokens`` tokens takes (rule 5), divided by the
    number of groups: blocks in the unit of ``HybridPool.reported_blocks``. ``kv_token_layer_bytes``: one token of
    one attention layer, unsplit (a recurrent state's pages are its bytes over the page: the same ratio on every
    TP rank while the KV heads split evenly)."""
    counts = type_counts(model)
    if not counts:
        return 0.0
    per_type = groups_per_type(counts)
    page = block_size * kv_token_layer_bytes
    total = 0
    for kind, n_groups in per_type.items():
        if kind == "attention":
            need = math.ceil(tokens / block_size)
        elif kind == "sliding":
            assert model.sliding_window is not None
            need = math.ceil(min(model.sliding_window - 1 + max_num_batched_tokens, tokens) / block_size) + 1
        elif kind == "chunked":
            assert model.attention_chunk_size is not None
            need = math.ceil(min(model.attention_chunk_size + max_num_batched_tokens, tokens) / block_size)
        else:
            spec = model.linear_attention if kind == "linear" else model.mamba
            assert spec is not None
            need = math.ceil(spec.state_elements * state_nbytes / page)
        total += n_groups * need
    return total / sum(per_type.values())
