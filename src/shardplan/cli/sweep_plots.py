"""The sweep figure (matplotlib, the ``plot`` extra): three panels over the GPU count, one line per series
(hardware, model and workload fields other than the GPU count).

- training: time to train (or tokens/s without ``--tokens``) vs GPUs; scaling efficiency vs GPUs; the
  cost/time frontier (run $ with prices, else GPU-hours) with the cheapest point within ``--deadline`` starred.
- serving: tokens/s vs GPUs with the demand (rate · gen-len) dashed; scaling efficiency; fleet GPUs needed for
  the request rate (or $ per million tokens, or TPOT) vs GPUs per deployment, the minimum starred.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardplan.cli.plots import _figure, _save

_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))
_KEYS = ("hardware", "model", "dtype")
_ENVELOPE = ("seq_len", "global_batch", "prompt_len", "gen_len", "request_rate")


@dataclass
class _Series:
    """One line: a (hardware, model, dtype) with, per GPU count, its best row over the other fields."""

    label: str
    colour: str
    style: tuple[str, str]
    rows: list[dict[str, Any]]


def _series(rows: list[dict[str, Any]], best: Any) -> tuple[list[_Series], list[str]]:
    """Lines coloured by hardware, styled by model; fields other than these and the GPU count are folded into
    the best row per GPU count (``best`` ranks rows, lower is better). Returns the lines and the folded fields."""
    varying = [k for k in _KEYS if len({r.get(k) for r in rows}) > 1] or ["hardware"]
    folded = [k for k in _ENVELOPE if len({r.get(k) for r in rows}) > 1]
    hw = list(dict.fromkeys(r["hardware"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    groups: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if not r.get("metrics"):
            continue
        g = groups[tuple(r[k] for k in _KEYS)]
        if r["num_gpus"] not in g or best(r) < best(g[r["num_gpus"]]):
            g[r["num_gpus"]] = r
    out = []
    for key, by_n in groups.items():
        first = next(iter(by_n.values()))
        out.append(_Series(" ".join(str(first[k]) for k in varying), _COLOURS[hw.index(key[0]) % len(_COLOURS)],
                           _STYLES[models.index(key[1]) % len(_STYLES)], [by_n[n] for n in sorted(by_n)]))
    return out, folded


def _line(ax: Any, series: list[_Series], y: Any) -> None:
    for s in series:
        pts = [(r["num_gpus"], y(r)) for r in s.rows if y(r) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), ls=s.style[0], marker=s.style[1], ms=4, color=s.colour, label=s.label)


def _legend(fig: Any, ax: Any, folded: list[str]) -> None:
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.folded = folded  # read by sweep_plot for the title


def _gpu_axis(ax: Any, ylabel: str, *, logy: bool = True) -> None:
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def _efficiency(ax: Any, series: list[_Series]) -> None:
    top = 1.0
    for s in series:
        base = s.rows[0]["metrics"]["tokens_per_s"] / s.rows[0]["num_gpus"]
        pts = [(r["num_gpus"], r["metrics"]["tokens_per_s"] / r["num_gpus"] / base) for r in s.rows]
        top = max(top, *(e for _, e in pts))
        ax.plot(*zip(*pts, strict=True), ls=s.style[0], marker=s.style[1], ms=4, color=s.colour)
    _gpu_axis(ax, "tokens/s per GPU ÷ that at the fewest GPUs", logy=False)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0.0, max(1.1, 1.05 * top))  # from zero: a 1 % wobble must not look like a cliff
    ax.set_title("scaling efficiency")


def _train(fig: Any, result: Any) -> None:
    rows, s = result.points, result.summary
    series, folded = _series(rows, lambda r: -r["metrics"]["tokens_per_s"])
    a, b, c = fig.subplots(1, 3)
    if s.get("tokens"):
        _line(a, series, lambda r: r.get("time_to_train_s") and r["time_to_train_s"] / 86400)
        _gpu_axis(a, "time to train (days)")
        a.set_title(f"time to train {s['tokens']:.3g} tokens")
    else:
        _line(a, series, lambda r: r["metrics"]["tokens_per_s"])
        _gpu_axis(a, "tokens/s")
        a.set_title("training throughput")
    _legend(fig, a, folded)
    _efficiency(b, series)
    b.set_title("scaling efficiency")
    priced = any(r.get("cost") for r in rows)
    ykey = (lambda r: (r.get("cost") or {}).get("run_usd")) if priced else (lambda r: r.get("gpu_hours"))
    pts = [r for r in rows if r.get("time_to_train_s") is not None and ykey(r) is not None]
    hw = list(dict.fromkeys(r["hardware"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    for r in pts:  # every point: colour = hardware, marker = model
        c.scatter([r["time_to_train_s"] / 86400], [ykey(r)], s=10, alpha=0.5,
                  color=_COLOURS[hw.index(r["hardware"]) % len(_COLOURS)],
                  marker=_STYLES[models.index(r["model"]) % len(_STYLES)][1])
    for m in models:  # the frontier of each model
        front = sorted((r for r in pts if r.get("pareto") and r["model"] == m), key=lambda r: r["time_to_train_s"])
        if front:
            c.plot([r["time_to_train_s"] / 86400 for r in front], [ykey(r) for r in front], color="grey", lw=1,
                   ls=_STYLES[models.index(m) % len(_STYLES)][0])
    if s.get("deadline_s"):
        c.axvline(s["deadline_s"] / 86400, color="grey", ls="--", lw=1)
    for r in pts:
        if r.get("deadline_pick"):
            c.scatter([r["time_to_train_s"] / 86400], [ykey(r)], marker="*", s=260, zorder=5, edgecolors="black",
                      linewidths=0.6, color=_COLOURS[hw.index(r["hardware"]) % len(_COLOURS)])
            c.annotate(f"{r['num_gpus']}× {r['hardware']}", (r["time_to_train_s"] / 86400, ykey(r)), fontsize=7,
                       xytext=(6, -10), textcoords="offset points")
    c.set_xscale("log")
    c.set_yscale("log")
    c.margins(y=0.15)
    c.set_xlabel("time to train (days)")
    c.set_ylabel("run cost ($)" if priced else "GPU-hours")
    title = "cost / time: grey = frontier per model"
    c.set_title(title + (", ★ cheapest within the deadline (dashed)" if s.get("deadline_s") else ""), fontsize=9)
    c.grid(True, which="both", alpha=0.3)


def _infer(fig: Any, result: Any) -> None:
    rows = result.points
    series, folded = _series(rows, lambda r: (r.get("fleet_gpus") or 0, -r["metrics"]["tokens_per_s"]))
    a, b, c = fig.subplots(1, 3)
    _line(a, series, lambda r: r["metrics"]["tokens_per_s"])
    demands = sorted({r["demand_tokens_per_s"] for r in rows if r.get("demand_tokens_per_s")})
    for d in demands:
        a.axhline(d, color="grey", ls="--", lw=0.8)
    _gpu_axis(a, "output tokens/s (one deployment)")
    a.set_title("serving throughput" + (" (dashed: demand)" if demands else ""))
    _legend(fig, a, folded)
    _efficiency(b, series)
    b.set_title("scaling efficiency")
    if any(r.get("fleet_gpus") for r in rows):
        y, label = (lambda r: r.get("fleet_gpus")), "GPUs to serve the request rate"
    elif any((r.get("cost") or {}).get("usd_per_million_tokens") for r in rows):
        y, label = (lambda r: (r.get("cost") or {}).get("usd_per_million_tokens")), "$ per million output tokens"
    else:
        y, label = (lambda r: r["metrics"]["tpot_s"] * 1e3), "TPOT (ms)"
    _line(c, series, y)
    for sr in series:
        best = min((r for r in sr.rows if y(r) is not None), key=lambda r: (y(r), r["num_gpus"]), default=None)
        if best is not None:
            c.scatter([best["num_gpus"]], [y(best)], marker="*", s=260, color=sr.colour, edgecolors="black",
                      linewidths=0.6, zorder=5)
    _gpu_axis(c, label, logy="GPUs" not in label)
    c.set_xlabel("GPUs per deployment")
    c.set_title(label + " (★ least)")


def sweep_plot(result: Any, path: Path) -> Path:
    """Draw the three panels of ``result`` into ``path`` (format from the suffix)."""
    fig = _figure(19, 5.2)
    (_train if result.kind == "train" else _infer)(fig, result)
    folded = getattr(fig, "folded", [])
    note = f" (each line: the best over {', '.join(folded)} at each GPU count)" if folded else ""
    fig.suptitle(f"shardplan sweep {result.kind}: {len(result.points)} points{note}")
    _save(fig, path)
    return path
