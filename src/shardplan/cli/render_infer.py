"""Rich rendering of serving estimates and plans."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from shardplan.cli.output import render_infeasible
from shardplan.units import format_bytes, format_ms, format_seconds


def layout_line(plan: Any) -> str:
    parts = [f"TP={plan.tp}", f"PP={plan.pp}"]
    if plan.ep > 1:
        parts.append(f"EP={plan.ep}")
    return "  ".join([*parts, f"replicas={plan.replicas}", f"batch={plan.batch_size}/replica"])


def render_layers(con: Console, rows: list[Any], title: str) -> None:
    t = Table(title=title, title_justify="left")
    for col in ("layer", "×", "GFLOP", "HBM MB", "time ms", "comm ms", "bound"):
        t.add_column(col, justify="left" if col in ("layer", "bound") else "right")
    for r in rows:
        t.add_row(r.kind, str(r.count), f"{r.flops / 1e9:,.2f}", f"{r.hbm_bytes / 1e6:,.1f}", format_ms(r.time_s),
                  format_ms(r.comm_s) if r.comm_s else "-", r.bound)
    con.print(t)


def _band(m: Any) -> str:
    band = getattr(m, "band_pct", None)
    return f" ±{band:.0f}%" if band else ""


def render_summary(con: Console, report: Any) -> None:
    m, mem = report.metrics, report.memory
    t = Table(title="Summary (memory per GPU)", title_justify="left", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    if m.mode == "continuous":
        load = "saturation" if m.request_rate is None else f"{m.request_rate:g} req/s offered, {m.utilisation:.0%} " \
            f"of capacity"
        rows = [
            ("load", f"{load}; capacity {m.capacity_requests_per_s:,.3g} req/s"),
            ("average step", f"{m.decodes_per_step:,.1f} decodes + {m.prefill_tokens_per_step:,.0f} prefill tokens"
             + (f", {m.decode_micro_batches} micro-batches" if m.decode_micro_batches > 1 else "")),
            ("TTFT (mean per request)", f"{format_seconds(m.ttft_s)} ({m.prefill_chunks} chunk(s)"
             + (f", queueing {format_seconds(m.queue_s)})" if m.request_rate is not None else ", from admission)")),
            ("TPOT (mean, mixed steps)", f"{format_seconds(m.tpot_s)} at {m.mean_context:g} tokens"),
            ("end-to-end latency", format_seconds(m.e2e_latency_s)),
            ("output tokens/s (all GPUs)", f"{m.tokens_per_s:,.1f}{_band(m)} ({m.tokens_per_s_per_gpu:,.1f} per GPU)"),
        ]
    else:
        rows = [
            ("TTFT (prefill of the batch)", f"{format_seconds(m.ttft_s)} ({m.prefill_chunks} chunk(s))"),
            ("TPOT (decode step, mean context)", f"{format_seconds(m.tpot_s)} at {m.mean_context:g} tokens"
             + (f", {m.decode_micro_batches} micro-batches" if m.decode_micro_batches > 1 else "")),
            ("end-to-end latency", format_seconds(m.e2e_latency_s)),
            ("output tokens/s (all GPUs)", f"{m.tokens_per_s:,.1f}{_band(m)} ({m.tokens_per_s_per_gpu:,.1f} per GPU)"),
        ]
    rows += [
        ("weights", format_bytes(mem.weights_bytes)),
        ("KV cache of the batch", format_bytes(mem.kv_cache_bytes)),
        ("activations (workspace)", format_bytes(mem.activations_bytes)),
        ("non-torch", format_bytes(mem.non_torch_bytes)),
        ("reserve (1 − utilisation)", format_bytes(mem.reserve_bytes)),
        ("total / capacity", f"{format_bytes(mem.total_bytes)} / {format_bytes(mem.capacity_bytes)}"),
        ("KV pool", f"{format_bytes(mem.kv_pool_bytes)}: {mem.kv_cache_tokens:,} token slots "
                    f"({mem.kv_cache_blocks:,} blocks) per replica"),
        ("max batch per replica", f"{m.max_batch_size:,}"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)


def _phase_tables(con: Console, report: Any) -> None:
    if report.metrics.mode == "continuous":
        render_layers(con, report.prefill_layers, "Prefill: one prompt's chunk alone, per layer, one GPU")
        render_layers(con, report.decode_layers, "Average engine step (decodes + prefill chunks), per layer, one GPU")
    else:
        render_layers(con, report.prefill_layers, "Prefill: one chunk, per layer, one GPU")
        render_layers(con, report.decode_layers, "Decode: one step, per layer, one GPU")


def render_status(con: Console, report: Any) -> None:
    if render_infeasible(con, report):
        return
    con.print(f"[bold green]{report.status.upper()}[/]: fits, {format_bytes(report.memory.total_bytes)} of "
              f"{format_bytes(report.memory.capacity_bytes)} per GPU on the {report.memory.stage} stage")
    m = report.metrics
    if m.utilisation is not None and m.request_rate is not None and m.utilisation >= 1:
        con.print(f"[red]overloaded[/]: {m.request_rate:g} requests/s offered, {m.capacity_requests_per_s:.4g} "
                  "served at most: the queue grows without bound (TTFT unbounded)")
    slo = getattr(report, "slo", None)
    if slo is not None:
        con.print(("[green]meets[/]" if slo.met else "[red]misses[/]") + " the latency limits")


def render_estimate(con: Console, report: Any) -> None:
    con.print(f"[bold]{report.model}[/] on {report.num_gpus}× {report.hardware}, prompt {report.prompt_len}, "
              f"generate {report.gen_len}, weights {report.weight_dtype}, KV {report.kv_dtype}: "
              f"{layout_line(report.plan)}")
    _phase_tables(con, report)
    render_summary(con, report)
    render_status(con, report)


def _plans_table(con: Console, title: str, alts: list[Any]) -> None:
    t = Table(title=title, title_justify="left")
    for col in ("#", "layout", "TTFT", "TPOT", "tokens/s", "max batch"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for a in alts:
        m = a.metrics
        t.add_row(str(a.rank), layout_line(a.plan), format_seconds(m.ttft_s), format_seconds(m.tpot_s),
                  f"{m.tokens_per_s:,.0f}", str(m.max_batch_size))
    con.print(t)


PARETO_ROWS_SHOWN = 24


def thin(points: list[Any], k: int) -> list[Any]:
    """At most ``k`` points spread evenly along the list, always its first and last."""
    if len(points) <= k:
        return points
    idx = sorted({round(j * (len(points) - 1) / (k - 1)) for j in range(k)})
    return [points[i] for i in idx]


def render_plan(con: Console, plan: Any) -> None:
    s = plan.solver
    con.print(f"[bold]{plan.model}[/] on {plan.num_gpus}× {plan.hardware}, prompt {plan.prompt_len}, generate "
              f"{plan.gen_len}, objective {plan.objective}")
    con.print(f"CP-SAT: {s.status.upper()} in {format_seconds(s.wall_time_s)} (table {format_seconds(s.build_s)}, "
              f"solve {format_seconds(s.solve_s)}); {s.candidates:,} (layout, batch) rows, {s.feasible:,} admissible")
    if render_infeasible(con, plan):
        return
    con.print(f"[bold]Plan[/]: {layout_line(plan.plan)}")
    _phase_tables(con, plan)
    render_summary(con, plan)
    if plan.alternatives:
        _plans_table(con, "Next best plans", plan.alternatives)
    if plan.pareto:
        shown = thin(plan.pareto, PARETO_ROWS_SHOWN)
        n = len(plan.pareto)
        note = "" if len(shown) == n else f" ({len(shown)} of {n} points; --json lists all)"
        _plans_table(con, "Throughput vs TPOT frontier" + note, shown)
    for line in plan.explanation:
        con.print(f"• {line}")
    con.print(f"[bold green]{plan.status.upper()}[/]")


def render_disagg(con: Console, res: Any) -> None:
    s = res.solver
    con.print(f"[bold]{res.model}[/] on {res.num_gpus}× {res.hardware}, prompt {res.prompt_len}, generate "
              f"{res.gen_len}: disaggregated prefill/decode")
    con.print(f"CP-SAT: {s.status.upper()} in {format_seconds(s.wall_time_s)}; {s.candidates:,} worker rows, "
              f"{s.kept} kept, {s.dinkelbach_steps} Dinkelbach solves")
    if res.aggregated is not None:
        a = res.aggregated
        con.print(f"Aggregated best: {layout_line(a.plan)}: {a.metrics.tokens_per_s:,.0f} tokens/s "
                  f"({a.tokens_per_s_per_gpu:,.1f} per GPU), TTFT {format_seconds(a.metrics.ttft_s)}, "
                  f"TPOT {format_seconds(a.metrics.tpot_s)}")
    if render_infeasible(con, res):
        return
    p, m = res.plan, res.metrics
    t = Table(title="Workers", title_justify="left")
    for col in ("kind", "TP", "PP", "EP", "workers", "batch/replica", "GPUs"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for kind, w in (("prefill", p.prefill), ("decode", p.decode)):
        t.add_row(kind, str(w.tp), str(w.pp), str(w.ep), str(w.workers), str(w.batch_size),
                  str(w.tp * w.pp * w.ep * w.workers))
    con.print(t)
    con.print(f"TTFT {format_seconds(m.ttft_s)} (KV transfer {format_seconds(m.kv_transfer_s)}), TPOT "
              f"{format_seconds(m.tpot_s)}, {m.tokens_per_s:,.0f} tokens/s on {m.gpus_used} GPUs "
              f"({m.tokens_per_s_per_gpu:,.1f} per GPU)")
    for line in res.explanation:
        con.print(f"• {line}")
    con.print(f"[bold green]{res.status.upper()}[/]: {res.winner} wins")
