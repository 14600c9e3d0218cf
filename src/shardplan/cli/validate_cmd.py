"""`shardplan validate`: predicted vs measured on the published runs shipped with the package."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from shardplan.cli._app import app
from shardplan.cli.options import JsonOpt
from shardplan.cli.output import emit


def _pct(x: float | None) -> str:
    return f"{x:.2f}%" if x is not None else "-"


def _signed(x: float | None) -> str:
    return f"{x:+.1f}%" if x is not None else "-"


def _render_optimum(con: Console, report: Any) -> None:
    """The optimum group side by side: measured, the published layout's prediction, the free plan's."""
    t = Table(title="At the optimum: tokens/s per GPU, published layout (pinned) vs planner left free",
              title_justify="left")
    for col in ("case", "hardware", "GPUs", "measured", "pinned", "err", "free", "err", "free layout"):
        t.add_column(col, justify="left" if col in ("case", "hardware", "free layout") else "right")
    for r in report.rows:
        measured = (f"{r.measured:.0f}" + ("*" if r.derived_from_tflops else "")) if r.measured else "-"
        pinned = f"{r.pinned:.0f}" + ("" if r.pinned_fits in (None, True) else " (OOM)") if r.pinned else "-"
        free = f"{r.free:.0f}" if r.free is not None else f"[red]{r.failure}[/]"
        t.add_row(r.id, r.hardware, str(r.gpus), measured, pinned, _signed(r.pinned_error_pct), free,
                  _signed(r.free_error_pct), r.free_layout or "-")
    con.print(t)
    faster = [r for r in report.rows if r.why_free_faster]
    if faster:
        con.print("Free plan > 15% faster than the published layout under the same cost model; the costs it removes "
                  "(seconds per step):")
        for r in faster:
            con.print(f"  {r.id}: {r.why_free_faster}")
    s = report.summary
    lo, hi = s.band_pct
    con.print(f"free planner: {s.free_ran}/{s.cases} ran, mean signed {_signed(s.free_mean_signed_pct)} "
              f"(target ±5%), MAPE {_pct(s.free_mape_pct)}, within {lo:+.0f}…{hi:+.0f}%: {s.free_within_band}"
              f"/{s.free_ran} (target: all)")
    con.print(f"published layouts: {s.pinned_ran} ran, mean signed {_signed(s.pinned_mean_signed_pct)}, MAPE "
              f"{_pct(s.pinned_mape_pct)}; H100/H200 MAPE {_pct(s.pinned_h100_mape_pct)} (target ≤ 8%)")
    regressed = [r for r in report.rows if r.known_regression]
    if regressed:
        con.print(f"without the {s.regressions} run(s) their publisher lists as a software regression "
                  f"({', '.join(f'{r.id}: {r.known_regression}' for r in regressed)}): free mean signed "
                  f"{_signed(s.free_mean_signed_without_regressions_pct)}, H100/H200 MAPE "
                  f"{_pct(s.pinned_h100_mape_without_regressions_pct)}")
    con.print("* measured tokens/s derived from published model TFLOP/s (attention counted non-causally).")


@app.command("validate")
def validate(
    group: Annotated[list[str] | None, typer.Option("--group", help="Only these groups (repeatable).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the published cases (Megatron-LM, NeMo, torchtitan, vLLM, FlexGen) and print each prediction's error;
    the `optimum` group runs the planner free on expert-tuned runs and shows it beside the published layout; the
    `memory` group compares the peak GPU memory Megatron-Bridge logged with the plan's tensors (GiB); `ab` compares
    one-setting A/B pairs (NVIDIA's, and MosaicML's FSDP microbatch sweep; throughput b/a) with the model's ratio;
    `moe-natural` shows MoE runs with a learned router, which the model (random routing's busiest rank) does not
    price.

    A case whose published layout the cost model finds infeasible is still scored, and marked INFEASIBLE."""
    from shardplan.errors import ShardplanError
    from shardplan.validation.groups import GROUPS, run_validation

    unknown = sorted(set(group or []) - set(GROUPS))
    if unknown:
        raise ShardplanError(f"unknown group {', '.join(unknown)}; groups: {', '.join(GROUPS)}", field="group")
    report = run_validation(group)
    from shardplan.validation.bands import band_coverage

    bands = band_coverage(report)
    optimum = None
    if not group or "optimum" in group:
        from shardplan.validation.optimum import run_optimum

        optimum = run_optimum()

    def render(con: Console) -> None:
        t = Table(title="Predicted vs measured (published runs)", title_justify="left")
        for col in ("group", "case", "quantity", "measured", "predicted", "error", "fits"):
            t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
        for r in report.rows:
            if r.group == "optimum":
                continue  # shown side by side with the pinned prediction below
            pred = f"{r.predicted:.4g}" if r.predicted is not None else f"[red]{r.failure}[/]"
            fits = f"[red]INFEASIBLE[/]: {r.infeasible}" if r.infeasible else \
                ("yes" if r.predicted is not None else "-")
            t.add_row(r.group, r.id, r.quantity, f"{r.measured:.4g}", pred, _signed(r.error_pct), fits)
        if t.row_count:
            con.print(t)
        if optimum is not None:
            _render_optimum(con, optimum)
        s = Table(title="Summary (error: predicted vs measured; signed: + means predicted larger)",
                  title_justify="left")
        for col in ("group", "cases", "ran", "infeasible", "mean |error|", "median |error|", "max |error|",
                    "mean signed"):
            s.add_column(col, justify="left" if col == "group" else "right")
        for g, v in report.summary.items():
            s.add_row(g, str(v.cases), str(v.ran), str(v.infeasible), _pct(v.mape_pct), _pct(v.median_abs_pct),
                      _pct(v.max_abs_pct), _signed(v.mean_signed_pct))
        con.print(s)
        for kind, c in bands.items():
            if kind == "optimum":  # asymmetric: the free plan's interval at the optimum
                con.print(f"Interval at the optimum: {c['inside_pct']:.0f}% of {c['cases']} tuned runs inside the "
                          f"interval of their free plan; median width {c['median_width_pct']:.0f}%")
                continue
            con.print(f"Error bands ({kind}): {c['inside_pct']:.0f}% of {c['cases']} measured values inside the "
                      f"band of their prediction; median band ±{c['median_width_pct'] / 2:.0f}%")

    data = {**report.model_dump(mode="json"), "band_coverage": bands}
    if optimum is not None:
        data["optimum"] = optimum.model_dump(mode="json")
    emit(data, render, as_json=as_json)
