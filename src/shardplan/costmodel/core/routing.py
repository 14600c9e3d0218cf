"""Where uniformly routed tokens land among experts, EP ranks and nodes: distinct experts reached, the busiest EP
rank's load, and the distinct ranks or nodes one token's experts fall in (balls into bins; NVIDIA's MoE benchmarks
route uniformly at random: Megatron-Core ``moe_router_force_load_balancing``)."""

from __future__ import annotations

import numpy as np

from shardplan.models.parts import MoESpec

Array = np.ndarray | float


def distinct_experts(num_experts: int, top_k: int, tokens: Array) -> np.ndarray:
    """Expected distinct experts ``tokens`` tokens route to: E·(1 − (1 − k/E)^tokens) (uniform routing: an
    expert misses one token with probability 1 − k/E, independently; the balancing loss targets uniform use)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** np.asarray(tokens, dtype=float))


def ep_imbalance(ep: Array, routed_tokens: Array) -> np.ndarray:
    """Busiest EP rank's token copies over the mean: with ``μ`` copies per rank routed uniformly at random over
    ``ep`` ranks, the maximum load is ``μ + √(2 μ ln ep)`` (balls into bins, Raab & Steger 1998, for μ ≫ ln ep);
    the step waits for the busiest rank. 1 without EP. Serving's engines and training's benchmark runs both route
    this way (Megatron-Core ``moe_router_force_load_balancing``: random router logits per token)."""
    ep = np.asarray(ep, dtype=float)
    mu = np.maximum(np.asarray(routed_tokens, dtype=float), 1.0)
    return np.where(ep > 1, 1.0 + np.sqrt(2.0 * np.log(np.maximum(ep, 1.0)) / mu), 1.0)


def _miss(pool: Array, block: Array, picks: float) -> np.ndarray:
    """Probability that ``picks`` distinct draws from ``pool`` items all miss a given ``block`` of them:
    C(pool − block, picks)/C(pool, picks) = Π_{i<picks} (pool − block − i)/(pool − i)."""
    pool, block = np.asarray(pool, dtype=float), np.asarray(block, dtype=float)
    out = np.ones(np.broadcast(pool, block).shape)
    for i in range(int(picks)):
        out = out * np.clip((pool - block - i) / np.maximum(pool - i, 1.0), 0.0, 1.0)
    return out


def routed_blocks(moe: MoESpec, blocks: Array) -> np.ndarray:
    """Expected distinct blocks one token's top-k experts fall in when the E experts are split into ``blocks``
    equal contiguous blocks (EP ranks, or the nodes of an EP group: Megatron places experts rank by rank), under
    uniform routing (the balancing loss targets it; NVIDIA's MoE benchmarks force it:
    ``moe_router_force_load_balancing``). A block of b experts is missed with probability C(E−b, k)/C(E, k).
    Group-limited routing (DeepSeek-V3 §2.1.2, n_group/topk_group): a block of whole groups is missed when none of
    its g groups is among the M chosen, C(G−g, M)/C(G, M); a block inside a group when its group is not chosen, or
    is and the k experts, spread over the M·E/G experts of the chosen groups, miss it."""
    n = np.asarray(blocks, dtype=float)
    E, k = float(moe.num_experts), float(moe.experts_per_token)
    b = E / n
    miss = _miss(E, b, k)
    G, M = float(moe.num_groups), float(moe.topk_groups)
    if G and M and M < G:
        size = E / G
        whole = (b >= size) & (np.mod(b, size) == 0)
        inside = (b < size) & (np.mod(size, b) == 0)
        miss = np.where(whole, _miss(G, b / size, M),
                        np.where(inside, (1 - M / G) + M / G * _miss(M * size, b, k), miss))
    return n * (1.0 - miss)


def round_robin_blocks(moe: MoESpec, blocks: Array) -> np.ndarray:
    """Mean distinct blocks one token's experts fall in under round-robin routing, the E experts split into
    ``blocks`` equal contiguous blocks: token t takes experts (t·k + j) mod E, j < k (NeMo AutoModel's benchmark gate,
    ``FakeBalancedGate.forward`` at 79d0ccf: ``arange(T·k).view(-1, k) % E``), so its k experts are consecutive and
    fall in as few blocks as their span allows (Qwen3-30B-A3B, 128 experts top-8 on EP 8: one rank, where uniform
    routing reaches 5.34). Exact mean over the E/gcd(E, k) tokens after which the pattern repeats; group-limited
    routing does not apply (the gate ignores groups)."""
    E, k = moe.num_experts, moe.experts_per_token
    n = np.asarray(blocks, dtype=float)
    starts = np.arange(E // np.gcd(E, k)) * k
    experts = (starts[:, None] + np.arange(k)[None, :]) % E  # one row per token of the cycle

    def mean_blocks(nb: float) -> float:
        block = np.floor(experts * nb / E)
        return float(np.mean([len(np.unique(row)) for row in block]))

    values = {float(v): mean_blocks(float(v)) for v in np.unique(n)}
    return np.vectorize(lambda v: values[float(v)], otypes=[float])(n)
