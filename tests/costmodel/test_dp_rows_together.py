"""Data-parallel sync is priced row by row: rows that differ only in their ZeRO stage (which share their collectives'
inputs, so ``dp_sync`` prices each distinct input once) cost together what each costs alone."""

import numpy as np
import pytest

from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model


@pytest.mark.parametrize(("model", "pp", "ep"), [("llama-3.1-8b", 1, 1), ("mixtral-8x7b", 1, 8),
                                                  ("llama-3.1-70b", 2, 1)])
def test_zero_stages_together_equal_alone(model, pp, ep) -> None:
    spec, system = get_model(model), get_system("dgx-h100")
    work = TrainWorkload(seq_len=4096, global_batch=64)
    zeros = [0, 1, 2, 3] if pp == 1 else [0, 1, 3]
    lays = [TrainLayout(tp=2, pp=pp, dp=16 // pp, ep=ep, etp=1 if ep > 1 else None, microbatch=1, zero_stage=z,
                        sequence_parallel=True) for z in zeros]
    together = train_cost(spec, system, work, LayoutArrays.from_layouts(lays, 64), ops=False)
    for i, lay in enumerate(lays):
        alone = train_cost(spec, system, work, LayoutArrays.from_layouts([lay], 64), ops=False)
        for name in ("dp_exposed_s", "zero3_exposed_s", "step_time_s"):
            assert float(getattr(together, name)[i]) == float(getattr(alone, name)[0]), (lay.zero_stage, name)
    assert len(set(np.round(together.step_time_s, 9))) > 1  # the stages do differ
