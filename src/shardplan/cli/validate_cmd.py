"""`shardplan validate`: predicted vs measured on the published runs shipped with the package."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from shardplan.cli._app import app
from shardplan.cli.options import JsonOpt
from shardplan.cli.output import emit


@app.command("validate")
def validate(
    group: Annotated[list[str] | None, typer.Option("--group", help="Only these groups (repeatable).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the published cases (Megatron-LM, vLLM, FlexGen) and print each prediction's error.

    A case whose published layout the cost model finds infeasible is still scored, and marked INFEASIBLE."""
    from shardplan.errors import ShardplanError
    from shardplan.validation.groups import GROUPS, run_validation

    unknown = sorted(set(group or []) - set(GROUPS))
    if unknown:
        raise ShardplanError(f"unknown group {', '.join(unknown)}; groups: {', '.join(GROUPS)}", field="group")
    report = run_validation(group)
    from shardplan.validation.bands import band_coverage

    bands = band_coverage(report)

    def render(con: Console) -> None:
        t = Table(title="Predicted vs measured (published runs)", title_justify="left")
        for col in ("group", "case", "quantity", "measured", "predicted", "error", "fits"):
            t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
        for r in report.rows:
            pred = f"{r.predicted:.4g}" if r.predicted is not None else f"[red]{r.failure}[/]"
            err = f"{r.error_pct:+.1f}%" if r.error_pct is not None else "-"
            fits = f"[red]INFEASIBLE[/]: {r.infeasible}" if r.infeasible else \
                ("yes" if r.predicted is not None else "-")
            t.add_row(r.group, r.id, r.quantity, f"{r.measured:.4g}", pred, err, fits)
        con.print(t)
        s = Table(title="Summary", title_justify="left")
        for col in ("group", "cases", "ran", "infeasible", "mean |error|", "median |error|", "max |error|"):
            s.add_column(col, justify="left" if col == "group" else "right")
        for g, v in report.summary.items():
            def pct(x: float | None) -> str:
                return f"{x:.2f}%" if x is not None else "-"

            s.add_row(g, str(v.cases), str(v.ran), str(v.infeasible), pct(v.mape_pct), pct(v.median_abs_pct),
                      pct(v.max_abs_pct))
        con.print(s)
        for kind, c in bands.items():
            con.print(f"Error bands ({kind}): {c['inside_pct']:.0f}% of {c['cases']} measured values inside the "
                      f"band of their prediction; median band ±{c['median_width_pct'] / 2:.0f}%")

    emit({**report.model_dump(mode="json"), "band_coverage": bands}, render, as_json=as_json)
