"""Calibrate a system to measured runs (``shardplan calibrate``) and project with it.

``calibrate(hardware, runs)`` fits the ``calibration`` block of a system file (see
``hardware.spec.Calibration``) to a few measured training runs; ``projection`` checks, on published
scaling series, how well a system calibrated on a series' smallest runs predicts the larger ones.
This package uses the cost model only (never the planner or the validation groups).
"""

from shardplan.calibration.api import CalibrationResult, RunFit, calibrate

__all__ = ["CalibrationResult", "RunFit", "calibrate"]
