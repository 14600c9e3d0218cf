"""The table's later passes cost only the rows they change or add and splice them in: the table must equal one
pass of ``train_cost`` over its final rows, every array of every stage, bit for bit (brute force over the same
cost model), and each row's per-kind costs (``TrainTable.kinds_of``) must be that pass's."""

import dataclasses

import numpy as np
import pytest

from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.row_trees import map_rows, splice_rows
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.costmodel.training.step import train_cost
from shardplan.costmodel.training.table import build_train_table
from shardplan.hardware import get_system
from shardplan.models import get_model

# (model, system, GPUs, global batch, seq, offload as a last resort): module sets (rows added), partial full
# recompute (rows recosted), and offload variants (rows appended) where memory is short
CASES = [("mixtral-8x7b", "dgx-h100", 32, 64, 4096, False),
         ("llama-3.1-70b", "dgx-h100", 64, 128, 8192, True),
         ("gpt3-175b", "dgx-a100-40gb", 64, 128, 2048, False)]


def _arrays(tree, n):
    out = []
    map_rows(tree, lambda x: out.append(x) or x, n)
    return out


@pytest.mark.parametrize(("model", "hw", "gpus", "batch", "seq", "last_resort"), CASES)
def test_spliced_table_equals_one_pass_over_its_rows(model, hw, gpus, batch, seq, last_resort) -> None:
    spec, system = get_model(model), get_system(hw)
    work = TrainWorkload(seq_len=seq, global_batch=batch)
    space = enumerate_layouts(spec, work, SpaceRequest(num_gpus=gpus, max_tp=8, max_cp=2))
    table = build_train_table(spec, system, work, space.rows, offload_last_resort=last_resort)
    n = len(table)
    assert n > len(space.rows)  # rows were added (module sets or offload variants): the splice path ran
    whole = train_cost(spec, system, work, table.rows, ops=False)
    for name in ("step_time_s", "peak_memory", "host_bytes_per_node", "model_flops", "hardware_flops",
                 "dp_exposed_s", "ep_exposed_s", "bubble_s"):
        assert np.array_equal(getattr(table.cost, name), getattr(whole, name)), name
    for mine, ref in zip(table.cost.stages, whole.stages, strict=True):
        for a, b in zip(_arrays(mine, n), _arrays(ref, n), strict=True):
            assert np.array_equal(a, b)
    pick = np.arange(n)[::7]
    got = table.kinds_of(pick)
    want = map_rows(whole.kinds, lambda x: x[pick], n, drop_lists=True)
    for a, b in zip(_arrays(got, len(pick)), _arrays(want, len(pick)), strict=True):
        assert np.array_equal(a, b)


@dataclasses.dataclass(frozen=True, slots=True)
class _Leaf:
    name: str
    x: np.ndarray
    fixed: np.ndarray  # not one entry per row: shared


def test_splice_replaces_rows_and_appends() -> None:
    base = {"a": _Leaf("a", np.array([0.0, 1.0, 2.0]), np.array([9.0])), "b": [np.array([5.0, 6.0, 7.0])]}
    sub = {"a": _Leaf("a", np.array([10.0, 30.0]), np.array([9.0])), "b": [np.array([50.0, 70.0])]}
    out = splice_rows(base, sub, np.array([1]), 3, 2)
    assert out["a"].x.tolist() == [0.0, 10.0, 2.0, 30.0]
    assert out["b"][0].tolist() == [5.0, 50.0, 7.0, 70.0]
    assert out["a"].fixed is base["a"].fixed and out["a"].name == "a"
    assert base["a"].x.tolist() == [0.0, 1.0, 2.0]  # the base is not modified
