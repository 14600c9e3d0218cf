"""Projection: calibrate on the smallest runs of a published scaling series, predict the larger ones.

A series is one software stack on one machine at several GPU counts (a weak-scaling table, a strong-
scaling study). Its smallest point — the two smallest when it has three or more — are the calibration
runs (as a user would measure one small job); every other point is a projection, and its error is what
``shardplan validate --group projection`` reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.calibration.fit import predict_steps, select_and_fit
from shardplan.calibration.runs import Run
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


@dataclass(frozen=True)
class SeriesPoint:
    """One published run of a series, with its measured step time in seconds."""

    id: str
    model: ModelSpec
    gpus: int
    workload: TrainWorkload
    layout: TrainLayout
    step_time_s: float


@dataclass(frozen=True)
class Projected:
    id: str
    measured_step_time_s: float
    predicted_step_time_s: float
    calibrated_on: tuple[str, ...]
    fitted: dict[str, float]

    @property
    def error(self) -> float:
        return self.predicted_step_time_s / self.measured_step_time_s - 1


def calibration_points(n_points: int) -> int:
    """How many of a series' smallest points calibrate it: two when that leaves at least one to project."""
    return 2 if n_points >= 3 else 1


def project_series(system: SystemSpec, points: Sequence[SeriesPoint]) -> list[Projected]:
    """Calibrate ``system`` on the smallest point(s) of the series and predict every other point."""
    if len(points) < 2:
        raise ValueError("a series needs at least two points")
    ordered = sorted(points, key=lambda p: (p.gpus, p.id))
    runs = [Run(i, p.id, p.model, p.gpus, p.workload, p.layout, p.step_time_s, None, "")
            for i, p in enumerate(ordered)]
    k = calibration_points(len(runs))
    fit = select_and_fit(system, runs[:k])
    predicted = predict_steps(system, runs[k:], fit.values)
    on = tuple(r.name for r in runs[:k])
    return [Projected(r.name, float(r.step_time_s or 0.0), float(t), on, dict(fit.values))
            for r, t in zip(runs[k:], predicted, strict=True)]
