"""Continuous batching in steady state: what a vLLM-V1 / SGLang / TensorRT-LLM scheduler runs step after step.

The scheduler (vLLM ``v1/core/sched/scheduler.py``: running requests first, then waiting ones) gives every
step a token budget ``C = max_num_batched_tokens``: one token for each decoding sequence, the rest to prefill
chunks of waiting prompts, at most ``max_num_seqs = B`` sequences in flight per replica. With pipeline
parallelism the B slots are split over ``m = min(B, pp)`` micro-batches in flight (one per virtual engine).

Steady state of one micro-batch (flow balance over equal requests of P prompt and G output tokens): ``r``
requests finish per step, so every step carries ``d = r·(G−1)`` decode tokens and ``p = r·P`` prefill tokens;
the first output token comes from the last prefill chunk.

- Saturation (no arrival rate): ``r = min(C/(P+G−1), b/(G−1+k₀))`` — the token budget or the slots (Little's
  law: ``b = B/m`` slots each held for G−1 decode steps and ``k₀ = ⌈P/C⌉`` prefill steps) binds.
- Offered load λ req/s (Poisson) per deployment, λ/replicas per replica: ``r = λ_r·round/m`` solved by
  fixed-point iteration from the saturated step (monotone from above, so the load is never under-stated).

Every step is one mixed forward pass (``Step``): ``d`` decodes at the mean context ``P + G/2`` plus, in the steps
that carry prefill, a prompt chunk (causal pairs) — decode steps are slowed by the chunks they share and chunks by
the decodes. When at least one prompt arrives per step every step carries ``r`` prompts' tokens; when fewer do,
a share ``f = r·P / min(P, C − d)`` of the steps carries a whole chunk and the rest decode only
(``prefill_steps``), and the average step is priced as that mix of the two (``steps.blend``): a compute-bound
prompt does not hide under the weight streaming of the decode steps around it.

Per request: TPOT is one average round (every micro-batch advances once); TTFT is waiting for the step in progress
(half an average round), ``k = ⌈P/(C − d)⌉`` prefill chunks in steps that carry prefill (the last one passing
through every stage), and — under
an offered load — queueing for admission: an M/D/1 queue whose server is the replica's saturation capacity
μ (requests/s), mean wait ``ρ/(2μ(1−ρ))`` with ``ρ = λ_r/μ`` (Pollaczek–Khinchine, deterministic service).
**The TTFT/TPOT limits bound these means under Poisson arrivals** (``--slo-statistic p90`` bounds TTFT's 90th
percentile instead, ``wait_quantile``; TPOT is one deterministic step either way). At saturation TTFT counts
from admission (an open queue beyond capacity grows without bound). ``ρ ≥ 1`` marks a replica that cannot keep up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.steps import PhaseTimes, StageShape, beat, blend, phase_times
from shardplan.models.spec import ModelSpec

FIXED_POINT_ITERATIONS = 4  # r = λ·round(r)/m: the round changes by < 1e-3 after 3 iterations in practice


@dataclass(frozen=True, slots=True)
class SteadyState:
    """One micro-batch's average step, per row."""

    step: PhaseTimes
    round_s: np.ndarray  # every micro-batch advances once: TPOT
    pass_s: np.ndarray  # one step from the first stage to the last
    finishes: np.ndarray  # r: requests finishing per micro-batch step
    decodes: np.ndarray  # d: decode tokens per step
    prefill_tokens: np.ndarray  # p: prefill tokens per step
    chunks: np.ndarray  # k: steps one prompt's prefill spans
    capacity_rps: np.ndarray  # saturation capacity of one replica, requests/s
    ttft_s: np.ndarray
    queue_s: np.ndarray  # mean wait for admission (0 at saturation)
    ttft_p90_s: np.ndarray  # 90th percentile: the wait's p90 (``wait_quantile``) instead of its mean
    utilisation: np.ndarray  # ρ = λ_r / μ (1 at saturation)
    tokens_per_s: np.ndarray  # output tokens/s of all replicas


def wait_quantile(mean_wait: np.ndarray, rho: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile of the M/D/1 wait from its mean: a request waits with probability ρ, and the wait of
    those who wait is close to exponential with mean ``E[W]/ρ`` (Kingman's heavy-traffic approximation for the
    GI/G/1 queue, 1962), so ``P(W > t) ≈ ρ·exp(−ρt/E[W])`` and the quantile is ``E[W]/ρ · ln(ρ/(1−q))`` (0 when
    ρ ≤ 1 − q: that share of requests never waits)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean_wait / rho * np.log(np.maximum(rho / (1 - q), 1.0))
    return np.where(rho >= 1, np.inf, np.where(rho > 0, t, 0.0))


def mixed_step(model: ModelSpec, r: np.ndarray, prompt: int, gen: int, k0: np.ndarray,
               prompts: np.ndarray | None = None) -> O.Step:
    """A step with ``r·(G−1)`` decodes at the mean context and the prefill of ``prompts`` prompts' worth of tokens
    (default ``r``: the average step) of causal prompts.

    Prefill chunks re-read the KV of their prompt's earlier chunks (``(k₀+1)/2`` reads per prompt token on
    average). MLA runs decode attention over the latent (``2·r_kv + d_rope`` per pair) and prefill over
    decompressed heads (``d_qk + d_v``): decode pairs are converted to prefill-equivalent pairs.
    """
    n = r if prompts is None else prompts
    d = r * (gen - 1)
    ctx = prompt + gen / 2
    dec_pairs = d * ctx
    if model.mla is not None:
        m = model.mla
        dec_pairs = dec_pairs * (2 * m.kv_lora_rank + m.qk_rope_head_dim) / (m.qk_head_dim + m.v_head_dim)
    pre_pairs = n * prompt * (prompt + 1) / 2
    kv_read = d * ctx + n * prompt * (k0 + 1) / 2
    return O.Step("prefill", d + n * prompt, dec_pairs + pre_pairs, kv_read, d + n)


def prefill_steps(r: np.ndarray, prompt: int, gen: int, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """``(f, n)``: the share of steps that carry prefill and the prompts' worth of tokens each of them carries.

    A step admits the prefill that is waiting, in chunks of at most the budget the decodes leave (``C − d``):
    when ``r ≥ 1`` prompt arrives per step every step carries ``r`` prompts (``f = 1``, the average step);
    when fewer do, the prompt of a request admitted as another finishes runs in its own steps, ``min(P, C − d)``
    tokens each, and the other steps decode only (``f = r·P / min(P, C − d)``). Pricing the average of the
    two kinds of step rather than one step of the average mix matters where they differ in kind: a 20,000-token
    prompt is compute-bound while the decode steps around it stream weights and KV."""
    room = np.maximum(budget - r * (gen - 1), 1.0)
    chunk = np.minimum(room, np.maximum(float(prompt), r * prompt))
    f = np.minimum(r * prompt / chunk, 1.0)
    return f, chunk / prompt


def _times(ph: PhaseTimes, shapes: list[StageShape], pp: np.ndarray, micro: np.ndarray, host_s: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(round, pass) of a step: every micro-batch advancing once; one step from the first stage to the last."""
    hop = np.where(pp > 1, ph.p2p_s, 0.0)
    rnd = np.maximum(ph.total_s + pp * hop, micro * (beat(ph, shapes) + hop)) + micro * host_s
    return rnd, ph.total_s + (pp - 1) * hop + host_s


def _round(ctx: O.InferCtx, shapes: list[StageShape], tp: np.ndarray, pp: np.ndarray, micro: np.ndarray,
           r: np.ndarray, prompt: int, gen: int, budget: int, k0: np.ndarray, host_s: float
           ) -> tuple[PhaseTimes, np.ndarray, np.ndarray, np.ndarray]:
    """The average step (``blend`` of the steps with and without prefill), its round, and the round and pass of
    a step that carries prefill (the steps a prompt's own chunks ride in)."""
    f, n = prefill_steps(r, prompt, gen, budget)
    with_prefill = phase_times(ctx, mixed_step(ctx.model, r, prompt, gen, k0, n), shapes, tp, pp)
    rnd_pre, pass_pre = _times(with_prefill, shapes, pp, micro, host_s)
    if np.all(f >= 1.0):
        return with_prefill, rnd_pre, rnd_pre, pass_pre
    decode_only = phase_times(ctx, mixed_step(ctx.model, r, prompt, gen, k0, 0.0 * r), shapes, tp, pp)
    ph = blend(with_prefill, decode_only, f, mixed_step(ctx.model, r, prompt, gen, k0))
    rnd, _ = _times(ph, shapes, pp, micro, host_s)
    return ph, rnd, rnd_pre, pass_pre


def steady_state(ctx: O.InferCtx, shapes: list[StageShape], *, tp: np.ndarray, pp: np.ndarray, replicas: np.ndarray,
                 batch: np.ndarray, budget: int, prompt: int, gen: int, request_rate: float | None,
                 host_s: float = 0.0) -> SteadyState:
    """The steady state of every row (see the module doc); ``request_rate`` in requests/s over all replicas;
    ``host_s`` the engine's host time per step that the GPU waits for (``engines.STEP_HOST_GAP_S``)."""
    B, ppf = batch.astype(float), pp.astype(float)
    micro = np.minimum(B, ppf)
    slots = B / micro
    k0 = np.full_like(B, float(-(-prompt // budget)))
    r_sat = np.minimum(budget / (prompt + gen - 1), slots / (gen - 1 + k0))
    ph, rnd, rnd_pre, pass_s = _round(ctx, shapes, tp, ppf, micro, r_sat, prompt, gen, budget, k0, host_s)
    capacity = micro * r_sat / rnd
    r = r_sat
    if request_rate is None:
        lam = capacity
        rho = np.ones_like(B)
        queue = np.zeros_like(B)
        tps = replicas * capacity * gen
    else:
        lam = request_rate / replicas.astype(float)
        rho = lam / capacity
        for _ in range(FIXED_POINT_ITERATIONS):
            r = np.minimum(lam * rnd / micro, r_sat)
            ph, rnd, rnd_pre, pass_s = _round(ctx, shapes, tp, ppf, micro, r, prompt, gen, budget, k0,
                                              host_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            queue = np.where(rho < 1, rho / (2 * capacity * (1 - rho)), np.inf)
        tps = replicas * np.minimum(lam, capacity) * gen
    d = r * (gen - 1)
    chunks = np.maximum(np.ceil(prompt / np.maximum(budget - d, 1.0)), 1.0)
    service = rnd / 2 + (chunks - 1) * rnd_pre + pass_s
    ttft = queue + service
    p90 = wait_quantile(queue, rho, 0.9) + service
    return SteadyState(step=ph, round_s=rnd, pass_s=pass_s, finishes=r, decodes=d, prefill_tokens=r * prompt,
                       chunks=chunks, capacity_rps=capacity, ttft_s=ttft, queue_s=queue, ttft_p90_s=p90,
                       utilisation=rho, tokens_per_s=tps)
