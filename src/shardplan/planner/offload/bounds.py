"""Bounds for the offload search: which knob rows can fit at all, a greedy placement per row (an upper bound),
and a Lagrangian lower bound per row (so rows that cannot beat the best plan are never handed to CP-SAT).

Everything here reads the cost table's linear forms only; no physics is computed.
"""

from __future__ import annotations

import itertools

import numpy as np

from shardplan.costmodel.offload.evaluate import evaluate
from shardplan.costmodel.offload.policy import CPU, DISK, GPU, OffloadObjective
from shardplan.costmodel.offload.terms import OffloadTable


def score(table: OffloadTable, total_s: np.ndarray, objective: OffloadObjective) -> np.ndarray:
    """Seconds per generated token (throughput) or seconds per block (latency); lower is better."""
    if objective == OffloadObjective.LATENCY:
        return total_s
    return total_s / table.knobs.block


def min_footprint_fits(table: OffloadTable) -> np.ndarray:
    """Rows where every memory constraint can hold on its own (each class on its cheapest tier)."""
    least = table.mem_const + table.mem_coef.min(axis=-1).sum(axis=-1)
    return np.all(least <= table.capacity, axis=-1)


def provably_infeasible(table: OffloadTable, *, steps: int = 8) -> np.ndarray:
    """Rows where no placement fits, certified by Farkas-style multipliers μ ≥ 0 on the capacity rows: if
    Σ_j μ_j (M0_j − cap_j)/cap_j + Σ_c min_t Σ_j μ_j M_j[c,t]/cap_j > 0, every x breaks some capacity.
    μ runs over a grid of the simplex (``steps`` parts per unit)."""
    J = table.mem_const.shape[1]
    cap = np.maximum(table.capacity, 1.0)
    mu = np.array([c for c in itertools.product(range(steps + 1), repeat=J) if sum(c) == steps], float) / steps
    m0 = (table.mem_const - table.capacity) / cap  # (R, J)
    M = table.mem_coef / cap[None, :, None, None]
    inner = np.einsum("gj,rjct->rgct", mu, M).min(axis=-1).sum(axis=-1)  # (R, G)
    return (np.einsum("gj,rj->rg", mu, m0) + inner > 0).any(axis=1)


# --- greedy placements (upper bounds) --------------------------------------------------------------------
def _greedy(table: OffloadTable, gpu_order: tuple[int, ...], disk_order: tuple[int, ...], step: int) -> np.ndarray:
    """Start with everything in CPU memory; move each class (in ``gpu_order``) to the GPU as far as the GPU
    constraints allow, then move classes (in ``disk_order``) to disk until CPU memory fits. Grid of ``step``%."""
    R = len(table)
    q = step / 100
    x = np.zeros((R, 3, 3))
    x[:, :, CPU] = 1.0
    mem = table.mem_const + np.einsum("rjct,rct->rj", table.mem_coef, x)
    cap = table.capacity
    for c in gpu_order:
        slope = table.mem_coef[:, :2, c, GPU] - table.mem_coef[:, :2, c, CPU]  # per unit moved, GPU constraints
        room = np.where(slope > 0, (cap[:2] - mem[:, :2]) / np.where(slope > 0, slope, 1), np.inf).min(axis=1)
        move = np.clip(np.floor(np.maximum(room, 0) / q + 1e-9) * q, 0, x[:, c, CPU])
        x[:, c, CPU] -= move
        x[:, c, GPU] += move
        mem = table.mem_const + np.einsum("rjct,rct->rj", table.mem_coef, x)
    for c in disk_order:
        slope = table.mem_coef[:, 2, c, CPU] - table.mem_coef[:, 2, c, DISK]  # CPU bytes freed per unit
        excess = mem[:, 2] - cap[2]
        need = np.where(slope > 0, np.ceil(np.maximum(excess, 0) / np.where(slope > 0, slope, 1) / q - 1e-9) * q, 0)
        move = np.clip(need, 0, x[:, c, CPU])
        x[:, c, CPU] -= move
        x[:, c, DISK] += move
        mem = table.mem_const + np.einsum("rjct,rct->rj", table.mem_coef, x)
    return np.round(x, 6)


def greedy_placements(table: OffloadTable, step: int, objective: OffloadObjective) -> tuple[np.ndarray, np.ndarray]:
    """The best of several greedy placements per row, and its score (inf where none fits)."""
    best_x = np.zeros((len(table), 3, 3))
    best_x[:, :, CPU] = 1.0
    best = np.full(len(table), np.inf)
    for gpu_order in itertools.permutations(range(3)):
        for disk_order in ((2, 1, 0), (1, 0, 2), (0, 1, 2)):
            x = _greedy(table, gpu_order, disk_order, step)
            cost = evaluate(table, x)
            s = np.where(cost.fits, score(table, cost.total_s, objective), np.inf)
            better = s < best
            best = np.where(better, s, best)
            best_x[better] = x[better]
    return best_x, best


# --- Lagrangian lower bounds -----------------------------------------------------------------------------
# Every row's problem is a small LP once percents are relaxed to fractions: minimise Σ_k w_k·m_k subject to
# m_k ≥ A_kl(x) (lanes l of iteration k), M_j(x) ≤ cap_j and x in a simplex per class. For multipliers
# φ_k (a distribution over lanes, since max ≥ any convex combination) and λ_j ≥ 0 (capacities), weak
# duality gives, for every x that fits,
#     T(x) ≥ g(φ, λ) = Σ_k w_k Σ_l φ_kl B_kl + Σ_j λ_j (M0_j − cap_j) + Σ_c min_t (a(φ, λ)[c, t])
# with a(φ, λ)[c, t] = Σ_kl w_k φ_kl A_kl[c, t] + Σ_j λ_j M_j[c, t]: the minimum over x splits by class and
# lands on a vertex. Any (φ, λ) gives a valid bound; we improve them by projected subgradient ascent
# (Polyak steps towards the row's greedy upper bound), vectorised over rows, and keep the best value seen.
def _project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of the last axis onto the probability simplex (Duchi et al. 2008, Fig. 1)."""
    u = -np.sort(-v, axis=-1)
    css = np.cumsum(u, axis=-1) - 1
    k = np.arange(1, v.shape[-1] + 1)
    rho = ((u - css / k) > 0).astype(int) * k
    rho = rho.max(axis=-1)
    theta = np.take_along_axis(css, (rho - 1)[..., None], axis=-1) / rho[..., None]
    return np.maximum(v - theta, 0.0)


def lower_bounds(table: OffloadTable, x_ref: np.ndarray, upper: np.ndarray, *, iterations: int = 60) -> np.ndarray:
    """A lower bound on each row's least run time over placements that fit (``upper``: a known run time, or
    inf); φ starts at the lanes that bind at ``x_ref``."""
    R = len(table)
    w = np.broadcast_to(table.weight[:, :, None, :], table.lane_const.shape[:-1]).reshape(R, -1)  # (R, k)
    B = table.lane_const.reshape(R, w.shape[1], -1)  # (R, k, l)
    A = table.lane_coef.reshape(R, *B.shape[1:], 3, 3)  # (R, k, l, c, t)
    m0 = table.mem_const - table.capacity  # (R, j)
    M = table.mem_coef
    lanes = B + np.einsum("rklct,rct->rkl", A, x_ref)
    phi = (lanes >= lanes.max(axis=-1, keepdims=True)).astype(float)
    phi /= phi.sum(axis=-1, keepdims=True)
    lam = np.zeros_like(m0)
    best = np.full(R, -np.inf)
    for _ in range(iterations):
        a = np.einsum("rk,rkl,rklct->rct", w, phi, A) + np.einsum("rj,rjct->rct", lam, M)
        vertex = np.zeros((R, 3, 3))
        np.put_along_axis(vertex, a.argmin(axis=-1)[..., None], 1.0, axis=-1)
        g = np.einsum("rk,rkl,rkl->r", w, phi, B) + np.einsum("rj,rj->r", lam, m0) + a.min(axis=-1).sum(axis=-1)
        best = np.maximum(best, g)
        g_phi = w[..., None] * (B + np.einsum("rklct,rct->rkl", A, vertex))
        g_phi -= g_phi.mean(axis=-1, keepdims=True)
        g_lam = np.einsum("rjct,rct->rj", M, vertex) + m0
        g_lam = np.where((lam <= 0) & (g_lam < 0), 0.0, g_lam)
        gap = np.maximum(np.where(np.isfinite(upper), upper, 2 * np.abs(g) + 1) - g, 0.0)
        phi = _project_simplex(phi + (0.5 * gap / np.maximum((g_phi**2).sum(axis=(1, 2)), 1e-300))[:, None, None]
                               * g_phi)
        lam = np.maximum(0.0, lam + (0.5 * gap / np.maximum((g_lam**2).sum(axis=1), 1e-300))[:, None] * g_lam)
    return best
