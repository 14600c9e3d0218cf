"""``calibrate``: measured runs in, a fitted calibration block (and a system file) out.

The result holds, per run, the base system's prediction and the calibrated one (residual before and
after) and, with three or more timed runs, the leave-one-out error: the run predicted by a fit of the
same parameters to the other runs. Its ``system_file`` is what ``--output`` writes; every command loads
it as ``--hardware``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict

from shardplan.calibration.fit import bounds, fit_memory, leave_one_out, predict_steps, select_and_fit
from shardplan.calibration.runs import Run, load_runs
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.hardware.catalog import SYSTEMS
from shardplan.hardware.spec import Calibration, SystemSpec, with_calibration

GiB = 2**30
# Band half-width from leave-one-out errors: this quantile of |error| (the coverage the bands aim at).
BAND_QUANTILE = 0.85


class RunFit(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    id: str
    fingerprint: str
    measured_step_time_s: float | None
    predicted_before_s: float | None
    predicted_after_s: float | None
    error_before_pct: float | None
    error_after_pct: float | None
    loo_error_pct: float | None = None
    measured_peak_memory_gib: float | None = None
    predicted_memory_before_gib: float | None = None
    predicted_memory_after_gib: float | None = None


class CalibrationResult(BaseModel):
    """What ``shardplan calibrate --json`` prints and ``shardplan.calibration`` returns."""

    model_config = ConfigDict(frozen=True)

    base: str
    fitted: list[str]
    at_bounds: list[str]
    calibration: Calibration
    runs: list[RunFit]
    mean_abs_error_before_pct: float | None
    mean_abs_error_after_pct: float | None
    loo_mean_abs_error_pct: float | None
    system_file: dict[str, Any]
    output: str | None = None


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def _mean_abs(xs: list[float | None]) -> float | None:
    vals = [abs(x) for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def _memory(system: SystemSpec, run: Run) -> float:
    rep = estimate_training(run.model, system, run.gpus, run.workload, run.layout)
    return rep.memory.total_bytes


def system_file(base_name: str, system: SystemSpec, cal: Calibration) -> dict[str, Any]:
    """The file ``--output`` writes: ``base:`` a preset plus the block, or the whole system for a file base."""
    block = cal.model_dump(mode="json", exclude_none=True)
    if base_name.strip().lower() in SYSTEMS:
        return {"base": base_name.strip().lower(), "calibration": block}
    data = system.model_dump(mode="json")
    data["calibration"] = block
    return data


def calibrate(hardware: str | SystemSpec, runs: str | Path | list[dict[str, Any]], *,
              output: str | Path | None = None, today: dt.date | None = None) -> CalibrationResult:
    """Fit the base system's calibration to measured runs; with ``output``, write the system file (YAML/JSON)."""
    from shardplan.hardware import resolve_system

    system = resolve_system(hardware) if isinstance(hardware, str) else hardware
    base_name = hardware if isinstance(hardware, str) else system.name
    checked = load_runs(runs, system)
    all_runs = [r for r, _ in checked]
    timed = [r for r in all_runs if r.step_time_s is not None]
    before = {r.index: rep.metrics.step_time_s for r, rep in checked}
    no_mem = with_calibration(system, system.calibration.model_copy(update={"memory_overhead_bytes": 0.0}))
    mem_raw = {r.index: _memory(no_mem, r) for r in all_runs}

    values: dict[str, float] = {}
    fitted: list[str] = []
    loo: dict[int, float] = {}
    if timed:
        fit = select_and_fit(system, timed)
        values.update(fit.values)
        fitted += list(fit.params)
        if len(timed) >= 3:
            loo = dict(zip((r.index for r in timed), leave_one_out(system, timed, fit).tolist(), strict=True))
    overhead = fit_memory(all_runs, [mem_raw[r.index] for r in all_runs])
    if overhead is not None:
        values["memory_overhead_bytes"] = overhead
        fitted.append("memory_overhead_bytes")
    loo_abs = [abs(v) for v in loo.values()]
    date = (today or dt.datetime.now(dt.UTC).date()).isoformat()
    cal = Calibration.model_validate({
        **system.calibration.model_dump(), **values, "runs": [r.fingerprint for r in all_runs], "date": date,
        "loo_error_pct": float(np.mean(loo_abs)) * 100 if loo_abs else None,
        "band_pct": float(np.quantile(loo_abs, BAND_QUANTILE)) * 100 if loo_abs else None,
    })
    after_sys = with_calibration(system, cal)
    after = dict(zip((r.index for r in timed), predict_steps(after_sys, timed, {}).tolist(), strict=True))
    rows = []
    for r in all_runs:
        meas = r.step_time_s
        b, a = (before[r.index], after.get(r.index)) if meas is not None else (None, None)
        mem_b = mem_raw[r.index] + system.calibration.memory_overhead_bytes
        rows.append(RunFit(
            index=r.index, id=r.name, fingerprint=r.fingerprint, measured_step_time_s=meas, predicted_before_s=b,
            predicted_after_s=a, error_before_pct=_pct(b / meas - 1) if meas and b else None,
            error_after_pct=_pct(a / meas - 1) if meas and a else None, loo_error_pct=_pct(loo.get(r.index)),
            measured_peak_memory_gib=None if r.peak_memory_bytes is None else r.peak_memory_bytes / GiB,
            predicted_memory_before_gib=mem_b / GiB,
            predicted_memory_after_gib=(mem_raw[r.index] + cal.memory_overhead_bytes) / GiB,
        ))
    content = system_file(base_name, system, cal)
    if output is not None:
        out = Path(output)
        text = (json.dumps(content, indent=2) + "\n" if out.suffix.lower() == ".json"
                else yaml.safe_dump(content, sort_keys=False))
        out.write_text(text)
    return CalibrationResult(
        base=base_name, fitted=fitted, calibration=cal, runs=rows,
        at_bounds=[p for p in fitted if getattr(cal, p) in bounds(p)],
        mean_abs_error_before_pct=_mean_abs([x.error_before_pct for x in rows]),
        mean_abs_error_after_pct=_mean_abs([x.error_after_pct for x in rows]),
        loo_mean_abs_error_pct=cal.loo_error_pct, system_file=content,
        output=None if output is None else str(output),
    )
