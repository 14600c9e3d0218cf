"""Rich rendering of training estimates and plans."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from shardplan.cli.output import render_infeasible
from shardplan.units import format_bytes, format_ms, format_seconds


def _ms(t: float) -> str:
    return format_ms(t) if t else "-"


def _gf(f: float) -> str:
    return f"{f / 1e9:,.0f}" if f else "-"


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f}" if b else "-"


def memory_line(mem: Any) -> str:
    """'71.2 GiB of 71.6 GiB usable per GPU on the first stage (79.6 GiB less 7.96 GiB headroom)'."""
    usable = mem.capacity_bytes - mem.headroom_bytes
    return (f"{format_bytes(mem.total_bytes)} of {format_bytes(usable)} usable per GPU on the {mem.stage} stage "
            f"({format_bytes(mem.capacity_bytes)} less {format_bytes(mem.headroom_bytes)} headroom)")


def layout_line(plan: Any) -> str:
    p = plan
    off = p.offload
    etp = getattr(p, "etp", None)
    cp_comm = getattr(p, "cp_comm_type", None)
    cp = f"CP={p.cp}" + (f"({cp_comm})" if cp_comm not in (None, "p2p") else "")  # the exchange, when not the default
    parts = [f"TP={p.tp}", f"PP={p.pp}", f"DP={p.dp}", cp, f"EP={p.ep}"]
    if p.ep > 1 and etp is not None and etp != p.tp:  # folded experts' own TP (estimate's --etp defaults to tp)
        parts.append(f"ETP={etp}")
    parts.append(f"microbatch={p.microbatch_size}×{p.num_microbatches}")
    if getattr(p, "schedules", 1) > 1:  # gradient accumulation over whole pipeline schedules (--local-batch)
        parts.append(f"schedules={p.schedules}")
    parts += [f"batch={p.global_batch}", f"interleave={p.interleave}"]
    if getattr(p, "mtp_layers", 0):
        parts.append(f"MTP={p.mtp_layers}")
    rc = p.recompute + (f"({p.recompute_layers} layers/stage)" if p.recompute_layers else "")
    if getattr(p, "stage_layers", None) and len(p.stage_layers) > 1:
        parts.append("layers/stage=" + ",".join(map(str, p.stage_layers)))
        if p.stage_recompute_layers is not None:
            rc = f"{p.recompute}({','.join(map(str, p.stage_recompute_layers))} layers/stage)"
    if getattr(p, "recompute_modules", None) not in (None, ["core_attn"]):
        rc += "(" + "+".join(p.recompute_modules) + ")"  # Megatron's --recompute-modules, when not its default
    parts += [f"recompute={rc}", f"SP={'on' if p.sequence_parallel else 'off'}", f"ZeRO={p.zero_stage}"]
    for name, v in (("optimizer", off.optimizer), ("weights", off.weights), ("activations", off.activations)):
        if v:
            parts.append(f"offload {name} {v:.0%}")
    return "  ".join(parts)


def render_layers(con: Console, report: Any) -> None:
    rows = report.layers
    cols: list[tuple[str, Any]] = [
        ("fwd GFLOP", lambda r: _gf(r.fwd_flops)), ("bwd GFLOP", lambda r: _gf(r.bwd_flops)),
        ("rc GFLOP", lambda r: _gf(r.recompute_flops)), ("fwd ms", lambda r: _ms(r.fwd_time_s)),
        ("bwd ms", lambda r: _ms(r.bwd_time_s)), ("rc ms", lambda r: _ms(r.recompute_time_s)),
        ("HBM GB", lambda r: f"{r.hbm_bytes / 1e9:.2f}"), ("TP ms", lambda r: _ms(r.comm_tp_s)),
        ("CP ms", lambda r: _ms(r.comm_cp_s)), ("EP ms", lambda r: _ms(r.comm_ep_s)),
        ("weights GiB", lambda r: _gib(r.weights_bytes)), ("grads GiB", lambda r: _gib(r.gradients_bytes)),
        ("optim GiB", lambda r: _gib(r.optimizer_bytes)), ("acts GiB", lambda r: _gib(r.activations_bytes)),
    ]
    # drop columns that are empty for every row (no recompute, no CP, no EP …)
    cols = [(name, fmt) for name, fmt in cols if any(fmt(r) != "-" for r in rows)]
    t = Table(title="Per layer (one GPU, one microbatch; × count for the stage)", title_justify="left")
    t.add_column("stage", no_wrap=True)
    t.add_column("layer", no_wrap=True)
    t.add_column("×", justify="right")
    for name, _ in cols:
        t.add_column(name, justify="right")
    for r in rows:
        kind = r.kind + (f" ({r.recompute} recompute)" if r.recompute != "none" else "")
        t.add_row(r.stage, kind, str(r.count), *(fmt(r) for _, fmt in cols))
    con.print(t)


def render_stages(con: Console, report: Any) -> None:
    t = Table(title="Per stage (one GPU)", title_justify="left")
    for col in ("stage", "index", "layers", "fwd ms/mb", "bwd ms/mb", "weights", "grads", "optimizer",
                "activations", "framework", "total", "headroom", "capacity", "fits"):
        t.add_column(col, justify="left" if col in ("stage", "fits") else "right", no_wrap=col == "stage")
    for s in report.stages:
        t.add_row(s.stage, str(s.index), str(s.layers), _ms(s.fwd_time_s), _ms(s.bwd_time_s),
                  format_bytes(s.weights_bytes), format_bytes(s.gradients_bytes), format_bytes(s.optimizer_bytes),
                  format_bytes(s.activations_bytes), format_bytes(s.framework_bytes), format_bytes(s.total_bytes),
                  format_bytes(s.headroom_bytes), format_bytes(s.capacity_bytes),
                  "[green]yes[/]" if s.fits else "[red]NO[/]")
    con.print(t)


def _band(m: Any) -> str:
    band = getattr(m, "band_pct", None)
    return f" ±{band:.0f}%" if band else ""


def _at_optimum(m: Any) -> list[tuple[str, str]]:
    """The interval at the optimum of a chosen plan: where the tuned runs of the jobs the planner was checked on
    measured against its free choice (percent of its tokens/s, and the step time and MFU that spans)."""
    pct = getattr(m, "optimum_band_pct", None)
    if not pct:
        return []
    lo, hi = m.optimum_step_time_s_range
    mfu = f"MFU {m.mfu * (1 + pct[0] / 100):.1%}–{m.mfu * (1 + pct[1] / 100):.1%}"
    return [("at the optimum", f"{format_seconds(lo)}–{format_seconds(hi)}, {mfu} "
             f"({100 + pct[0]:.0f}–{100 + pct[1]:.0f}%, {m.optimum_band_runs} tuned runs)")]


def render_summary(con: Console, report: Any) -> None:
    m = report.metrics
    t = Table(title="Step", title_justify="left", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("step time", format_seconds(m.step_time_s) + _band(m)), ("tokens/s", f"{m.tokens_per_s:,.0f}" + _band(m)),
        *_at_optimum(m),
        ("MFU", f"{m.mfu:.1%}"), ("HFU", f"{m.hfu:.1%}"), ("TFLOP/s per GPU (HFU)", f"{m.tflops_per_gpu:.1f}"),
        ("TFLOP/s per GPU (kernels run)", f"{m.executed_tflops_per_gpu:.1f}"),
        ("pipeline bubble", f"{m.bubble_fraction:.1%} ({format_seconds(m.bubble_s)})"),
    ]
    for name, v in (("TP exposed", m.tp_exposed_s), ("PP sends", m.pp_exposed_s), ("DP sync exposed", m.dp_exposed_s),
                    ("ZeRO-3 gathers exposed", m.zero3_exposed_s), ("EP all-to-all", m.ep_exposed_s),
                    ("CP K/V exchange exposed", m.cp_exposed_s), ("MoE host sync", m.host_sync_s),
                    ("optimizer step", m.optimizer_s)):
        if v > 0:
            rows.append((name, f"{format_seconds(v)} ({v / m.step_time_s:.1%})"))
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)


def render_status(con: Console, report: Any) -> None:
    if not render_infeasible(con, report):
        mem = report.memory
        con.print(f"[bold green]{report.status.upper()}[/]: fits, {memory_line(mem)}")


def render_estimate(con: Console, report: Any) -> None:
    con.print(f"[bold]{report.model}[/] on {report.num_gpus}× {report.hardware}, seq {report.seq_len}: "
              f"{layout_line(report.plan)}")
    render_layers(con, report)
    render_stages(con, report)
    render_summary(con, report)
    render_status(con, report)


def render_plan(con: Console, plan: Any) -> None:
    s = plan.solver
    con.print(f"[bold]{plan.model}[/] on {plan.num_gpus}× {plan.hardware}, seq {plan.seq_len}")
    con.print(f"CP-SAT: {s.status.upper()} in {format_seconds(s.wall_time_s)} (table {format_seconds(s.build_s)}, "
              f"solve {format_seconds(s.solve_s)}); {s.candidates:,} layouts, {s.evaluated:,} costed, "
              f"{s.feasible:,} fit, the best {s.selector_rows:,} distinct to the solver"
              + (f"; gap {s.gap:.2%}" if s.status == "feasible" else ""))
    if render_infeasible(con, plan):
        return
    con.print(f"[bold]Plan[/]: {layout_line(plan.plan)}")
    render_layers(con, plan)
    render_stages(con, plan)
    render_summary(con, plan)
    if plan.alternatives:
        t = Table(title="Next best distinct layouts", title_justify="left")
        for col in ("#", "layout", "step", "tokens/s", "slower by", "memory/GPU"):
            t.add_column(col, justify="left" if col == "layout" else "right")
        for a in plan.alternatives:
            t.add_row(str(a.rank), layout_line(a.plan), format_seconds(a.step_time_s), f"{a.tokens_per_s:,.0f}",
                      f"{a.delta_pct:+.1f}%", format_bytes(a.memory_bytes))
        con.print(t)
    if plan.comparisons:
        t = Table(title="Obvious alternatives (best of each TP×PP, each re-estimated alone)", title_justify="left")
        for col in ("layout", "step", "vs plan", "note"):
            t.add_column(col, justify="right" if col in ("step", "vs plan") else "left")
        for c in plan.comparisons:
            t.add_row(c.layout, format_seconds(c.step_time_s) if c.step_time_s else "-",
                      f"{c.delta_pct:+.1f}%" if c.delta_pct is not None else "-",
                      c.note if c.fits else f"[red]{c.note}[/]")
        con.print(t)
    for line in plan.explanation:
        con.print(f"• {line}")
    mem = plan.memory
    con.print(f"[bold green]{plan.status.upper()}[/]: {memory_line(mem)}")
