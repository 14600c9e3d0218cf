"""Sums shared by groups of rows (``stage_sums.SharedSums`` over a ``stages.KindTable``) are the sums on every row,
bit for bit, whether the keys determine the rows' stage shapes or not; ``train_cost`` over a kind table is
``train_cost`` over the rows' own per-kind costs."""

import numpy as np
import pytest

from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.row_trees import map_rows
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.costmodel.training.stage_memory import row_masks
from shardplan.costmodel.training.stage_split import rank_shape
from shardplan.costmodel.training.stage_sums import SharedSums, stage_sums
from shardplan.costmodel.training.stages import kind_costs, kind_table
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model

CASES = [("mixtral-8x7b", "dgx-h100", 32, 64, 4096), ("gpt3-175b", "dgx-a100-40gb", 64, 128, 2048)]


def _arrays(tree, n: int) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    map_rows(tree, lambda x: out.append(x) or x, n)
    return out


def _same(a, b, n: int) -> bool:
    xs, ys = _arrays(a, n), _arrays(b, n)
    return len(xs) == len(ys) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(xs, ys, strict=True))


def _rows(model: str, hw: str, gpus: int, batch: int, seq: int):
    spec, system = get_model(model), get_system(hw)
    work = TrainWorkload(seq_len=seq, global_batch=batch)
    rows = enumerate_layouts(spec, work, SpaceRequest(num_gpus=gpus, max_tp=8, max_cp=2)).rows
    rows = rows.replace(sel=np.where(rows.rc == 1, np.arange(len(rows)) % 4, rows.sel))  # several module sets
    return Ctx(spec, system, work, rows)


@pytest.mark.parametrize(("model", "hw", "gpus", "batch", "seq"), CASES)
def test_shared_sums_are_the_sums_on_every_row(model, hw, gpus, batch, seq) -> None:
    ctx = _rows(model, hw, gpus, batch, seq)
    r, n = ctx.rows, len(ctx.rows)
    table = kind_table(ctx)
    own = table.expand()
    assert _same(own, kind_costs(ctx, ops=False), n)
    rank = np.arange(n) % r.pp  # a pipeline rank of each row, and a layer count that follows from it and v
    layers = (rank + r.v).astype(float)
    shape = rank_shape("test", ctx.model, rank, layers, r.pp.astype(float))
    want = stage_sums(own, shape, row_masks(ctx), (n,))
    shared = SharedSums.of(table, r.sel, [rank, r.v])
    assert len(shared.first) < n  # rows do share
    assert _same(shared.sums(shape), want, n)
    loose = SharedSums.of(table, r.sel, [])  # keys that do not fix the shape: summed row by row
    assert _same(loose.sums(shape), want, n)


@pytest.mark.parametrize(("model", "hw", "gpus", "batch", "seq"), CASES)
def test_train_cost_over_a_kind_table(model, hw, gpus, batch, seq) -> None:
    ctx = _rows(model, hw, gpus, batch, seq)
    n, table = len(ctx.rows), kind_table(ctx)
    whole = train_cost(ctx.model, ctx.system, ctx.work, ctx.rows, ops=False, kinds=table.expand())
    shared = train_cost(ctx.model, ctx.system, ctx.work, ctx.rows, ops=False, kinds=table)
    assert shared.kinds is table.kinds
    for name in ("step_time_s", "peak_memory", "host_bytes_per_node", "model_flops", "hardware_flops",
                 "executed_flops", "dp_exposed_s", "tp_exposed_s", "ep_exposed_s", "pp_exposed_s", "bubble_s"):
        assert np.array_equal(getattr(shared, name), getattr(whole, name)), name
    assert all(_same(a, b, n) for a, b in zip(shared.stages, whole.stages, strict=True))
