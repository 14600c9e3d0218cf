"""Flat tables: dotted columns, no bare column for a group that is missing on some rows, exact CSV round trip."""

from __future__ import annotations

from shardplan.sweep import tabular


def test_flat_columns_and_csv_round_trip(tmp_path):
    rows = [{"hardware": "dgx-h100", "num_gpus": 12, "status": "infeasible", "plan": None, "suggestions": []},
            {"hardware": "dgx-h100", "num_gpus": 16, "status": "optimal", "suggestions": ["use 8 GPUs"],
             "plan": {"tp": 2, "offload": {"weights": 0.0}}, "metrics": {"mfu": 0.1 + 0.2, "ok": True}}]
    cols, flat = tabular.table(rows)
    assert cols == ["hardware", "num_gpus", "status", "suggestions", "plan.tp", "plan.offload.weights",
                    "metrics.mfu", "metrics.ok"]
    assert flat[0]["plan.tp"] is None and flat[1]["metrics.mfu"] == 0.1 + 0.2
    path = tmp_path / "rows.csv"
    tabular.write_csv(rows, path)
    assert tabular.read_csv(path) == flat  # floats exactly (0.30000000000000004), bools, None, JSON lists
