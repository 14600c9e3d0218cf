"""Rows and summary of the validation group "at the optimum" (``validation.optimum``): per tuned published run the
measured throughput, the cost model's prediction for its published layout and the free planner's, and the group's
figures against issue 11's targets.

A record may carry ``known_regression``: the publisher's own tracker lists that measurement as a performance
regression of its software against an earlier release of the same layout (a bug it set out to fix, not the
hardware's physics). Such a row is scored and shown like any other; the summary gives the free planner's mean signed
error and the H100/H200 published-layout MAPE over all rows and, beside them, without those rows.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, ConfigDict

BAND = (-10.0, 15.0)  # free-planner target band, percent of measured throughput (issue 11)
H100_ERA = ("dgx-h100", "hgx-h200")  # the systems of the pinned-MAPE target


class OptimumRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    gpus: int
    hardware: str
    dtype: str
    measured: float  # tokens/s per GPU
    derived_from_tflops: bool
    pinned: float | None
    pinned_error_pct: float | None
    pinned_layout: str
    pinned_fits: bool | None
    free: float | None
    free_error_pct: float | None
    free_layout: str | None
    why_free_faster: str | None = None  # when the free plan beats the published layout by > 15%: the costs it removes
    failure: str | None = None
    framework: str | None = None  # the knobs the free plan could use (the record's framework; None: every knob)
    known_regression: str | None = None  # the publisher's regression report for this measurement (URL)


class OptimumSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    cases: int
    free_ran: int
    free_mean_signed_pct: float | None
    free_mape_pct: float | None
    free_within_band: int
    pinned_ran: int
    pinned_mean_signed_pct: float | None
    pinned_mape_pct: float | None
    pinned_h100_mape_pct: float | None
    band_pct: tuple[float, float] = BAND
    regressions: int = 0  # rows whose measurement its publisher lists as a software regression
    free_mean_signed_without_regressions_pct: float | None = None
    pinned_h100_mape_without_regressions_pct: float | None = None


class OptimumReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    rows: list[OptimumRow]
    summary: OptimumSummary


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def summarise(rows: list[OptimumRow]) -> OptimumSummary:
    def free(rs: list[OptimumRow]) -> list[float]:
        return [r.free_error_pct for r in rs if r.free_error_pct is not None]

    def h100(rs: list[OptimumRow]) -> list[float]:
        return [abs(r.pinned_error_pct) for r in rs if r.pinned_error_pct is not None and r.hardware in H100_ERA]

    pinned = [r.pinned_error_pct for r in rows if r.pinned_error_pct is not None]
    sound = [r for r in rows if r.known_regression is None]
    f = free(rows)
    return OptimumSummary(
        cases=len(rows), free_ran=len(f), free_mean_signed_pct=_mean(f), free_mape_pct=_mean([abs(x) for x in f]),
        free_within_band=sum(BAND[0] <= x <= BAND[1] for x in f), pinned_ran=len(pinned),
        pinned_mean_signed_pct=_mean(pinned), pinned_mape_pct=_mean([abs(x) for x in pinned]),
        pinned_h100_mape_pct=_mean(h100(rows)), regressions=len(rows) - len(sound),
        free_mean_signed_without_regressions_pct=_mean(free(sound)),
        pinned_h100_mape_without_regressions_pct=_mean(h100(sound)))
