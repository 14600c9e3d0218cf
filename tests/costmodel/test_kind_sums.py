"""Per-kind sums costed once per distinct parallel shape equal the per-row costing (``kind_costs(ops=False)``)."""

import dataclasses

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.costmodel.training.stages import kind_costs
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model


def _arrays(x, path=""):
    """Every numpy array inside a KindCost, by field path (operator lists skipped)."""
    if isinstance(x, np.ndarray):
        yield path, x
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            if f.name not in ("fwd_ops", "bwd_ops"):
                yield from _arrays(getattr(x, f.name), f"{path}.{f.name}")


@pytest.mark.parametrize(("model", "hw", "gpus", "dtype", "ep_overlap"),
                         [("mixtral-8x7b", "dgx-h100", 32, "fp8", False),
                          ("mixtral-8x7b", "dgx-h100", 32, "bf16", True),  # EP overlap: depends on v and rc too
                          ("llama-3.1-8b", "dgx-a100-80gb", 16, "bf16", False)])
def test_distinct_shapes_equal_per_row(model: str, hw: str, gpus: int, dtype: str, ep_overlap: bool) -> None:
    spec, system = get_model(model), get_system(hw)
    system = system.model_copy(update={"software": system.software.model_copy(update={"ep_comm_overlap": ep_overlap})})
    work = TrainWorkload(seq_len=4096, global_batch=64, dtype=dtype)
    rows = enumerate_layouts(spec, work, SpaceRequest(num_gpus=gpus, batches=[32, 64])).rows
    rng = np.random.default_rng(0)
    # shuffle, and vary what the sums must not depend on: recomputed layers and offload shares
    rows = rows.take(rng.permutation(len(rows))[:3000])
    rows = rows.replace(rk=rng.integers(0, 5, len(rows)), f_act=rng.random(len(rows)), f_opt=rng.random(len(rows)))
    ctx = Ctx(spec, system, work, rows)
    full, sums = kind_costs(ctx), kind_costs(ctx, ops=False)
    assert len(np.unique(np.stack([rows.tp, rows.pp, rows.dp, rows.ep, rows.mb, rows.gb], 1), axis=0)) < len(rows)
    for kind, cost in full.items():
        assert sums[kind].fwd_ops == [] and sums[kind].bwd_ops == []
        for (path, a), (_, b) in zip(_arrays(cost), _arrays(sums[kind]), strict=True):
            np.testing.assert_array_equal(np.broadcast_to(a, np.shape(b)), b, err_msg=f"{kind}{path}")
    t_full, t_sums = train_cost(spec, system, work, rows), train_cost(spec, system, work, rows, ops=False)
    np.testing.assert_array_equal(t_full.step_time_s, t_sums.step_time_s)
    np.testing.assert_array_equal(t_full.peak_memory, t_sums.peak_memory)
