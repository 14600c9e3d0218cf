"""Plots of a plan (matplotlib, the optional ``plot`` extra): memory per stage, the pipeline schedule of one
step, and the serving throughput–latency frontier. The format follows the file suffix (.png, .svg, .pdf, .jpg;
PNG for a name without a suffix).

Only the object-oriented ``matplotlib.figure.Figure`` API is used (no pyplot state, no display needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardplan.costmodel.training.pipeline_sim import chunk_layers, schedule_order
from shardplan.errors import ShardplanError

if TYPE_CHECKING:
    from shardplan.costmodel.training.report import StageRow, TrainPlanOut

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpg", ".jpeg": "jpg"}
SUFFIXES = tuple(FORMATS)
MAX_PIPELINE_PASSES = 4_096
"""Most forward/backward passes a pipeline plot draws: about 3 s of CPU (16,384 took 13 s; no box is wider than a
pixel long before that)."""
MISSING = "plots need matplotlib: pip install 'shardplan[plot]'"
TRAIN_PLOTS = ("memory", "pipeline")
GIB = 1024**3

# Colour-blind-safe palette (Okabe & Ito 2008); one colour per memory category / pipeline phase.
_MEMORY = (("weights_bytes", "weights", "#0072B2"), ("gradients_bytes", "gradients", "#56B4E9"),
           ("optimizer_bytes", "optimizer state", "#009E73"), ("activations_bytes", "activations", "#E69F00"),
           ("framework_bytes", "framework & buffers", "#999999"))
_FORWARD, _BACKWARD, _IDLE = "#0072B2", "#D55E00", "#EDEDED"


def require_matplotlib() -> None:
    """Raise the one-line install hint when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ShardplanError(MISSING) from None


def parse_train_plot(spec: str, default_kind: str | None = None) -> tuple[str, Path]:
    """``KIND:FILE`` or ``FILE`` → (kind, path). Without a ``KIND:`` prefix the kind is ``default_kind``
    (``--plot-kind``), else the one the file name says (memory…, pipeline…/schedule…), else memory."""
    kind, sep, rest = spec.partition(":")
    if sep and kind in TRAIN_PLOTS:
        path = Path(rest)
    else:
        path = Path(spec)
        stem = path.stem.lower()
        kinds = [k for k, words in (("memory", ("memory", "mem")), ("pipeline", ("pipe", "schedule",
                 "timeline", "1f1b"))) if any(w in stem for w in words)]
        kind = default_kind or (kinds[0] if len(kinds) == 1 else "memory")
    check_path(path)
    return kind, path


def plot_format(path: Path) -> str:
    """matplotlib's format for the file: from its suffix (.png, .svg, .pdf, .jpg), PNG for a name without one."""
    return FORMATS.get(path.suffix.lower(), "png")


def check_path(path: Path) -> None:
    """The file must be writable (its folder exists; it is not a folder) and its suffix, if any, an image format."""
    from shardplan.cli.common import check_writable

    if path.suffix and path.suffix.lower() not in FORMATS:
        raise ShardplanError(f"'{path}' must end in {', '.join(FORMATS)} (or have no suffix: PNG)", field="plot")
    check_writable(path, field="plot")


def _figure(width: float, height: float) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig


def _save(fig: Any, path: Path) -> None:
    fmt = plot_format(path)
    try:
        fig.savefig(path, format=fmt, dpi=150 if fmt in ("png", "jpg") else None)
    except OSError as e:
        raise ShardplanError(f"cannot write '{path}': {e.strerror or e}", field="plot") from None


def _stage_label(row: StageRow, pp: int) -> str:
    if pp == 1:
        return "all layers\n(no pipeline)"
    where = {"first": "first stage", "middle": "middle stage", "last": "last stage"}.get(row.stage, row.stage)
    return f"{where}\n(stage {row.index}, {row.layers} layers)"


def memory_plot(stages: list[StageRow], path: Path, *, pp: int, title: str) -> None:
    """Stacked bars of memory per GPU by category for each distinct pipeline stage, against GPU capacity."""
    fig = _figure(max(8.0, 2.2 * len(stages) + 3.5), 5.0)
    ax = fig.add_subplot()
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for key, label, color in _MEMORY:
        vals = [getattr(s, key) / GIB for s in stages]
        ax.bar(x, vals, bottom=bottom, width=0.55, color=color, label=label, edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    cap = stages[0].capacity_bytes / GIB
    usable = cap - stages[0].headroom_bytes / GIB
    ax.axhline(cap, color="#CC0000", linestyle="--", linewidth=1.5, label=f"GPU memory ({cap:.1f} GiB)")
    if usable < cap:
        ax.axhline(usable, color="#CC0000", linestyle=":", linewidth=1.2,
                   label=f"usable: less {cap - usable:.1f} GiB headroom ({usable:.1f} GiB)")
    for xi, s, top in zip(x, stages, bottom, strict=True):
        mark = "" if s.fits else "  does not fit"
        ax.annotate(f"{top:.1f} GiB{mark}", (xi, top), xytext=(0, 4), textcoords="offset points", ha="center",
                    fontsize=9, color="black" if s.fits else "#CC0000")
    ax.set_xticks(x, [_stage_label(s, pp) for s in stages])
    ax.set_xlim(-0.8, len(stages) - 0.2)
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_ylim(0, max(cap, *bottom) * 1.15)
    ax.set_title(title, fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    _save(fig, path)


@dataclass(frozen=True, slots=True)
class Box:
    """One forward or backward pass of one microbatch through one model chunk of one stage."""

    stage: int
    chunk: int
    microbatch: int
    forward: bool
    start_s: float
    end_s: float


def _order(pp: int, stage: int, m: int, v: int) -> list[tuple[bool, int, int]]:
    """Megatron's 1F1B order on one stage as (forward?, chunk, microbatch) (``pipeline_sim.schedule_order``)."""
    return [(phase == "F", c, mb) for phase, mb, c in schedule_order(pp, v, m, stage)]


def pipeline_schedule(pp: int, m: int, v: int, fwd_s: list[float], bwd_s: list[float],
                      chunk_share: list[float] | None = None) -> list[Box]:
    """Start and end of every pass when each stage runs its 1F1B order as soon as the inputs arrive.

    ``fwd_s[s]``/``bwd_s[s]``: per-microbatch time of stage ``s`` over all its chunks (chunk ``c`` takes
    ``chunk_share[c]`` of it: 1/v each by default).
    A forward needs the previous stage's forward (the last stage's, one chunk earlier, for stage 0); a
    backward needs the next stage's backward (stage 0's, one chunk later, for the last stage) or, on the
    last chunk of the last stage, its own forward.
    """
    orders = [_order(pp, s, m, v) for s in range(pp)]
    share = chunk_share if chunk_share is not None else [1.0 / v] * v
    done: dict[tuple[bool, int, int, int], float] = {}
    nxt, free = [0] * pp, [0.0] * pp
    boxes: list[Box] = []
    while len(boxes) < sum(map(len, orders)):
        progressed = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                fw, c, mb = orders[s][nxt[s]]
                if fw:
                    dep = (True, s - 1, c, mb) if s else ((True, pp - 1, c - 1, mb) if c else None)
                else:
                    dep = ((False, s + 1, c, mb) if s < pp - 1 else
                           (False, 0, c + 1, mb) if c < v - 1 else (True, s, c, mb))
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                end = start + (fwd_s[s] if fw else bwd_s[s]) * share[c]
                done[(fw, s, c, mb)] = free[s] = end
                boxes.append(Box(s, c, mb, fw, start, end))
                nxt[s] += 1
                progressed = True
        assert progressed, "pipeline schedule deadlocked"
    return boxes


def chunk_shares(plan: TrainPlanOut, stages: list[StageRow]) -> list[float]:
    """Each model chunk's share of a rank's layers, as the slowest rank's layers divide (``pipeline_sim.chunk_layers``:
    the first chunks take the remainder); equal shares when they divide evenly."""
    slowest = max(stages, key=lambda r: r.fwd_time_s + r.bwd_time_s)
    n = slowest.layers if plan.stage_layers is None else plan.stage_layers[slowest.index]
    return [c / n for c in chunk_layers(n, plan.interleave)] if n >= plan.interleave else [1.0 / plan.interleave] * \
        plan.interleave


def paced_times(plan: TrainPlanOut, stages: list[StageRow], pipeline_s: float) -> tuple[list[float], list[float]]:
    """Per-stage forward and backward time per microbatch, every stage at the pace of the slowest (its forward, and
    the rest of the per-microbatch time, which includes recompute, sends and exposed offload, as backward), scaled
    so that the drawn schedule (chunks as ``chunk_shares``) lasts the report's ``pipeline_s``: with equal chunks that
    is ``pipeline_s / (m + n·(p−1)/v)`` a microbatch, as the cost model charges it; with unequal chunks the
    schedule's stall shows as idle time between passes (the cost model's ``pipeline_sim`` excess, simulated here on
    the slowest rank's chunks for every rank)."""
    pp, m, v, n = plan.pp, plan.num_microbatches, plan.interleave, plan.schedules
    slowest = max(stages, key=lambda r: r.fwd_time_s + r.bwd_time_s)
    share = slowest.fwd_time_s / max(slowest.fwd_time_s + slowest.bwd_time_s, 1e-30)
    shares = chunk_shares(plan, stages)
    unit = max(b.end_s for b in pipeline_schedule(pp, m // n, v, [share] * pp, [1.0 - share] * pp, shares))
    per_mb = pipeline_s / (n * unit)
    fwd = min(slowest.fwd_time_s, per_mb)
    return [fwd] * pp, [per_mb - fwd] * pp


def pipeline_plot(plan: TrainPlanOut, stages: list[StageRow], path: Path, *, title: str,
                  pipeline_s: float | None = None, bubble_s: float | None = None, step_s: float | None = None) -> float:
    """Timeline of one step's forward and backward passes per stage and microbatch, every stage paced by the
    slowest (``paced_times``) (with several schedules per step, the first, which the others repeat);
    returns the drawn bubble (s) of the step: the schedule's length minus one stage's work, times the schedules.
    The title prints ``bubble_s`` (the report's) when given."""
    from matplotlib.patches import Patch

    pp, m_all, v, n = plan.pp, plan.num_microbatches, plan.interleave, plan.schedules
    m = m_all // n  # microbatches per schedule
    if pipeline_s is None:
        pipeline_s = m_all * max(r.fwd_time_s + r.bwd_time_s for r in stages) * (1 + n * (pp - 1) / (v * m_all))
    fwd, bwd = paced_times(plan, stages, pipeline_s)
    boxes = pipeline_schedule(pp, m, v, fwd, bwd, chunk_shares(plan, stages))
    span = max(b.end_s for b in boxes)
    bubble = n * (span - max(m * (f + b) for f, b in zip(fwd, bwd, strict=True)))
    scale, unit = (1e3, "ms") if span < 10 else (1.0, "s")
    fig = _figure(12.0, max(2.8, 0.42 * pp + 2.0))
    ax = fig.add_subplot()
    ax.barh(range(pp), span * scale, height=0.8, color=_IDLE)
    plot_px = 12.0 * 150 * 0.8  # axis width in pixels at 150 dpi
    numbered = False
    for fw in (True, False):
        sel = [b for b in boxes if b.forward == fw]
        thin = min(b.end_s - b.start_s for b in sel) / span * plot_px < 4
        bars = ax.barh([b.stage for b in sel], [(b.end_s - b.start_s) * scale for b in sel],
                       left=[b.start_s * scale for b in sel], height=0.8, color=_FORWARD if fw else _BACKWARD,
                       edgecolor="none" if thin else "white", linewidth=0.5)
        for patch, b in zip(bars, sel, strict=True):
            patch.set_alpha(1.0 - 0.5 * b.chunk / max(1, v - 1))
        for b in sel:
            if (b.end_s - b.start_s) / span * plot_px > 14:
                numbered = True
                ax.text((b.start_s + b.end_s) / 2 * scale, b.stage, str(b.microbatch + 1), ha="center",
                        va="center", fontsize=7, color="white")
    ax.set_yticks(range(pp), [f"stage {s}" for s in range(pp)])
    ax.invert_yaxis()
    ax.set_xlim(0, span * scale)
    ax.set_xlabel(f"time within {'one step' if n == 1 else 'one schedule'} ({unit})"
                  + ("; numbers are microbatches" if numbered else ""))
    told = bubble if bubble_s is None else bubble_s
    shown = f"{told * 1e3:.0f} ms" if told < 10 else f"{told:.1f} s"
    if pp == 1:
        sched = f"no pipeline: {m} microbatches back to back (gradient accumulation)"
    else:
        sched = (f"interleaved 1F1B with {v} model chunks per stage" if v > 1 else "1F1B") + (
            f", PP={pp}, {m} microbatches" + ("" if n == 1 else f" per schedule, {n} schedules a step (drawn: the "
                                              "first)") + f": bubble {shown} "
            f"({told / (step_s or n * span):.1%} of the {'step' if step_s else 'pipeline'})")
    ax.set_title(f"{title}\n{sched}; every stage paced by the slowest; data-parallel sync and optimizer step not "
                 "shown", fontsize=10)
    back = "backward\n(with recompute)" if plan.recompute != "none" else "backward"
    handles = [Patch(color=_FORWARD, label="forward"), Patch(color=_BACKWARD, label=back),
               Patch(color=_IDLE, label="idle (bubble)")]
    if v > 1:
        handles.append(Patch(color=_FORWARD, alpha=0.5, label="lighter: later\nmodel chunk"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    _save(fig, path)
    return bubble


def pareto_plot(points: list[tuple[float, float]], path: Path, *, labels: list[str] | None = None,
                chosen: int | None = None, max_tpot_ms: float | None = None, title: str = "") -> None:
    """Throughput against time per output token for serving layouts; ``points`` are (tpot_ms, tokens_per_s)."""
    check_path(path)
    if not points:
        raise ShardplanError("no points to plot", field="plot")
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    order = sorted(range(len(points)), key=lambda i: points[i][0])
    xs, ys = [points[i][0] for i in order], [points[i][1] for i in order]
    ax.plot(xs, ys, "-o", color="#0072B2", markersize=5, linewidth=1.5, label="Pareto frontier")
    if labels:
        for i in order:
            if labels[i]:  # empty labels are skipped (callers label only where the layout changes)
                ax.annotate(labels[i], points[i], xytext=(6, -12), textcoords="offset points", fontsize=8)
    if chosen is not None:
        ax.plot(*points[chosen], marker="*", markersize=16, color="#D55E00", linestyle="none", label="chosen plan")
    if max_tpot_ms is not None:
        ax.axvline(max_tpot_ms, color="#CC0000", linestyle="--", linewidth=1.2,
                   label=f"TPOT limit ({max_tpot_ms:g} ms)")
    ax.set_xlabel("time per output token, TPOT (ms)")
    ax.set_ylabel("throughput (output tokens/s)")
    from matplotlib.ticker import StrMethodFormatter

    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylim(0, max(ys) * 1.08)
    ax.set_xlim(0, max([*xs, max_tpot_ms or 0]) * 1.12)
    ax.grid(alpha=0.3)
    ax.set_title(title or "Serving: throughput against per-token latency", fontsize=11)
    ax.legend(loc="lower right", fontsize=9)
    _save(fig, path)


def train_plots(specs: list[tuple[str, Path]], result: Any) -> list[str]:
    """Write the requested training plots of a ``TrainPlan``/``TrainReport``; returns one message per plot."""
    if result.plan is None or not result.stages:
        raise ShardplanError("nothing to plot: no layout fits", field="plot")
    title = f"{result.model} on {result.num_gpus} GPUs ({result.hardware})"
    messages = []
    for kind, path in specs:
        if kind == "memory":
            memory_plot(result.stages, path, pp=result.plan.pp, title=f"{title}\nmemory per GPU by pipeline stage")
        else:
            p = result.plan
            passes = 2 * p.pp * (p.num_microbatches // p.schedules) * p.interleave
            if passes > MAX_PIPELINE_PASSES:
                messages.append(f"note: pipeline plot {path} skipped: {passes:,} passes (more than "
                                f"{MAX_PIPELINE_PASSES:,}) are too many to draw")
                continue
            pipeline_plot(result.plan, result.stages, path, title=f"{title}: one training step",
                          pipeline_s=result.metrics.pipeline_s, bubble_s=result.metrics.bubble_s,
                          step_s=result.metrics.step_time_s)
        messages.append(f"wrote {path}")
    return messages
