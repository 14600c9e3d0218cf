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
    """Run the published cases (Megatron-LM, vLLM, FlexGen) and print each prediction's error."""
    from shardplan.errors import ShardplanError
    from shardplan.validation.runs import GROUPS, run_validation

    unknown = sorted(set(group or []) - set(GROUPS))
    if unknown:
        raise ShardplanError(f"unknown group {', '.join(unknown)}; groups: {', '.join(GROUPS)}", field="group")
    report = run_validation(group)

    def render(con: Console) -> None:
        t = Table(title="Predicted vs measured (published runs)", title_justify="left")
        for col in ("group", "case", "quantity", "measured", "predicted", "error"):
            t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
        for r in report.rows:
            pred = f"{r.predicted:.4g}" if r.predicted is not None else f"[red]{r.failure}[/]"
            err = f"{r.error_pct:+.1f}%" if r.error_pct is not None else "-"
            t.add_row(r.group, r.id, r.quantity, f"{r.measured:.4g}", pred, err)
        con.print(t)
        s = Table(title="Summary", title_justify="left")
        for col in ("group", "cases", "ran", "mean |error|", "median |error|", "max |error|"):
            s.add_column(col, justify="left" if col == "group" else "right")
        for g, v in report.summary.items():
            def pct(x: float | None) -> str:
                return f"{x:.2f}%" if x is not None else "-"

            s.add_row(g, str(v.cases), str(v.ran), pct(v.mape_pct), pct(v.median_abs_pct), pct(v.max_abs_pct))
        con.print(s)

    emit(report.model_dump(mode="json"), render, as_json=as_json)
