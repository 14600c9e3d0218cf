"""Gradient accumulation over whole pipeline schedules (``TrainWorkload.local_batch``: torchtitan's and NeMo
AutoModel's ``local_batch_size``): a step runs gb/(dp·local_batch) schedules one after another, each with its own
fill and drain (Narayanan et al. 2021 §2.2, per schedule) and, under torch pipelining, its own gradient reduction
and, with FSDP, its own weight gather (pytorch pipelining/stage.py: post-backward at each schedule's last backward
reshards and reduce-scatters)."""

import dataclasses

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload, pipeline_schedules
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts, validate_layout
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
SYSTEM = get_system("dgx-h100")
LAYOUT = TrainLayout(pp=4, dp=4)  # 16 GPUs; 64 sequences a step: 16 per dp rank, microbatch 1
ONE = TrainWorkload(seq_len=4096, global_batch=64)
FOUR = ONE.model_copy(update={"local_batch": 4})  # 16 / 4 = 4 schedules of 4 microbatches


def _run(work: TrainWorkload, layout: TrainLayout = LAYOUT):
    return estimate_training(MODEL, SYSTEM, 16, work, layout)


def test_schedules_per_step_by_hand() -> None:
    assert float(pipeline_schedules(64, 4, 4, None)) == 1.0
    assert float(pipeline_schedules(64, 4, 4, 4)) == 4.0  # 64 / (4 · 4)
    assert float(pipeline_schedules(64, 4, 4, 16)) == 1.0  # one schedule holds the rank's whole batch
    assert float(pipeline_schedules(64, 16, 1, 4)) == 1.0  # no pipeline: accumulation is back-to-back microbatches
    assert _run(FOUR).plan.schedules == 4 and _run(ONE).plan.schedules == 1


def test_each_schedule_fills_and_drains_the_pipeline() -> None:
    """Same per-microbatch time; the bubble is 4 × (p−1)/v slots instead of one: (16 + 4·3)/(16 + 3) of the pipeline.
    Without interleaving the per-microbatch slot does not depend on the schedules."""
    one, four = _run(ONE).metrics, _run(FOUR).metrics
    per_mb = one.bubble_s / 3
    assert four.bubble_s == pytest.approx(4 * one.bubble_s, rel=1e-12)
    assert one.pipeline_s == pytest.approx(19 * per_mb, rel=1e-12)
    assert four.pipeline_s == pytest.approx(28 * per_mb, rel=1e-12)
    assert four.pp_exposed_s == pytest.approx(one.pp_exposed_s * 28 / 19, rel=1e-12)


def test_fsdp_under_pp_reduces_and_gathers_once_per_schedule() -> None:
    lay = dataclasses.replace(LAYOUT, zero_stage=3)
    one, four = _run(ONE, lay).metrics, _run(FOUR, lay).metrics
    assert one.dp_exposed_s > 0 and one.zero3_exposed_s > 0
    assert four.dp_exposed_s == pytest.approx(4 * one.dp_exposed_s, rel=1e-12)
    assert four.zero3_exposed_s == pytest.approx(4 * one.zero3_exposed_s, rel=1e-12)


def test_ddp_reduces_once_per_schedule() -> None:
    one, four = _run(ONE).metrics, _run(FOUR).metrics  # ZeRO-0: an all-reduce after each schedule
    assert four.dp_exposed_s == pytest.approx(4 * one.dp_exposed_s, rel=1e-12)


def test_layouts_must_hold_whole_schedules() -> None:
    with pytest.raises(ShardplanError, match="local batch \\(5\\) must divide") as e:
        validate_layout(MODEL, 16, ONE.model_copy(update={"local_batch": 5}), LAYOUT)
    assert e.value.field == "local-batch"
    with pytest.raises(ShardplanError, match="multiple of microbatch"):
        validate_layout(MODEL, 16, FOUR, dataclasses.replace(LAYOUT, microbatch=8))
    with pytest.raises(ShardplanError, match="per schedule, 2, to be a multiple of pp"):
        validate_layout(MODEL, 16, ONE.model_copy(update={"local_batch": 2}),
                        dataclasses.replace(LAYOUT, interleave=2))
    validate_layout(MODEL, 16, FOUR, dataclasses.replace(LAYOUT, interleave=2))  # 4 per schedule, pp 4


def test_enumeration_keeps_only_whole_schedules() -> None:
    space = enumerate_layouts(MODEL, FOUR, SpaceRequest(num_gpus=16, max_interleave=2))
    r = space.rows
    deep = r.pp > 1
    assert deep.any()
    assert ((r.gb[deep] // r.dp[deep]) % 4 == 0).all()
    assert (4 % r.mb[deep] == 0).all()
    assert ((4 // r.mb[deep]) % r.pp[deep] == 0)[r.v[deep] > 1].all()
    # 32 sequences per schedule: dp ≥ 4 leaves a rank 16 or fewer, not a whole schedule
    big = enumerate_layouts(MODEL, ONE.model_copy(update={"local_batch": 32}), SpaceRequest(num_gpus=16))
    assert big.pruned["batch per dp rank not a multiple of local_batch"] > 0
    assert (big.rows.dp[big.rows.pp > 1] <= 2).all() and (big.rows.pp == 1).any()


EST = ("estimate", "train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "--pp", "4", "-b",
       "64", "--seq-len", "4096")
PLAN = ("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "-b", "64", "--seq-len", "4096")


def test_cli_estimate_and_bad_input(run_cli) -> None:
    one, four = run_cli(*EST, "--json").json(), run_cli(*EST, "--json", "--local-batch", "4").json()
    assert four["plan"]["schedules"] == 4 and one["plan"]["schedules"] == 1
    assert four["metrics"]["bubble_s"] == pytest.approx(4 * one["metrics"]["bubble_s"], rel=1e-9)
    assert "schedules=4" in run_cli(*EST, "--local-batch", "4").out
    bad = run_cli(*EST, "--local-batch", "5")
    assert bad.code == 2 and "local-batch" in bad.err and "Traceback" not in bad.err
    none = run_cli(*PLAN, "--pp", "4", "--local-batch", "7")  # 16 GPUs, PP 4: dp 4 holds 16 a rank, not 7s
    assert none.code == 2 and none.err.count("\n") == 1 and "local-batch" in none.err
    mega = run_cli(*PLAN, "--framework", "megatron", "--local-batch", "4")
    assert mega.code == 2 and "one pipeline schedule" in mega.err
    for fmt in ("megatron", "deepspeed"):  # launchers that run a step as one schedule cannot take it
        exp = run_cli(*EST, "--local-batch", "4", "--export", fmt)
        assert exp.code == 2 and f"{fmt} runs every microbatch" in exp.err


def test_planner_and_torchtitan_export_carry_the_schedule(run_cli) -> None:
    res = run_cli(*PLAN, "--pp", "4", "--local-batch", "4", "--json")
    assert res.code == 0, res.err
    plan = res.json()["plan"]
    assert plan["schedules"] == 64 // (plan["dp"] * 4)
    toml = run_cli(*PLAN, "--pp", "4", "--local-batch", "4", "--export", "torchtitan")
    assert toml.code == 0, toml.err
    assert "local_batch_size = 4" in toml.out and "global_batch_size = 64" in toml.out


def test_pipeline_plot_draws_one_schedule_and_counts_them_all(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from shardplan.cli.plots import pipeline_plot

    rep = _run(FOUR)
    drawn = pipeline_plot(rep.plan, rep.stages, tmp_path / "p.png", title="t", pipeline_s=rep.metrics.pipeline_s)
    assert drawn == pytest.approx(rep.metrics.bubble_s, rel=5e-3)
    assert (tmp_path / "p.png").stat().st_size > 0


def test_activations_in_flight_are_a_schedules() -> None:
    """1F1B keeps min(microbatches of the schedule, stages left) in flight: 16 schedules of 4 microbatches hold what
    one schedule of 4 holds, not what one of 64 holds (llama-3.1-70b, TP 8 × PP 8, full recompute)."""
    model = get_model("llama-3.1-70b")
    lay = TrainLayout(tp=8, pp=8, dp=1, recompute=Recompute.FULL, sequence_parallel=True)

    def acts(gb: int, local: int | None) -> float:
        work = TrainWorkload(seq_len=4096, global_batch=gb, local_batch=local)
        return estimate_training(model, SYSTEM, 64, work, lay).stages[0].activations_bytes

    assert acts(64, 4) == pytest.approx(acts(4, None), rel=1e-12)
    assert acts(64, 4) < acts(64, None)


def test_without_pp_the_local_batch_is_the_microbatch(run_cli) -> None:
    """torchtitan's and AutoModel's loops step local_batch sequences at a time when there is no pipeline."""
    work = ONE.model_copy(update={"local_batch": 4})
    validate_layout(MODEL, 16, work, TrainLayout(dp=16, microbatch=4))
    with pytest.raises(ShardplanError, match="local batch is the microbatch"):
        validate_layout(MODEL, 16, work, TrainLayout(dp=16, microbatch=2))
    r = enumerate_layouts(MODEL, work, SpaceRequest(num_gpus=16)).rows
    assert (r.mb[r.pp == 1] == 4).all()
    plan = run_cli(*PLAN, "--pp", "1", "--local-batch", "4", "--json").json()["plan"]
    assert plan["microbatch_size"] == 4
