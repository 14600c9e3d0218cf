"""Sequence parallelism splits each sequence's seq/cp tokens evenly over the TP ranks (Megatron-LM
tensor_parallel/mappings.py ``_split_along_first_dim`` asserts it): a pinned layout that cannot split is one line of
bad input, and the planner leaves such rows out, saying so."""

from __future__ import annotations

from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.models import get_model

BASE = ("-m", "llama-3.1-8b", "-H", "dgx-h100", "-b", "8")


def test_a_pinned_split_that_is_not_even_is_one_line_exit_2(run_cli) -> None:
    r = run_cli("estimate", "train", *BASE, "-s", "4100", "--tp", "8", "--sequence-parallel")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "tp (8) must divide seq_len/cp (4100)" in r.err
    # 4,100 tokens split over TP 4 (1,025 each), or TP 8 without sequence parallelism, are fine
    assert run_cli("estimate", "train", *BASE, "-s", "4100", "--tp", "4", "--sequence-parallel").code == 0
    assert run_cli("estimate", "train", *BASE, "-s", "4100", "--tp", "8").code == 0
    # with CP 2 each rank splits 2,048 of 4,096 tokens: TP 8 divides it
    assert run_cli("estimate", "train", *BASE, "-g", "16", "-s", "4096", "--tp", "8", "--cp", "2",
                   "--sequence-parallel").code == 0


def test_the_planner_prunes_uneven_sequence_splits() -> None:
    work = TrainWorkload(seq_len=4100, global_batch=8)
    space = enumerate_layouts(get_model("llama-3.1-8b"), work, SpaceRequest(num_gpus=8))
    rows = [(int(tp), int(sp)) for tp, sp in zip(space.rows.tp, space.rows.sp, strict=True)]
    assert (8, 1) not in rows and (8, 0) in rows and (4, 1) in rows  # 4,100 = 4 × 1,025, not a multiple of 8
    assert space.pruned["sequence parallel with seq_len/cp not divisible by tp"] > 0
