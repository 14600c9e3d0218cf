"""Rows of a sweep from the planned results: time to train, GPU-hours, cost, scaling efficiency, the cost/time
frontier with the cheapest point for a deadline, and the smallest serving fleet for a request rate.

Definitions (``tps`` = the plan's ``metrics.tokens_per_s``, ``n`` = GPUs of the point, ``p`` = $ per GPU-hour):

- training: ``time_to_train_s = tokens / tps``; ``gpu_hours = n · time_to_train_s / 3600``;
  ``cost.run_usd = p · gpu_hours``; ``cost.usd_per_million_tokens = p · n / 3600 / tps · 10⁶``.
- serving: the demand is ``request_rate · gen_len`` output tokens/s. A deployment of n GPUs runs
  ``tps = replicas · batch · gen_len / e2e_latency`` at its planned batch, within the TTFT/TPOT limits the
  planner enforced. It *meets* the rate when ``tps ≥ demand``; ``copies = ⌈demand / tps⌉`` deployments
  meet it together (replicas scale throughput), using ``fleet_gpus = copies · n`` GPUs. The minimum for a
  hardware is the least ``fleet_gpus`` over its GPU grid (ties: the smaller deployment).
  ``cost.usd_per_million_tokens = p · n / 3600 / tps · 10⁶`` (at full load).
- scaling efficiency: ``(tps / n) / (tps₀ / n₀)`` along each series that differs only in n, against the
  series' smallest n that has a plan.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from shardplan.sweep.points import Expansion
from shardplan.sweep.prices import PriceFile

_EMPTY = {"status": "infeasible", "suggestions": [], "solver_status": "not run", "plan": None, "metrics": None,
          "memory": None}


def _tps(row: dict[str, Any]) -> float | None:
    m = row.get("metrics")
    return m["tokens_per_s"] if m and m.get("tokens_per_s") else None


def base_rows(exp: Expansion, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point: its labels, then the planned result of its request (shared by equal requests)."""
    rows = []
    for p in exp.points:
        res = dict(_EMPTY, reason=p.reason) if p.key is None else results[p.key]
        rows.append({**p.labels, "status": res["status"], "reason": res.get("reason"),
                     "suggestions": list(res.get("suggestions") or []), "solver_status": res["solver_status"],
                     "plan": res["plan"], "metrics": res["metrics"], "memory": res["memory"]})
    return rows


def _price(prices: PriceFile | None, row: dict[str, Any]) -> float | None:
    if prices is None:
        return None
    entry = prices.lookup(row["hardware"], row["gpu"])
    return entry.usd_per_gpu_hour if entry else None


def per_million(price: float, n: int, tps: float) -> float:
    """Dollars per million tokens: n GPUs at ``price`` $/GPU-hour producing ``tps`` tokens/s."""
    return price * n / 3600.0 / tps * 1e6


def add_training(rows: list[dict[str, Any]], *, tokens: float | None, prices: PriceFile | None) -> None:
    """Time to train, GPU-hours and cost on every training row (None where there is no plan)."""
    for row in rows:
        tps, n, p = _tps(row), row["num_gpus"], _price(prices, row)
        if tokens is not None:
            row["time_to_train_s"] = tokens / tps if tps else None
            row["gpu_hours"] = n * row["time_to_train_s"] / 3600.0 if tps else None
        if prices is not None:
            cost: dict[str, Any] = {"usd_per_gpu_hour": p,
                                    "usd_per_million_tokens": per_million(p, n, tps) if tps and p else None}
            if tokens is not None:
                cost["run_usd"] = p * row["gpu_hours"] if tps and p else None
            row["cost"] = cost


def add_serving(rows: list[dict[str, Any]], *, prices: PriceFile | None) -> None:
    """Demand, whether one deployment meets it, the fleet that does, and cost on every serving row."""
    for row in rows:
        tps, n, p, rate = _tps(row), row["num_gpus"], _price(prices, row), row.get("request_rate")
        if rate is not None:
            demand = rate * row["gen_len"]
            row["demand_tokens_per_s"] = demand
            row["meets_rate"] = bool(tps and tps >= demand)
            row["copies"] = max(1, math.ceil(demand / tps * (1 - 1e-12))) if tps else None
            row["fleet_gpus"] = row["copies"] * n if tps else None
        if prices is not None:
            cost: dict[str, Any] = {"usd_per_gpu_hour": p, "usd_per_hour": p * n if p else None,
                                    "usd_per_million_tokens": per_million(p, n, tps) if tps and p else None}
            if rate is not None:
                cost["fleet_usd_per_hour"] = p * row["fleet_gpus"] if tps and p else None
            row["cost"] = cost


def _series(row: dict[str, Any], skip: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple((k, row[k]) for k in ("hardware", "model", "dtype", "seq_len", "global_batch", "prompt_len",
                                       "gen_len", "request_rate") if k in row and k not in skip)


def add_scaling(rows: list[dict[str, Any]]) -> None:
    """``scaling_efficiency`` along each series that differs only in the GPU count."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[_series(row, ())].append(row)
    for group in groups.values():
        planned = [r for r in group if _tps(r)]
        ref = min(planned, key=lambda r: r["num_gpus"], default=None)
        for r in group:
            tps = _tps(r)
            r["scaling_efficiency"] = (tps / r["num_gpus"]) / (_tps(ref) / ref["num_gpus"]) if tps and ref else None


def _y(row: dict[str, Any]) -> float | None:
    cost = row.get("cost")
    return cost.get("run_usd") if cost else row.get("gpu_hours")


def add_frontier(rows: list[dict[str, Any]], *, deadline_s: float | None) -> list[dict[str, Any]]:
    """Mark the time/cost Pareto front per model (cost = run_usd, or GPU-hours without prices) and, with a
    deadline, the cheapest row that finishes in time; returns those picks (one per model that has one)."""
    picks = []
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        row["pareto"] = False
        if deadline_s is not None:
            row["deadline_pick"] = False
        if row.get("time_to_train_s") is not None and _y(row) is not None:
            groups[row["model"]].append(row)
    for group in groups.values():
        for r in group:
            t, y = r["time_to_train_s"], _y(r)
            r["pareto"] = not any(o["time_to_train_s"] <= t and _y(o) <= y and (o["time_to_train_s"] < t or _y(o) < y)
                                  for o in group)
        if deadline_s is not None:
            ok = [r for r in group if r["time_to_train_s"] <= deadline_s]
            if ok:
                best = min(ok, key=lambda r: (_y(r), r["time_to_train_s"]))
                best["deadline_pick"] = True
                picks.append(best)
    return picks


def min_fleets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per series (all but the GPU count), the row needing the fewest GPUs: least ``fleet_gpus`` with a request
    rate, else the least GPUs with a feasible plan; marks it ``min_gpus_pick``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        row["min_gpus_pick"] = False
        groups[_series(row, ())].append(row)
    picks = []
    for group in groups.values():
        ok = [r for r in group if _tps(r)]
        if not ok:
            continue
        best = min(ok, key=lambda r: (r.get("fleet_gpus") or r["num_gpus"], r["num_gpus"]))
        best["min_gpus_pick"] = True
        picks.append(best)
    return picks
