"""Synthetic measured runs: made with the cost model itself on a system with a known calibration."""

from __future__ import annotations

from typing import Any

from shardplan.api import estimate_training
from shardplan.hardware import get_system
from shardplan.hardware.spec import Calibration, with_calibration

# (model, gpus, global batch, seq len, layout as estimate-train names)
LAYOUTS: list[tuple[str, int, int, int, dict[str, Any]]] = [
    ("llama-3.1-8b", 8, 16, 4096, {"zero": 1}),
    ("llama-3.1-8b", 8, 64, 4096, {"tp": 2, "zero": 1}),
    ("llama-3.1-8b", 16, 32, 2048, {"microbatch": 2, "zero": 1}),
    ("llama-3.1-70b", 64, 64, 4096, {"tp": 8, "pp": 2, "recompute": "selective", "sequence_parallel": True}),
]


def synthetic_runs(cal: Calibration, layouts: list[tuple[str, int, int, int, dict[str, Any]]] = LAYOUTS,
                   base: str = "dgx-h100") -> list[dict[str, Any]]:
    """Runs-file entries whose measured step times are the cost model's on ``base`` calibrated with ``cal``."""
    true = with_calibration(get_system(base), cal)
    runs = []
    for i, (model, gpus, batch, seq, lay) in enumerate(layouts):
        kw = {("zero_stage" if k == "zero" else k): v for k, v in lay.items()}
        rep = estimate_training(model, true, gpus=gpus, global_batch=batch, seq_len=seq, **kw)
        runs.append({"id": f"run{i}", "model": model, "gpus": gpus, "global_batch": batch, "seq_len": seq,
                     "layout": lay, "measured": {"step_time_s": rep.metrics.step_time_s}})
    return runs
