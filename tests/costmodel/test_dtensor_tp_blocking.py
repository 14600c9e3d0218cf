"""torchtitan and NeMo AutoModel run DTensor TP, whose sequence-parallel collectives block (async TP is off by default
in both: ``frameworks._TORCH_NATIVE``): under ``--framework`` either, every TP collective of a layer is exposed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from shardplan.cli import app
from shardplan.costmodel.core import comm
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
WORK = TrainWorkload(seq_len=4096, global_batch=64)
LAYOUT = TrainLayout(tp=2, dp=4, microbatch=1, sequence_parallel=True, zero_stage=3)


@pytest.mark.parametrize("framework", ["torchtitan", "automodel"])
def test_dtensor_tp_collectives_are_all_exposed(framework: str) -> None:
    system = framework_system(get_system("dgx-h100"), framework)
    assert system.software.tp_comm_overlap == 0.0 and not system.software.overlap_p2p_comm
    rep = estimate_training(MODEL, system, 8, WORK, LAYOUT)
    # By hand: a sequence-parallel attention or MLP block all-gathers its input (4096 tokens × 4096 × 2 B) before
    # the column-parallel GEMM and reduce-scatters the row-parallel GEMM's output; the backward runs the transposes
    # (reduce-scatter of the input gradient, all-gather of the output gradient): four collectives of the layer input
    # over the two TP ranks of one node, none hidden.
    one = float(comm.all_gather_time(system, 4096 * 4096 * 2.0, 2, 1))
    rows = {r.kind: r for r in rep.layers}
    for kind in ("attention", "mlp"):
        assert rows[kind].comm_tp_s == pytest.approx(4 * one, rel=1e-9)
    # the step's transformer layers (32 of each kind), 16 microbatches per rank (64 sequences over DP 4), all exposed;
    # with them the one stage's embedding (its output reduce-scattered to the sequence shards; in backward the
    # gradient gathered), the LM head (its input gathered; in backward the gradient reduce-scattered) and the
    # vocab-parallel loss's forward all-reduce of the max, sum and target logit (3 fp32 per token), whose backward
    # needs none
    loss = float(comm.all_reduce_time(system, 4096 * 12.0, 2, 1))
    assert rep.metrics.tp_exposed_s == pytest.approx(16 * ((64 * 4 + 2 + 2) * one + loss), rel=1e-9)
    megatron = estimate_training(MODEL, get_system("dgx-h100"), 8, WORK, LAYOUT)
    assert megatron.metrics.tp_exposed_s < 0.5 * rep.metrics.tp_exposed_s  # Transformer Engine userbuffers hide most


def test_cli_framework_prices_blocking_tp() -> None:
    args = ["estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "8", "-b", "64", "-s", "4096",
            "--tp", "2", "--sequence-parallel", "--microbatch", "1", "--zero", "3", "--json"]
    runner = CliRunner()
    tt = json.loads(runner.invoke(app, [*args, "--framework", "torchtitan"]).stdout)
    plain = json.loads(runner.invoke(app, args).stdout)
    want = estimate_training(MODEL, framework_system(get_system("dgx-h100"), "torchtitan"), 8, WORK, LAYOUT)
    assert tt["metrics"]["tp_exposed_s"] == pytest.approx(want.metrics.tp_exposed_s, rel=1e-9)
    assert tt["metrics"]["tp_exposed_s"] > 2 * plain["metrics"]["tp_exposed_s"]  # Megatron's userbuffers hide most


def test_a_system_file_that_states_async_tp_keeps_it(tmp_path) -> None:
    """A field the user's system file states stays as written under ``--framework`` (torchtitan's 405B recipe turns
    async TP on); the framework still fixes the others."""
    from shardplan.hardware.load import resolve_system

    path = tmp_path / "titan-async-tp.yaml"
    path.write_text("base: dgx-h100\nsoftware:\n  tp_comm_overlap: 0.4\n  tp_overlap_method: share\n")
    system = framework_system(resolve_system(str(path)), "torchtitan")
    sw = system.software
    assert (sw.tp_comm_overlap, sw.tp_overlap_method) == (0.4, "share")
    assert not sw.overlap_p2p_comm and sw.loss_memory == "torch_fp32"  # not stated: torchtitan's
    rep = estimate_training(MODEL, system, 8, WORK, LAYOUT)
    one = float(comm.all_gather_time(system, 4096 * 4096 * 2.0, 2, 1))
    # 'share': 60% of each collective shows, and the hidden 40% still slows the compute beside it by the measured
    # overlap slowdown (SoftwareSpec.overlap_slowdown, charged to the collective: tp_overlap.py), over the count above
    # (the layers' and the embedding's and head's sequence-parallel collectives); the loss's all-reduce shows whole
    shown = 0.6 + 0.4 * sw.overlap_slowdown
    loss = float(comm.all_reduce_time(system, 4096 * 12.0, 2, 1))
    assert rep.metrics.tp_exposed_s == pytest.approx(16 * (shown * (64 * 4 + 4) * one + loss), rel=1e-9)
    runner = CliRunner()
    args = ["estimate", "train", "-m", "llama-3.1-8b", "-H", str(path), "--gpus", "8", "-b", "64", "-s", "4096",
            "--tp", "2", "--sequence-parallel", "--microbatch", "1", "--zero", "3", "--framework", "torchtitan",
            "--json"]
    cli = json.loads(runner.invoke(app, args).stdout)
    assert cli["metrics"]["tp_exposed_s"] == pytest.approx(rep.metrics.tp_exposed_s, rel=1e-9)


def test_embedding_and_head_collectives_without_sequence_parallelism() -> None:
    """Megatron-Core without SP: the vocab-parallel embedding all-reduces its output, and the identity is its backward
    (``_ReduceFromModelParallelRegion``); the column-parallel LM head copies its input forward and all-reduces the
    input gradient backward, asynchronously beside its weight-gradient GEMM; the vocab-parallel loss all-reduces 3 fp32
    per token forward and nothing backward."""
    from shardplan.costmodel.training.backward import ASYNC_TP_CONTENTION

    system = get_system("dgx-h100")
    layout = TrainLayout(tp=2, dp=4, microbatch=1, sequence_parallel=False, zero_stage=1)
    rep = estimate_training(MODEL, system, 8, WORK, layout)
    rows = {r.kind: r for r in rep.layers}
    ar = float(comm.all_reduce_time(system, 4096 * 4096 * 2.0, 2, 1))  # 4096 tokens × 4096 hidden, bf16
    loss = float(comm.all_reduce_time(system, 4096 * 12.0, 2, 1))
    assert rows["embedding"].comm_tp_s == pytest.approx(ar, rel=1e-9)
    # the head's weight gradient (2 × 4096 × 4096 × 64,128 over the TP shard: 2.15 TFLOP, milliseconds) outlasts the
    # 117 µs all-reduce, so only the contention share of it shows
    assert rows["head"].comm_tp_s == pytest.approx(loss + ASYNC_TP_CONTENTION * ar, rel=1e-9)


def test_an_explicit_split_reports_the_exposed_collectives_the_uniform_estimate_does() -> None:
    """``estimate_split`` with the uniform split names the same exposed TP time as ``estimate_training``, the
    embedding's and the LM head's collectives included (train_cost's convention), with SP and without."""
    from shardplan.costmodel.training.stage_report import estimate_split

    system = get_system("dgx-h100")
    for layout in (TrainLayout(tp=2, pp=2, dp=2, microbatch=1, sequence_parallel=True, zero_stage=1),
                   TrainLayout(tp=2, pp=1, dp=4, microbatch=1, sequence_parallel=False, zero_stage=1)):
        uniform = estimate_training(MODEL, system, 8, WORK, layout)
        split = estimate_split(MODEL, system, 8, WORK, layout, [32 // layout.pp] * layout.pp)
        assert split.metrics.step_time_s == pytest.approx(uniform.metrics.step_time_s, rel=1e-9)
        assert split.metrics.tp_exposed_s == pytest.approx(uniform.metrics.tp_exposed_s, rel=1e-9)
