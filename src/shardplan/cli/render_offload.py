"""Rich rendering of offload estimates and plans."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from shardplan.cli.output import render_infeasible
from shardplan.units import format_bytes, format_seconds, plural

RESOURCE_LABELS = {"gpu": "GPU compute", "cpu": "CPU (attention, staging)", "pcie_h2d": "PCIe host→GPU",
                   "pcie_d2h": "PCIe GPU→host", "disk_read": "disk read", "disk_write": "disk write"}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x else "-"


def policy_line(plan: Any) -> str:
    """'GPU batch 32 × 8 = 256 sequences, CPU attention, 4-bit weights'."""
    parts = [f"GPU batch {plan.gpu_batch_size} × {plan.num_gpu_batches} = {plural(plan.block_size, 'sequence')}"]
    parts.append("CPU attention" if plan.cpu_attention else "GPU attention")
    comp = [n for n, on in (("weights", plan.compress_weights), ("KV cache", plan.compress_kv_cache)) if on]
    parts.append(f"4-bit {' and '.join(comp)}" if comp else "no compression")
    if not plan.pin_weights:
        parts.append("unpinned CPU weights")
    return ", ".join(parts)


def render_placement(con: Console, plan: Any) -> None:
    t = Table(title="Placement", title_justify="left")
    for col in ("tensor", "GPU", "CPU", "disk"):
        t.add_column(col, justify="left" if col == "tensor" else "right")
    for name, split in (("weights", plan.weights), ("KV cache", plan.kv_cache), ("activations", plan.activations)):
        t.add_row(name, _pct(split.gpu), _pct(split.cpu), _pct(split.disk))
    con.print(t)


def render_metrics(con: Console, report: Any) -> None:
    m = report.metrics
    t = Table(title="Throughput and time", title_justify="left", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    band = f" ±{m.band_pct:.0f}%" if getattr(m, "band_pct", None) else ""
    rows = [("generation throughput", f"{m.tokens_per_s:,.3g} tokens/s{band}"),
            ("prefill (whole block)",
             f"{format_seconds(m.prefill_s)}  ({m.prefill_tokens_per_s:,.4g} prompt tokens/s)"),
            ("decode (whole block)", f"{format_seconds(m.decode_s)}  ({m.decode_tokens_per_s:,.4g} tokens/s)"),
            ("latency of a request", format_seconds(m.total_s)),
            ("one layer: prefill / decode step", f"{format_seconds(m.layer_prefill_s)} / "
                                                 f"{format_seconds(m.layer_decode_s)}")]
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)


def render_resources(con: Console, report: Any) -> None:
    t = Table(title="Resources (busy time over the run; 'binds' = time the phase waits on it)", title_justify="left")
    for col in ("phase", "resource", "busy", "binds"):
        t.add_column(col, justify="left" if col in ("phase", "resource") else "right")
    for r in report.resources:
        if r.busy_s <= 0:
            continue
        mark = " ◀" if report.bottleneck.get(r.phase) == r.resource else ""
        t.add_row(r.phase, RESOURCE_LABELS.get(r.resource, r.resource) + mark, format_seconds(r.busy_s),
                  format_seconds(r.binding_s) if r.binding_s else "-")
    con.print(t)


def render_memory(con: Console, report: Any) -> None:
    t = Table(title="Memory per tier", title_justify="left")
    for col in ("tier", "weights", "KV cache", "activations", "buffers", "total", "capacity", "fits"):
        t.add_column(col, justify="left" if col in ("tier", "fits") else "right")
    for m in report.memory.tiers:
        tier = m.tier.upper() if m.tier != "disk" else "disk"
        if m.phase:
            tier += f" ({m.phase})"
        ok = m.total_bytes <= m.capacity_bytes
        t.add_row(tier, format_bytes(m.weights_bytes), format_bytes(m.kv_cache_bytes),
                  format_bytes(m.activations_bytes), format_bytes(m.working_bytes), format_bytes(m.total_bytes),
                  format_bytes(m.capacity_bytes), "yes" if ok else "[red]NO[/]")
    con.print(t)


def _bottlenecks(report: Any) -> str:
    return "; ".join(f"{phase} bound by {RESOURCE_LABELS.get(res, res)}" for phase, res in report.bottleneck.items())


def render_estimate(con: Console, report: Any) -> None:
    con.print(f"[bold]{report.model}[/] on {report.hardware}, prompt {report.prompt_len}, generate "
              f"{report.gen_len}: {policy_line(report.plan)}")
    render_placement(con, report.plan)
    render_metrics(con, report)
    render_resources(con, report)
    render_memory(con, report)
    if not render_infeasible(con, report):
        con.print(f"[bold green]FEASIBLE[/]: {report.metrics.tokens_per_s:,.3g} tokens/s; {_bottlenecks(report)}")


def render_plan(con: Console, plan: Any) -> None:
    s = plan.solver
    con.print(f"[bold]{plan.model}[/] on {plan.hardware}, prompt {plan.prompt_len}, generate {plan.gen_len}, "
              f"objective {plan.objective}")
    con.print(f"CP-SAT: {s.status.upper()} in {format_seconds(s.wall_time_s)} (table and bounds "
              f"{format_seconds(s.build_s)}, solve {format_seconds(s.solve_s)}); {s.candidates:,} knob rows, "
              f"{s.pruned_memory:,} cannot fit, {s.pruned_bound:,} bounded out, {s.solved:,} solved"
              + (f"; gap {s.gap:.2%}" if s.status == "feasible" else ""))
    if render_infeasible(con, plan):
        return
    con.print(f"[bold]Plan[/]: {policy_line(plan.plan)}")
    render_placement(con, plan.plan)
    render_metrics(con, plan)
    render_resources(con, plan)
    render_memory(con, plan)
    for line in plan.explanation:
        con.print(f"• {line}")
    con.print(f"[bold green]{plan.status.upper()}[/]: {plan.metrics.tokens_per_s:,.3g} tokens/s; {_bottlenecks(plan)}")
