"""A cost-table row equals the evaluation of that layout alone (one implementation of the formulas)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.costmodel.training.table import build_train_table
from shardplan.hardware import get_system
from shardplan.models import get_model

CASES = [("llama-3.1-8b", "dgx-h100", 16, 64, 4096), ("mixtral-8x7b", "dgx-h100", 32, 64, 4096),
         ("gpt3-175b", "dgx-a100-80gb", 64, 128, 2048)]


@pytest.mark.parametrize(("model", "hw", "gpus", "batch", "seq"), CASES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_rows_equal_their_evaluation(model, hw, gpus, batch, seq, data) -> None:
    spec, system = get_model(model), get_system(hw)
    work = TrainWorkload(seq_len=seq, global_batch=batch)
    space = enumerate_layouts(spec, work, SpaceRequest(num_gpus=gpus, max_tp=8, max_cp=2))
    table = build_train_table(spec, system, work, space.rows)
    i = data.draw(st.integers(0, len(table) - 1))
    rep = estimate_training(spec, system, gpus, work, table.rows.row(i))
    assert rep.metrics.step_time_s == pytest.approx(float(table.step_time_s[i]), rel=1e-9)
    assert rep.memory.total_bytes == pytest.approx(float(table.cost.peak_memory[i]), rel=1e-9)
    assert (rep.status == "feasible") == bool(table.fits[i])


def test_table_is_fast_enough_to_be_vectorised() -> None:
    """Sanity (not a benchmark): 10k rows cost in one call, all finite."""
    spec, system = get_model("gpt3-175b"), get_system("dgx-a100-80gb")
    work = TrainWorkload(seq_len=2048, global_batch=1536)
    space = enumerate_layouts(spec, work, SpaceRequest(num_gpus=1024))
    table = build_train_table(spec, system, work, space.rows)
    assert len(table) > 10_000
    assert np.isfinite(table.step_time_s).all() and (table.step_time_s > 0).all()
