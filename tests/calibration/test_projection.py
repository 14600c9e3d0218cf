"""Projection: a series made with a known calibration is projected exactly from its smallest runs."""

from __future__ import annotations

import pytest

from shardplan.calibration.projection import SeriesPoint, calibration_points, project_series
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.spec import Calibration, with_calibration
from shardplan.models import get_model


def test_weak_scaling_series_projected_from_its_smallest_points() -> None:
    base = get_system("dgx-h100")
    true = with_calibration(base, Calibration(gemm_scale=0.8))
    model = get_model("llama-3.1-8b")
    points = []
    for dp in (2, 4, 8, 16, 32):  # weak scaling: 8 sequences per data-parallel rank
        work = TrainWorkload(seq_len=4096, global_batch=8 * dp)
        lay = TrainLayout(tp=4, dp=dp, microbatch=1, recompute=Recompute.SELECTIVE, sequence_parallel=True,
                          zero_stage=1)
        step = estimate_training(model, true, 4 * dp, work, lay).metrics.step_time_s
        points.append(SeriesPoint(f"dp{dp}", model, 4 * dp, work, lay, step))
    out = project_series(base, points)
    assert calibration_points(5) == 2 and [p.id for p in out] == ["dp8", "dp16", "dp32"]
    assert out[0].calibrated_on == ("dp2", "dp4") and out[0].fitted["gemm_scale"] == pytest.approx(0.8, rel=1e-3)
    assert all(abs(p.error) < 1e-3 for p in out)
