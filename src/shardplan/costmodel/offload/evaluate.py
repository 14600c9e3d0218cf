"""Offloaded generation on one GPU: evaluate placements over the linear forms, and ``estimate_offload``.

``evaluate`` is the float reference: for each row of an ``OffloadTable`` and a placement x (class × tier
fractions) it takes every iteration's slowest lane and sums over iterations, sublayers, layers and steps:

    T = Σ_phase Σ_sublayer weight_first · max_lane(first) + weight_steady · max_lane(steady)
    throughput = block · gen_len / T        (FlexGen's generation throughput, flex_opt.py ``run_flexgen``)

The planner's CP-SAT model uses the same forms in integer units; its choice is re-evaluated here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import bands
from shardplan.costmodel.offload.policy import (
    CLASSES,
    TIERS,
    Capacities,
    Knobs,
    OffloadPolicy,
    OffloadWorkload,
    Placement,
    check_system,
)
from shardplan.costmodel.offload.report import (
    OffloadMemoryOut,
    OffloadMetrics,
    OffloadPlanOut,
    OffloadReport,
    ResourceRow,
    TierMemory,
    TierSplit,
)
from shardplan.costmodel.offload.table import build_offload_table
from shardplan.costmodel.offload.terms import COMPUTE, LANES, MEMORY, OffloadTable
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import format_bytes

RESOURCES = ("gpu", "cpu", *LANES[1:])  # the compute lane splits into the GPU and the host thread


@dataclass(frozen=True, slots=True)
class OffloadCost:
    """Times (s) and memory (bytes) of rows × placements; leading axes follow ``x``."""

    lanes: np.ndarray  # (..., phase, sublayer, iteration, lane): busy time of one iteration
    gpu: np.ndarray  # (..., phase, sublayer, iteration): the GPU's part of the compute lane
    iteration: np.ndarray  # (..., phase, sublayer, iteration): max over lanes
    phase_s: np.ndarray  # (..., phase): whole-run time of each phase
    total_s: np.ndarray
    memory: np.ndarray  # (..., MEMORY)
    fits: np.ndarray


def evaluate(table: OffloadTable, x: np.ndarray) -> OffloadCost:
    """Cost of placement ``x[r]`` (shape (R, 3, 3)) for each row r of the table."""
    x = np.asarray(x, dtype=float)
    lanes = table.lane_const + np.einsum("rpsilct,rct->rpsil", table.lane_coef, x)
    gpu = table.gpu_const + np.einsum("rpsict,rct->rpsi", table.gpu_coef, x)
    mem = table.mem_const + np.einsum("rjct,rct->rj", table.mem_coef, x)
    return _finish(table, lanes, gpu, mem, table.weight)


def evaluate_row(table: OffloadTable, r: int, x: np.ndarray) -> OffloadCost:
    """Cost of many placements ``x`` (shape (M, 3, 3)) for one row r (the brute-force path)."""
    x = np.asarray(x, dtype=float)
    lanes = table.lane_const[r] + np.einsum("psilct,mct->mpsil", table.lane_coef[r], x)
    gpu = table.gpu_const[r] + np.einsum("psict,mct->mpsi", table.gpu_coef[r], x)
    mem = table.mem_const[r] + np.einsum("jct,mct->mj", table.mem_coef[r], x)
    return _finish(table, lanes, gpu, mem, table.weight[r])


def _finish(table: OffloadTable, lanes: np.ndarray, gpu: np.ndarray, mem: np.ndarray,
            weight: np.ndarray) -> OffloadCost:
    it = lanes.max(axis=-1)
    # weight (..., P, iteration) applies to both sublayers
    phase = np.einsum("...psi,...pi->...p", it, np.broadcast_to(weight, (*it.shape[:-3], *weight.shape[-2:])))
    fits = np.all(mem <= table.capacity * (1 + 1e-9), axis=-1)
    return OffloadCost(lanes, gpu, it, phase, phase.sum(axis=-1), mem, fits)


def _split(x: np.ndarray) -> TierSplit:
    return TierSplit(gpu=float(x[0]), cpu=float(x[1]), disk=float(x[2]))


def plan_out(policy: OffloadPolicy) -> OffloadPlanOut:
    x = policy.fractions()
    return OffloadPlanOut(
        gpu_batch_size=policy.gpu_batch_size, num_gpu_batches=policy.num_gpu_batches, block_size=policy.block_size,
        weights=_split(x[0]), kv_cache=_split(x[1]), activations=_split(x[2]), cpu_attention=policy.cpu_attention,
        compression=policy.compress_weights or policy.compress_kv_cache, compress_weights=policy.compress_weights,
        compress_kv_cache=policy.compress_kv_cache, pin_weights=policy.pin_weights)


def _resources(table: OffloadTable, cost: OffloadCost) -> tuple[list[ResourceRow], dict[str, str]]:
    """Busy and binding time of every resource per phase group (prefill; all decode segments together)."""
    w = table.weight[0]  # (P, iteration)
    lanes, gpu, it = cost.lanes[0], cost.gpu[0], cost.iteration[0]
    host = lanes[..., COMPUTE] - gpu
    busy = np.concatenate([gpu[..., None], host[..., None], lanes[..., 1:]], axis=-1)  # (P, s, i, 6)
    arg = lanes.argmax(axis=-1)
    bind = np.zeros_like(busy)
    for k in range(1, len(LANES)):
        bind[..., k + 1] = np.where(arg == k, it, 0.0)
    compute = np.where(arg == COMPUTE, it, 0.0)
    share = np.divide(gpu, lanes[..., COMPUTE], out=np.ones_like(gpu), where=lanes[..., COMPUTE] > 0)
    bind[..., 0], bind[..., 1] = compute * share, compute * (1 - share)
    rows: list[ResourceRow] = []
    bottleneck: dict[str, str] = {}
    for name, sel in (("prefill", slice(0, 1)), ("decode", slice(1, None))):
        if not len(table.phases.names[sel]):
            continue
        tot_busy = np.einsum("psik,pi->k", busy[sel], w[sel])
        tot_bind = np.einsum("psik,pi->k", bind[sel], w[sel])
        for k, res in enumerate(RESOURCES):
            rows.append(ResourceRow(phase=name, resource=res, busy_s=float(tot_busy[k]), binding_s=float(tot_bind[k])))
        bottleneck[name] = RESOURCES[int(np.argmax(tot_bind))]
    return rows, bottleneck


def _memory_out(table: OffloadTable, x: np.ndarray, mem: np.ndarray) -> OffloadMemoryOut:
    """Itemised memory: resident shares per class, and everything else as working buffers."""
    coef, cap = table.mem_coef[0], table.capacity
    gpu_j = 0 if mem[0] >= mem[1] else 1
    tiers = []
    for tier, j in (("gpu", gpu_j), ("cpu", 2), ("disk", 3)):
        t = TIERS.index(tier)
        resident = [float(coef[j, c, t] * x[c, t]) for c in range(3)]
        working = float(mem[j]) - sum(resident)
        if abs(working) <= 1e-9 * abs(float(mem[j])):  # the difference of equal sums: float noise, not bytes
            working = 0.0
        tiers.append(TierMemory(tier=tier, weights_bytes=resident[0], kv_cache_bytes=resident[1],
                                activations_bytes=resident[2], working_bytes=working,
                                total_bytes=float(mem[j]), capacity_bytes=float(cap[j]),
                                phase=MEMORY[j].removeprefix("gpu_") if tier == "gpu" else ""))
    g, c, d = tiers
    return OffloadMemoryOut(
        weights_bytes=g.weights_bytes, activations_bytes=g.activations_bytes, kv_cache_bytes=g.kv_cache_bytes,
        working_bytes=g.working_bytes, total_bytes=g.total_bytes, capacity_bytes=g.capacity_bytes,
        cpu_bytes=c.total_bytes, cpu_capacity_bytes=c.capacity_bytes, disk_bytes=d.total_bytes,
        disk_capacity_bytes=d.capacity_bytes, tiers=tiers)


def report_for(model: ModelSpec, system: SystemSpec, work: OffloadWorkload, policy: OffloadPolicy,
               table: OffloadTable, cost: OffloadCost) -> OffloadReport:
    """The report of row 0 of ``table`` evaluated at ``policy``'s placement."""
    x = policy.fractions()
    N, P, G = policy.block_size, work.prompt_len, work.gen_len
    prefill, decode = float(cost.phase_s[0, 0]), float(cost.phase_s[0, 1:].sum())
    total = prefill + decode
    L = table.geometry.layers
    half = bands.band(system, "offload")
    metrics = OffloadMetrics(
        tokens_per_s=N * G / total, prefill_s=prefill, decode_s=decode, total_s=total,
        prefill_tokens_per_s=N * P / prefill, decode_tokens_per_s=N * (G - 1) / decode if decode else 0.0,
        layer_prefill_s=prefill / L, layer_decode_s=decode / (L * (G - 1)) if G > 1 else 0.0,
        band_pct=None if half is None else 100 * half, tokens_per_s_range=bands.around(N * G / total, half))
    rows, bottleneck = _resources(table, cost)
    return OffloadReport(
        status="feasible" if bool(cost.fits[0]) else "infeasible", model=model.name, hardware=system.name,
        prompt_len=P, gen_len=G, plan=plan_out(policy), metrics=metrics, bottleneck=bottleneck, resources=rows,
        memory=_memory_out(table, x, cost.memory[0]))


def _pct(x: np.ndarray) -> str:
    return ",".join(f"{100 * v:.0f}" for v in x)


def _variants(policy: OffloadPolicy, table: OffloadTable, mem: np.ndarray) -> list[tuple[str, OffloadPolicy]]:
    """Single changes that relieve the over-full tiers: move the smallest sufficient share of one class to
    another tier (solved from the linear memory forms), halve the GPU batch, or compress."""
    x = policy.fractions()
    coef, cap = table.mem_coef[0], table.capacity
    out: list[tuple[str, OffloadPolicy]] = []
    flags = {"weights": "--weights", "kv_cache": "--kv-cache", "activations": "--activations"}
    for j in np.flatnonzero(mem > cap):
        tier = 0 if j < 2 else j - 1
        excess = mem[j] - cap[j]
        for c, cls in enumerate(CLASSES):
            for dest in range(3):
                saving = coef[j, c, tier] - coef[j, c, dest]
                if dest == tier or saving <= 0 or x[c, tier] <= 0:
                    continue
                move = min(x[c, tier], np.ceil(100 * excess / saving) / 100)
                y = x[c].copy()
                y[tier] -= move
                y[dest] += move
                p = policy.model_copy(update={cls: Placement.of(*(y / y.sum()))})  # (shares rounded apart: no sum 1)
                out.append((f"{flags[cls]} {_pct(y)}", p))
    if policy.gpu_batch_size > 1:
        b = policy.gpu_batch_size // 2
        out.append((f"--gpu-batch {b}", policy.model_copy(update={"gpu_batch_size": b})))
    if not policy.compress_weights:
        out.append(("--compress-weights", policy.model_copy(update={"compress_weights": True})))
    if not policy.compress_kv_cache:
        out.append(("--compress-cache", policy.model_copy(update={"compress_kv_cache": True})))
    return out


def _reason(report: OffloadReport) -> str:
    """One sentence naming the first over-full tier and its largest share."""
    for t in report.memory.tiers:
        if t.total_bytes > t.capacity_bytes:
            parts = {"weights": t.weights_bytes, "KV cache": t.kv_cache_bytes, "activations": t.activations_bytes,
                     "buffers": t.working_bytes}
            big = max(parts, key=parts.__getitem__)
            when = f" in {t.phase}" if t.phase else ""
            return (f"{t.tier.upper() if t.tier != 'disk' else 'disk'} memory: needs {format_bytes(t.total_bytes)}"
                    f"{when} > {format_bytes(t.capacity_bytes)} ({big} {format_bytes(parts[big])})")
    return "memory: over capacity"


def estimate_offload(model: ModelSpec, system: SystemSpec, work: OffloadWorkload, policy: OffloadPolicy,
                     caps: Capacities) -> OffloadReport:
    """Cost of one pinned policy; over capacity it is an ``infeasible`` result with the binding tier and fixes."""
    check_system(system)
    table = build_offload_table(model, system, work, Knobs.from_policy(policy), caps)
    cost = evaluate(table, policy.fractions()[None])
    report = report_for(model, system, work, policy, table, cost)
    if report.status == "feasible":
        return report
    variants = _variants(policy, table, cost.memory[0])
    fixes: list[tuple[float, str]] = []
    if variants:
        vt = build_offload_table(model, system, work, Knobs.of(
            gpu_batch=[p.gpu_batch_size for _, p in variants], num_batches=[p.num_gpu_batches for _, p in variants],
            cpu_attention=[p.cpu_attention for _, p in variants],
            compress_weights=[p.compress_weights for _, p in variants],
            compress_kv=[p.compress_kv_cache for _, p in variants],
            pin_weights=[p.pin_weights for _, p in variants]), caps)
        vc = evaluate(vt, np.stack([p.fractions() for _, p in variants]))
        for k, (text, p) in enumerate(variants):
            if vc.fits[k]:
                fixes.append((-p.block_size * work.gen_len / float(vc.total_s[k]), text))
    fixes.sort()
    suggestions = [f"{text} ({-tps:.3g} tokens/s)" for tps, text in fixes[:4]]
    suggestions.append("`shardplan offload` chooses a placement that fits")
    return report.model_copy(update={"reason": _reason(report), "suggestions": suggestions})
