"""The sweep figure (matplotlib, the ``plot`` extra): three panels over the GPU count, one line per series
(hardware, model and workload fields other than the GPU count).

- training: time to train (or tokens/s without ``--tokens``) vs GPUs; scaling efficiency vs GPUs; the
  cost/time frontier (run $ with prices, else GPU-hours) with the cheapest point within ``--deadline`` starred.
- serving: tokens/s vs GPUs with the demand (rate · gen-len) dashed; scaling efficiency; fleet GPUs needed for
  the request rate (or $ per million tokens, or TPOT) vs GPUs per deployment, the minimum starred.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from shardplan.cli.plots import _figure, _save

_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
_VARYING = ("hardware", "model", "dtype", "seq_len", "global_batch", "prompt_len", "gen_len", "request_rate")


def _series(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows with a plan grouped by everything but the GPU count; labels name only the fields that vary."""
    varying = [k for k in _VARYING if len({r.get(k) for r in rows}) > 1] or ["hardware"]
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("metrics"):
            out[" ".join(str(r[k]) for k in varying)].append(r)
    return {k: sorted(v, key=lambda r: r["num_gpus"]) for k, v in out.items()}


def _line(ax: Any, series: dict[str, list[dict[str, Any]]], y: Any) -> None:
    for i, (label, rows) in enumerate(series.items()):
        pts = [(r["num_gpus"], y(r)) for r in rows if y(r) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=4, color=_COLOURS[i % len(_COLOURS)], label=label)


def _gpu_axis(ax: Any, ylabel: str, *, logy: bool = True) -> None:
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def _efficiency(ax: Any, series: dict[str, list[dict[str, Any]]]) -> None:
    _line(ax, series, lambda r: r.get("scaling_efficiency"))
    _gpu_axis(ax, "scaling efficiency (tokens/s per GPU vs smallest)", logy=False)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    top = max((r.get("scaling_efficiency") or 0.0 for rows in series.values() for r in rows), default=1.0)
    ax.set_ylim(0.0, max(1.1, 1.05 * top))  # from zero: a 1 % wobble must not look like a cliff
    ax.set_title("scaling efficiency")


def _train(fig: Any, result: Any) -> None:
    rows, s = result.points, result.summary
    series = _series(rows)
    a, b, c = fig.subplots(1, 3)
    if s.get("tokens"):
        _line(a, series, lambda r: r.get("time_to_train_s") and r["time_to_train_s"] / 86400)
        _gpu_axis(a, "time to train (days)")
        a.set_title(f"time to train {s['tokens']:.3g} tokens")
    else:
        _line(a, series, lambda r: r["metrics"]["tokens_per_s"])
        _gpu_axis(a, "tokens/s")
        a.set_title("training throughput")
    a.legend(fontsize=7)
    _efficiency(b, series)
    priced = any(r.get("cost") for r in rows)
    pts = [r for r in rows if r.get("time_to_train_s") is not None]
    ykey = (lambda r: (r.get("cost") or {}).get("run_usd")) if priced else (lambda r: r.get("gpu_hours"))
    for i, (label, group) in enumerate(series.items()):
        g = [r for r in group if r.get("time_to_train_s") is not None and ykey(r) is not None]
        c.scatter([r["time_to_train_s"] / 86400 for r in g], [ykey(r) for r in g], s=14,
                  color=_COLOURS[i % len(_COLOURS)], label=label)
    front = sorted((r for r in pts if r.get("pareto")), key=lambda r: r["time_to_train_s"])
    if front:
        c.plot([r["time_to_train_s"] / 86400 for r in front], [ykey(r) for r in front], color="grey", lw=1,
               label="frontier (no point both faster and cheaper)")
    if s.get("deadline_s"):
        c.axvline(s["deadline_s"] / 86400, color="#D55E00", ls="--", lw=1, label="deadline")
    for r in pts:
        if r.get("deadline_pick"):
            c.scatter([r["time_to_train_s"] / 86400], [ykey(r)], marker="*", s=220, color="#D55E00", zorder=5,
                      label=f"cheapest in time: {r['num_gpus']}× {r['hardware']}")
    c.set_xscale("log")
    c.set_yscale("log")
    c.margins(y=0.15)
    c.set_xlabel("time to train (days)")
    c.set_ylabel("run cost ($)" if priced else "GPU-hours")
    c.set_title("cost / time frontier" if s.get("tokens") else "cost / time (needs --tokens)")
    c.grid(True, which="both", alpha=0.3)
    c.legend(fontsize=7)


def _infer(fig: Any, result: Any) -> None:
    rows = result.points
    series = _series(rows)
    a, b, c = fig.subplots(1, 3)
    _line(a, series, lambda r: r["metrics"]["tokens_per_s"])
    demands = sorted({r["demand_tokens_per_s"] for r in rows if r.get("demand_tokens_per_s")})
    for d in demands:
        a.axhline(d, color="grey", ls="--", lw=0.8)
    _gpu_axis(a, "output tokens/s (one deployment)")
    a.set_title("serving throughput" + (" (dashed: demand)" if demands else ""))
    a.legend(fontsize=7)
    _efficiency(b, series)
    if any(r.get("fleet_gpus") for r in rows):
        y, label = (lambda r: r.get("fleet_gpus")), "GPUs to serve the request rate"
    elif any((r.get("cost") or {}).get("usd_per_million_tokens") for r in rows):
        y, label = (lambda r: (r.get("cost") or {}).get("usd_per_million_tokens")), "$ per million output tokens"
    else:
        y, label = (lambda r: r["metrics"]["tpot_s"] * 1e3), "TPOT (ms)"
    _line(c, series, y)
    for i, group in enumerate(series.values()):
        for r in group:
            if r.get("min_gpus_pick") and y(r) is not None:
                c.scatter([r["num_gpus"]], [y(r)], marker="*", s=260, color=_COLOURS[i % len(_COLOURS)],
                          edgecolors="black", linewidths=0.6, zorder=5)
    _gpu_axis(c, label, logy="GPUs" not in label)
    c.set_xlabel("GPUs per deployment")
    c.set_title(label + (" (★ fewest)" if "GPUs" in label else ""))


def sweep_plot(result: Any, path: Path) -> Path:
    """Draw the three panels of ``result`` into ``path`` (format from the suffix)."""
    fig = _figure(16, 4.8)
    (_train if result.kind == "train" else _infer)(fig, result)
    fig.suptitle(f"shardplan sweep {result.kind}: {len(result.points)} points")
    _save(fig, path)
    return path
