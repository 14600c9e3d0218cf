"""ZeRO-3 with pipeline parallelism: torchtitan's FSDP2 under PP (weights gathered once per step and kept across
microbatches, gradients accumulated unsharded and reduce-scattered once after the last backward)."""

import dataclasses
import math

import pytest

from shardplan.cli.export import export_train
from shardplan.cli.export.base import TrainTarget
from shardplan.costmodel.core import comm
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts, validate_layout
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
SYSTEM = get_system("dgx-h100")
WORK = TrainWorkload(seq_len=4096, global_batch=64)
# Llama-3.1-8B by hand: q and o 4096², k and v 4096·1024 each (8 KV heads of 128), SwiGLU 3·4096·14336, two
# RMSNorms; the first of two stages holds 16 layers and the 128256 × 4096 embedding.
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
FIRST_STAGE = 16 * LAYER + 128256 * 4096
DP = 8


def _zero3_pp():
    return estimate_training(MODEL, SYSTEM, 16, WORK, TrainLayout(pp=2, dp=DP, zero_stage=3))


def test_memory_keeps_the_stage_gathered_and_its_gradients_unsharded() -> None:
    """bf16 weights: the unsharded stage (2 B/param) plus its shard (2/8 B); fp32 gradients unsharded (4 B/param,
    accumulated over microbatches); Adam state (12 B/param) sharded over the 8 data-parallel ranks."""
    first = _zero3_pp().stages[0]
    assert FIRST_STAGE == 4_015_128_576
    assert first.weights_bytes == pytest.approx(2 * FIRST_STAGE + 2 * FIRST_STAGE / DP, rel=1e-12)
    assert first.gradients_bytes == pytest.approx(4 * FIRST_STAGE, rel=1e-12)
    assert first.optimizer_bytes == pytest.approx(12 * FIRST_STAGE / DP, rel=1e-12)


def test_communication_gathers_once_per_step_and_reduce_scatters_after_the_last_backward() -> None:
    """One all-gather of the bf16 stage per step, 80% of it hidden under the first microbatch's forward
    (dgx-h100's zero3_overlap_fraction); one reduce-scatter of the fp32 gradients, exposed (it runs after the
    stage's last backward). Four microbatches: the per-microbatch ZeRO-3 gathers of pp = 1 would be 4× + backward."""
    rep = _zero3_pp()
    ag = float(comm.all_gather_time(SYSTEM, FIRST_STAGE * 2.0, DP, 1))  # dp ranks adjacent in a node (tp = 1)
    rs = float(comm.reduce_scatter_time(SYSTEM, FIRST_STAGE * 4.0, DP, 1))
    fwd = rep.stages[0].fwd_time_s
    assert ag < fwd  # the gather fits under the forward: 20% of it stays exposed
    # the hidden 80% still slows the compute it overlaps by the system's overlap_slowdown (Lee et al. 2025)
    slow = SYSTEM.software.overlap_slowdown
    assert 0 < slow < 1
    assert rep.metrics.zero3_exposed_s == pytest.approx(0.2 * ag + slow * 0.8 * ag, rel=1e-9)
    assert rep.metrics.dp_exposed_s == pytest.approx(rs, rel=1e-9)


def test_zero2_with_pipeline_is_refused_and_zero3_accepted() -> None:
    validate_layout(MODEL, 16, WORK, TrainLayout(pp=2, dp=DP, zero_stage=3))
    with pytest.raises(ShardplanError, match="ZeRO-2 cannot run with pipeline"):
        validate_layout(MODEL, 16, WORK, TrainLayout(pp=2, dp=DP, zero_stage=2))


def test_enumeration_keeps_zero3_with_pipeline_unless_the_target_forbids_it() -> None:
    free = enumerate_layouts(MODEL, WORK, SpaceRequest(num_gpus=16))
    strict = enumerate_layouts(MODEL, WORK, SpaceRequest(num_gpus=16, zero3_with_pp=False))
    deep3 = (free.rows.zero == 3) & (free.rows.pp > 1)
    assert deep3.sum() > 0
    assert not ((strict.rows.zero == 3) & (strict.rows.pp > 1)).any()
    assert len(free.rows) - len(strict.rows) == deep3.sum() == strict.pruned["ZeRO-3 with pipeline (export target)"]
    assert not ((free.rows.zero == 2) & (free.rows.pp > 1)).any()
    assert free.pruned["ZeRO-2 with pipeline"] == strict.pruned["ZeRO-2 with pipeline"] == deep3.sum()


@pytest.mark.parametrize("fmt", ["megatron", "deepspeed"])
def test_megatron_and_deepspeed_exports_refuse_zero3_with_pipeline(fmt: str) -> None:
    rep = _zero3_pp()
    target = TrainTarget(plan=rep.plan, model=MODEL, seq_len=4096, num_gpus=16, gpus_per_node=8)
    with pytest.raises(ShardplanError, match="pipeline"):
        export_train(fmt, target)
    text = export_train("torchtitan", target).text
    assert "pipeline_parallel_degree = 2" in text and "data_parallel_shard_degree = 8" in text
    assert "keeps each stage's FSDP weights gathered" in text


TRAIN = ["train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "--global-batch", "64",
         "--seq-len", "4096", "--pp", "2", "--zero", "3"]


def test_train_plans_zero3_with_pipeline_for_torchtitan_only(run_cli, tmp_path) -> None:
    """Pinned ZeRO-3 and PP 2: planned (and exported) for torchtitan; for Megatron-LM and DeepSpeed one line
    naming the field, exit 2."""
    out = tmp_path / "job.toml"
    r = run_cli(*TRAIN, "--export", "torchtitan", "--output", str(out))
    assert r.code == 0, r.err
    assert "pipeline_parallel_degree = 2" in out.read_text()
    for fmt in ("megatron", "deepspeed"):
        r = run_cli(*TRAIN, "--export", fmt)
        assert r.code == 2 and "zero" in r.err and "torchtitan" in r.err and "Traceback" not in r.err
    r = run_cli(*TRAIN[:-1], "2")
    assert r.code == 2 and "ZeRO-2 cannot run with pipeline" in r.err


@pytest.mark.parametrize(("pp", "v", "squeeze"), [(3, 1, 0.3), (2, 2, 0.6), (4, 1, 0.1)])
def test_per_stage_optimum_of_a_zero3_pipeline_equals_brute_force(pp: int, v: int, squeeze: float) -> None:
    """The per-stage CP-SAT model of a ZeRO-3 + PP layout (DP 2, memory-tight, recompute free per rank) returns the
    brute-force optimum, and the bounds of the global search stay below it (with the FSDP tail in them)."""
    from shardplan.costmodel.training.layout import LayoutArrays, Recompute
    from shardplan.costmodel.training.stage_bounds import average_lower_bounds, stage_lower_bounds
    from shardplan.costmodel.training.step import train_cost
    from shardplan.models.spec import ModelSpec
    from shardplan.planner.training.stages import StageSpace, solve_stages
    from shardplan.planner.training.stages_brute import brute_force_stages

    model = ModelSpec(name="small", num_layers=10, hidden_size=2048, num_heads=16, num_kv_heads=4,
                      ffn_hidden_size=8192, vocab_size=32000)
    system = get_system("dgx-h100")
    lay = TrainLayout(tp=1, pp=pp, dp=2, interleave=v, recompute=Recompute.FULL, zero_stage=3)
    work = TrainWorkload(seq_len=8192, global_batch=16, framework_bytes=0)
    def peak(rc: Recompute) -> float:  # the uniform split's
        rows = LayoutArrays.from_layouts([dataclasses.replace(lay, recompute=rc)], work.global_batch)
        return float(train_cost(model, system, work, rows).peak_memory[0])

    # usable memory between the need with every layer recomputed and with none (10% headroom on top)
    low, high = peak(Recompute.FULL), peak(Recompute.NONE)
    gpu = system.gpu.model_copy(update={"memory_bytes": math.ceil((low + squeeze * (high - low)) / 0.9)})
    system = system.model_copy(update={"gpu": gpu})
    space = StageSpace(model, system, work, lay)
    choice = solve_stages(space, time_limit_s=30.0)
    assert choice is not None and choice.status == "optimal"
    brute = brute_force_stages(space, choice.unit)
    assert brute is not None and choice.objective == brute[0]
    rows = LayoutArrays.from_layouts([lay], work.global_batch)
    for bound in (average_lower_bounds(model, system, work, rows, free_recompute=True),
                  stage_lower_bounds(model, system, work, rows, free_recompute=True, allow_offload=False)):
        assert 0 < float(bound[0]) * v / choice.unit <= brute[0] * (1 + 1e-9)
