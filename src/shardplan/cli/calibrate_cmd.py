"""``shardplan calibrate``: fit a system file to measured runs and show the fit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shardplan.cli._app import app
from shardplan.cli.options import HardwareOpt, JsonOpt
from shardplan.cli.output import emit

if TYPE_CHECKING:
    from rich.console import Console

GiB = 2**30


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _value(name: str, v: float) -> str:
    if name == "memory_overhead_bytes":
        return f"{v / GiB:.2f} GiB"
    if name.endswith("_s"):
        return f"{v * 1e3:.1f} ms"
    return f"{v:.3f}"


def render_calibration(con: Console, res: Any) -> None:
    from rich.table import Table

    t = Table(title=f"Runs: step time, base {res.base} vs calibrated", title_justify="left")
    for col in ("#", "run", "measured s", "base s", "error", "calibrated s", "error", "leave-one-out",
                "memory GiB (meas / base / cal)"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in res.runs:
        mem = "-"
        if r.measured_peak_memory_gib is not None:
            mem = (f"{r.measured_peak_memory_gib:.1f} / {r.predicted_memory_before_gib:.1f} / "
                   f"{r.predicted_memory_after_gib:.1f}")
        t.add_row(str(r.index), r.id, f"{r.measured_step_time_s:.4g}" if r.measured_step_time_s else "-",
                  f"{r.predicted_before_s:.4g}" if r.predicted_before_s else "-", _pct(r.error_before_pct),
                  f"{r.predicted_after_s:.4g}" if r.predicted_after_s else "-", _pct(r.error_after_pct),
                  _pct(r.loo_error_pct), mem)
    con.print(t)
    cal = res.calibration
    fitted = ", ".join(f"{n} = {_value(n, getattr(cal, n))}" + (" (at its bound)" if n in res.at_bounds else "")
                       for n in res.fitted) or "nothing"
    con.print(f"Fitted: {fitted}")

    def mean(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}%"

    line = f"Mean |error|: {mean(res.mean_abs_error_before_pct)} before, {mean(res.mean_abs_error_after_pct)} after"
    if res.loo_mean_abs_error_pct is not None:
        line += f"; leave-one-out {mean(res.loo_mean_abs_error_pct)} (band ±{cal.band_pct:.1f}%)"
    else:
        line += "; leave-one-out needs ≥ 3 timed runs"
    con.print(line)
    if res.output:
        con.print(f"Wrote {res.output}: use it as --hardware {res.output}")


@app.command("calibrate")
def calibrate(
    hardware: HardwareOpt,
    runs: Annotated[Path, typer.Option("--runs", help="YAML/JSON file with a 'runs:' list of measured runs.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", dir_okay=False,
                                                help="Write the calibrated system file here (.yaml or .json).")
                      ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit the system's efficiencies and overheads to measured runs; write a system file for --hardware."""
    from shardplan.calibration import calibrate as _calibrate
    from shardplan.errors import ShardplanError

    if output is not None and not output.parent.exists():
        raise ShardplanError(f"folder '{output.parent}' does not exist", field="output")
    if output is not None and output.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ShardplanError(f"'{output}' must end in .yaml, .yml or .json", field="output")
    res = _calibrate(hardware, runs, output=output)
    emit(res.model_dump(mode="json"), lambda con: render_calibration(con, res), as_json=as_json)
