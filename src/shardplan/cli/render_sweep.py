"""Rendering a sweep: the progress bar (stderr), the rich table, and the files (CSV, Parquet, plot)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from shardplan.cli.output import emit
from shardplan.units import format_count, format_seconds


@contextmanager
def progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar over the distinct requests on stderr; yields the ``progress(done, total)`` callback."""
    if not enabled or total == 0:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("planning"), BarColumn(), MofNCompleteColumn(), TextColumn("requests"),
                   TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("sweep", total=total)
    with bar:
        yield lambda done, _total: bar.update(task, completed=done)


def _days(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t / 86400:.3g} d" if t >= 86400 else format_seconds(t)


def _num(v: float | None, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _usd(v: float | None) -> str:
    if v is None:
        return "-"
    return f"${format_count(v)}" if v >= 1e4 else f"${v:,.2f}"


def _train_row(r: dict[str, Any]) -> list[str]:
    p, m = r["plan"], r["metrics"]
    lay = f"{p['tp']}/{p['pp']}/{p['dp']}/{p['cp']}/{p['ep']} mb{p['microbatch_size']}" if p else r["reason"] or ""
    cost = r.get("cost") or {}
    mark = ("★ " if r.get("deadline_pick") else "") + ("◆" if r.get("pareto") else "")
    return [r["hardware"], r["model"], str(r["num_gpus"]), str(r["global_batch"]), str(r["seq_len"]), r["dtype"],
            r["status"], lay, _num(m and m["mfu"], "{:.1%}"), _num(m and m["tokens_per_s"], "{:,.0f}"),
            _days(r.get("time_to_train_s")), _num(r.get("gpu_hours"), "{:,.0f}"),
            _usd(cost.get("run_usd") if "run_usd" in cost else cost.get("usd_per_million_tokens")),
            _num(r.get("scaling_efficiency"), "{:.0%}"), mark]


def _infer_row(r: dict[str, Any]) -> list[str]:
    p, m = r["plan"], r["metrics"]
    lay = f"TP{p['tp']} PP{p['pp']} ×{p['replicas']} b{p['batch_size']}" if p else r["reason"] or ""
    cost = r.get("cost") or {}
    meets = "-" if r.get("meets_rate") is None else ("yes" if r["meets_rate"] else "no")
    return [r["hardware"], r["model"], str(r["num_gpus"]), f"{r['prompt_len']}/{r['gen_len']}", r["dtype"],
            _num(r.get("request_rate"), "{:g}"), r["status"], lay, _num(m and m["tokens_per_s"], "{:,.0f}"),
            _num(m and m["ttft_s"] * 1e3, "{:,.0f}"), _num(m and m["tpot_s"] * 1e3, "{:.3g}"), meets,
            _num(r.get("fleet_gpus"), "{:,}"), _usd(cost.get("usd_per_million_tokens")),
            _num(r.get("scaling_efficiency"), "{:.0%}"), "★" if r.get("min_gpus_pick") else ""]


TRAIN_HEAD = ("hardware", "model", "GPUs", "batch", "seq", "dtype", "status", "TP/PP/DP/CP/EP", "MFU", "tokens/s",
              "time", "GPU-h", "cost", "eff", "")
INFER_HEAD = ("hardware", "model", "GPUs", "prompt/gen", "dtype", "req/s", "status", "layout", "tokens/s",
              "TTFT ms", "TPOT ms", "meets", "fleet GPUs", "$/M tok", "eff", "")


LABELS = {"hardware", "model", "batch", "seq", "dtype", "prompt/gen", "req/s"}


def render(con: Console, result: Any) -> None:
    """The table of rows and the summary lines (picks, counts, timing)."""
    train = result.kind == "train"
    head = TRAIN_HEAD if train else INFER_HEAD
    cells = [_train_row(r) if train else _infer_row(r) for r in result.points]
    # label columns equal on every row go to the title, so the table fits a terminal
    same = {i for i, h in enumerate(head) if h in LABELS and len({c[i] for c in cells}) == 1 and len(cells) > 1}
    title = ", ".join(f"{head[i]} {cells[0][i]}" for i in sorted(same))
    table = Table(title=f"shardplan sweep {result.kind}: {len(result.points)} points" + (f" ({title})" if title
                                                                                          else ""))
    keep = [i for i in range(len(head)) if i not in same]
    for i in keep:
        table.add_column(head[i], overflow="fold")
    for r, c in zip(result.points, cells, strict=True):
        table.add_row(*(c[i] for i in keep), style="red" if r["status"] == "infeasible" else None)
    con.print(table)
    s = result.summary
    if train and s.get("deadline_s") is not None:
        con.print(f"★ cheapest within {_days(s['deadline_s'])}: " + ("; ".join(
            f"{p['model']} on {p['num_gpus']}× {p['hardware']} ({_days(p['time_to_train_s'])})" for p in s["picks"])
            or "none of the points trains in time"))
    if train:
        con.print("◆ on the time/cost frontier (cost = run $ with --prices, else GPU-hours); cost column: run $ "
                  "with --tokens, else $ per million tokens.")
    else:
        con.print("★ fewest GPUs per hardware (least fleet_gpus meeting --request-rate, else the smallest GPU count "
                  "with a plan): " + "; ".join(
                      f"{p['hardware']} {p['model']} {p['prompt_len']}/{p['gen_len']}"
                      + (f" @{p['request_rate']:g}/s" if p.get("request_rate") else "")
                      + f": {p.get('fleet_gpus') or p['num_gpus']} GPUs"
                      + (f" ({p['copies']}× {p['num_gpus']})" if p.get("copies") else "") for p in s["picks"]))
    con.print(f"{s['points']} points, {s['unique_requests']} distinct plans ({s['infeasible']} infeasible) in "
              f"{s['wall_time_s']:.1f} s on {s['backend']} ({s['points_per_s']:.2f} points/s)")


def deliver(result: Any, *, as_json: bool, csv: Path | None, parquet: Path | None, plot: Path | None) -> None:
    """Write the files, then print the JSON or the table; stderr says which files were written."""
    from shardplan.sweep.tabular import write_csv, write_parquet

    written = []
    if csv is not None:
        write_csv(result.points, csv)
        written.append(csv)
    if parquet is not None:
        write_parquet(result.points, parquet)
        written.append(parquet)
    if plot is not None:
        from shardplan.cli.sweep_plots import sweep_plot

        sweep_plot(result, plot)
        written.append(plot)
    emit({"points": result.points, "summary": result.summary}, lambda con: render(con, result), as_json=as_json)
    for path in written:
        print(f"shardplan: wrote {path}", file=sys.stderr)
