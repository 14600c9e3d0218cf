"""Serving plans explained: the objective knob, the throughput–TPOT frontier, and what to change when
nothing fits or no layout meets the latency targets. """

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shardplan.costmodel.serving.cost import InferCost
    from shardplan.planner.serving.request import InferRequest

# Frontier points closer than this ratio in TPOT share one level (one point per level).
PARETO_LEVEL_RATIO = 1.05


def pareto_front(tpot: np.ndarray, tput: np.ndarray, rank: np.ndarray) -> list[int]:
    """Rows on the (lower TPOT, higher throughput) frontier, one per TPOT level of ratio ``PARETO_LEVEL_RATIO``.

    Sweep rows by increasing TPOT (ties: higher throughput, then rank); a row joins when it beats every
    earlier row's throughput. Within a level the last joiner (the highest throughput) stands for it.
    """
    order = np.lexsort((rank, -tput, tpot))
    front: list[int] = []
    best = -np.inf
    for i in order:
        if tput[i] > best:
            best = float(tput[i])
            front.append(int(i))
    out: list[int] = []
    anchor = np.inf
    for i in front:
        if out and tpot[i] <= anchor * PARETO_LEVEL_RATIO:
            out[-1] = i  # same level: keep its highest-throughput point
        else:
            out.append(i)
            anchor = float(tpot[i])
    return out


def _layout(cost: InferCost, i: int) -> str:
    r = cost.rows
    parts = [f"TP={int(r.tp[i])}", f"PP={int(r.pp[i])}"]
    if int(r.ep[i]) > 1:
        parts.append(f"EP={int(r.ep[i])}")
    return " ".join([*parts, f"replicas={int(r.dp[i])}", f"batch {int(r.batch[i])}"])


def slo_reason(req: InferRequest, cost: InferCost, fits: np.ndarray) -> tuple[str, list[str]]:
    """Layouts fit in memory but none meets the TTFT/TPOT limits: the best achievable of each."""
    lines, fixes = [], []
    if req.max_tpot_s is not None:
        i = int(np.flatnonzero(fits)[np.argmin(cost.tpot_s[fits])])
        best = float(cost.tpot_s[i])
        if best > req.max_tpot_s:
            lines.append(f"TPOT: the fastest decode step of any layout that fits is {best * 1e3:.3g} ms "
                         f"({_layout(cost, i)}) > {req.max_tpot_s * 1e3:g} ms")
            fixes.append(f"--max-tpot-ms {np.ceil(best * 1e4) / 10:g}")
    if req.max_ttft_s is not None:
        i = int(np.flatnonzero(fits)[np.argmin(cost.ttft_s[fits])])
        best = float(cost.ttft_s[i])
        if best > req.max_ttft_s:
            lines.append(f"TTFT: the fastest prefill of any layout that fits is {best * 1e3:.4g} ms "
                         f"({_layout(cost, i)}) > {req.max_ttft_s * 1e3:g} ms")
            fixes.append(f"--max-ttft-ms {np.ceil(best * 1e4) / 10:g}")
    if not lines:  # each limit is reachable alone, not both at once
        lines.append("latency targets: no layout meets the TTFT and TPOT limits together")
        fixes.append("relax --max-ttft-ms or --max-tpot-ms")
    fixes.append("use more GPUs, or shorter prompts (--prompt-len)")
    return "; ".join(lines), fixes


def memory_reason(req: InferRequest, cost: InferCost) -> str:
    """No layout holds one sequence: the leanest layout and what it leaves for the KV cache."""
    pools = np.min(np.stack([np.where(m.shape.exists, m.kv_pool, np.inf) for m in cost.memory]), axis=0)
    i = int(np.argmax(pools))
    need = cost.blocks_per_seq * req.workload.block_size * float(
        np.max([m.kv_token[i] for m in cost.memory if bool(m.shape.exists[i])]))
    return (f"GPU memory: no layout of {req.num_gpus} GPUs holds one sequence of "
            f"{req.workload.prompt_len + req.workload.gen_len} tokens; the leanest ({_layout(cost, i)}) leaves "
            f"{max(float(pools[i]), 0.0) / 2**30:.3g} GiB per GPU for a KV cache that needs {need / 2**30:.3g} GiB")
