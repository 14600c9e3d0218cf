"""``--framework``: the planner keeps to the knobs a framework can run (costmodel.training.frameworks)."""

import json

import numpy as np
import pytest

from shardplan.costmodel.training.frameworks import FRAMEWORKS, caps_for
from shardplan.costmodel.training.layout import RECOMPUTE_CODE, Recompute, TrainWorkload
from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.solve import TrainRequest, plan_training
from shardplan.validation.optimum import load_records_tuned, parse_run
from shardplan.validation.stacks import stack_framework

LLAMA = get_model("llama-3.1-70b")
MIXTRAL = get_model("mixtral-8x7b")
WORK = TrainWorkload(seq_len=8192, global_batch=128)


def _rows(model, name: str | None):
    req = SpaceRequest(num_gpus=64, framework=FRAMEWORKS[name] if name else None, max_cp=8, min_cp_chunk=2048)
    return enumerate_layouts(model, WORK, req)


def test_fsdp_plans_data_parallel_only() -> None:
    """PyTorch FSDP as llm-foundry runs it: no TP, PP, CP or EP; NO_SHARD, SHARD_GRAD_OP or FULL_SHARD; whole-block
    checkpointing or none. Every enumerated row keeps to that, and the rule says what it pruned."""
    space = _rows(MIXTRAL, "fsdp")
    r = space.rows
    assert len(r.tp) > 0
    assert (r.tp == 1).all() and (r.pp == 1).all() and (r.cp == 1).all() and (r.ep == 1).all() and (r.v == 1).all()
    assert set(np.unique(r.zero)) <= {0, 2, 3}
    assert set(np.unique(r.rc)) <= {RECOMPUTE_CODE[Recompute.NONE], RECOMPUTE_CODE[Recompute.FULL]}
    assert space.pruned.get("pp > 1 (fsdp has none)", 0) > 0 and space.pruned.get("tp > 1 (fsdp has none)", 0) > 0
    free = _rows(MIXTRAL, None).rows
    assert len(free.tp) > len(r.tp) and (free.pp > 1).any() and (free.ep > 1).any()


def test_torchtitan_has_no_zero_1_or_2_and_megatron_no_zero_3_under_pp() -> None:
    titan = _rows(LLAMA, "torchtitan").rows
    assert set(np.unique(titan.zero)) <= {0, 3} and ((titan.zero == 3) & (titan.pp > 1)).any()
    mega = _rows(LLAMA, "megatron").rows
    assert not ((mega.zero == 3) & (mega.pp > 1)).any() and (mega.zero == 1).any()


def test_the_plan_keeps_to_the_framework_and_costs_no_less_than_the_free_plan() -> None:
    """The framework's space is a subset of the free one, so its optimum cannot be faster."""
    system = get_system("dgx-h100")
    plans = {fw: plan_training(TrainRequest(model=LLAMA, system=system, num_gpus=64, workload=WORK, framework=fw),
                               explain=False) for fw in (None, "fsdp", "torchtitan")}
    fsdp = plans["fsdp"].plan
    assert fsdp is not None and (fsdp.tp, fsdp.pp, fsdp.cp) == (1, 1, 1) and fsdp.zero_stage in (0, 2, 3)
    assert plans["torchtitan"].plan is not None and plans["torchtitan"].plan.zero_stage in (0, 3)
    for fw in ("fsdp", "torchtitan"):
        assert plans[fw].metrics.step_time_s >= plans[None].metrics.step_time_s * (1 - 1e-9)


@pytest.mark.parametrize(("framework", "pin", "field"), [("fsdp", {"tp": 2}, "tp"), ("fsdp", {"pp": 2}, "pp"),
                                                         ("torchtitan", {"zero_stage": 1}, "zero"),
                                                         ("fsdp", {"recompute": Recompute.SELECTIVE}, "recompute")])
def test_a_pin_the_framework_cannot_run_is_bad_input(framework: str, pin: dict, field: str) -> None:
    req = TrainRequest(model=LLAMA, system=get_system("dgx-h100"), num_gpus=64, workload=WORK, framework=framework,
                       **pin)
    with pytest.raises(ShardplanError) as e:
        plan_training(req, explain=False)
    assert e.value.field == field and framework in str(e.value)


def test_cli_framework_conflicts_are_one_line_exit_2(run_cli) -> None:
    base = ("train", "-m", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "-b", "32", "-s", "4096")
    r = run_cli(*base, "--framework", "fsdp", "--tp", "2")
    assert r.code == 2 and r.err.count("\n") == 1 and "fsdp cannot run tp 2" in r.err
    r = run_cli(*base, "--framework", "torchtitan", "--export", "megatron")
    assert r.code == 2 and r.err.count("\n") == 1 and "framework" in r.err
    r = run_cli("estimate", *base, "--tp", "2", "--framework", "fsdp")
    assert r.code == 2 and r.err.count("\n") == 1 and "fsdp cannot run tp 2" in r.err
    r = run_cli("estimate", *base, "--zero", "1", "--framework", "torchtitan")
    assert r.code == 2 and "torchtitan cannot run zero 1" in r.err
    r = run_cli(*base, "--framework", "fsdp", "--json")
    plan = json.loads(r.out)["plan"]
    assert r.code == 0 and (plan["tp"], plan["pp"], plan["cp"]) == (1, 1, 1)


def test_validation_plans_inside_each_records_framework() -> None:
    """llm-foundry records plan as PyTorch FSDP, torchtitan as torchtitan, AutoModel as AutoModel, NVIDIA stacks as
    Megatron; the Llama 3 paper's own stack keeps every knob."""
    by_id = {r["id"]: r for r in load_records_tuned()}
    assert stack_framework(by_id["llmfoundry-mpt-70b-512gpu-seq2048-h100-bf16"]) == "fsdp"
    assert stack_framework(by_id["dgxc-v25.01-llama-31-70b-256gpu-h100-bf16"]) == "megatron-zero1"  # NeMo 24.09
    assert stack_framework(by_id["mlperf-v5.0-llama3.1-405b-512gpu-h100-fp8"]) == "megatron"
    # NeMo up to 24.09 and Megatron-Core r0.8 ran no FSDP (Megatron-LM added FSDP2 on 2024-11-13): ZeRO-1 at most
    assert stack_framework(by_id["nemo-24.07-nemotron-22b-64gpu-h100-fp8"]) == "megatron-zero1"
    assert stack_framework(by_id["mlperf-v4.1-gpt3-175b-256gpu-h100-fp8"]) == "megatron-zero1"
    assert stack_framework(by_id["nemo-25.02-gpt3-175b-512gpu-h100-fp8"]) == "megatron"
    assert FRAMEWORKS["megatron-zero1"].zero_stages == (0, 1)
    assert stack_framework(by_id["llama3-paper-405b-8192gpu-bf16"]) is None
    titan = [r for i, r in by_id.items() if i.startswith("torchtitan")]
    assert titan and all(stack_framework(r) == "torchtitan" for r in titan)
    auto = [r for i, r in by_id.items() if i.startswith("automodel")]
    assert len(auto) >= 8 and all(stack_framework(r) == "automodel" for r in auto)
    run = parse_run(by_id["llmfoundry-mpt-7b-8gpu-seq2048-h100-bf16"])
    assert not isinstance(run, str) and run.framework == "fsdp"


QWEN = get_model("qwen3-30b-a3b")


def test_automodel_moe_runs_neither_tp_nor_cp_and_recomputes_whole_blocks() -> None:
    """NeMo AutoModel@79d0ccf: its MoE parallelizer asserts TP 1 and CP 1, and its activation checkpointing wraps
    whole blocks or nothing; the dense parallelizer keeps TP and CP."""
    moe = caps_for("automodel", QWEN)
    assert moe is FRAMEWORKS["automodel-moe"] and not moe.tp and not moe.cp and moe.zero_stages == (3,)
    assert moe.recompute == (Recompute.NONE, Recompute.FULL)
    dense = caps_for("automodel", LLAMA)
    assert dense.tp and dense.cp and dense.recompute == (Recompute.NONE, Recompute.FULL)
    r = enumerate_layouts(QWEN, WORK, SpaceRequest(num_gpus=64, framework=moe, max_cp=8, min_cp_chunk=2048)).rows
    assert len(r) and (r.tp == 1).all() and (r.cp == 1).all() and (r.ep > 1).any() and set(np.unique(r.zero)) == {3}
    plan = plan_training(TrainRequest(model=QWEN, system=get_system("dgx-h100"), num_gpus=16, workload=WORK,
                                      framework="automodel"), explain=False).plan
    assert plan is not None and (plan.tp, plan.cp, plan.zero_stage) == (1, 1, 3) and plan.recompute != "selective"


def test_torchtitan_selective_is_its_op_policy_and_absent_on_moe() -> None:
    """torchtitan's selective checkpointing is op-level (``torchtitan_op``), never Megatron's module sets; the model
    prices that policy on attention + dense-MLP layers only, so an MoE plan under torchtitan recomputes all or
    nothing."""
    assert Recompute.SELECTIVE not in caps_for("torchtitan", QWEN).recompute
    assert caps_for("torchtitan", LLAMA).selective_policy == "torchtitan_op"
    req = TrainRequest(model=LLAMA, system=get_system("dgx-h100"), num_gpus=64, workload=WORK,
                       framework="torchtitan", recompute=Recompute.SELECTIVE)
    plan = plan_training(req, explain=False).plan
    assert plan is not None and plan.recompute_modules == ["torchtitan_op"]
    free = plan_training(TrainRequest(model=QWEN, system=get_system("dgx-h100"), num_gpus=16, workload=WORK,
                                      framework="torchtitan"), explain=False).plan
    assert free is not None and free.recompute != "selective"
    with pytest.raises(ShardplanError, match="torchtitan cannot run recompute selective"):
        plan_training(TrainRequest(model=QWEN, system=get_system("dgx-h100"), num_gpus=16, workload=WORK,
                                   framework="torchtitan", recompute=Recompute.SELECTIVE), explain=False)


def test_cli_automodel_refuses_tp_on_an_moe_model(run_cli) -> None:
    r = run_cli("train", "-m", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--gpus", "16", "-b", "64", "-s", "4096",
                "--framework", "automodel", "--tp", "2")
    assert r.code == 2 and r.err.count("\n") == 1 and "automodel (MoE models) cannot run tp 2" in r.err


def test_framework_recompute_pins(run_cli) -> None:
    """torchtitan runs its own selective policy (a Megatron module set is bad input; estimate prices the policy, as
    the planner does); AutoModel checkpoints every block or none (no per-rank counts, no --recompute-layers)."""
    base = ("-m", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "-b", "128", "-s", "4096")
    r = run_cli("train", *base, "--framework", "torchtitan", "--recompute", "selective", "--recompute-modules",
                "core_attn,mlp")
    assert r.code == 2 and r.err.count("\n") == 1 and "torchtitan_op" in r.err
    est = run_cli("estimate", "train", *base, "--tp", "2", "--zero", "3", "--framework", "torchtitan",
                  "--recompute", "selective", "--json").json()
    assert est["plan"]["recompute_modules"] == ["torchtitan_op"]
    r = run_cli("train", *base, "--framework", "automodel", "--recompute", "full", "--recompute-layers", "2")
    assert r.code == 2 and "every block or none" in r.err
    plan = plan_training(TrainRequest(model=LLAMA, system=get_system("dgx-h100"), num_gpus=32,
                                      workload=TrainWorkload(seq_len=16384, global_batch=64), framework="automodel"),
                         explain=False).plan
    assert plan is not None and plan.recompute_layers is None and plan.stage_recompute_layers is None
    assert plan.stage_layers is None


def test_megatron_and_torchtitan_plans_recompute_one_count_on_every_rank() -> None:
    """Megatron-LM's --recompute-num-layers (and torchtitan's checkpointing rule) is one count for every pipeline
    rank. Llama-3.1-70B on 32 H100 at 8,192 tokens, 32 sequences, interleave 8: left free, the per-stage search
    recomputes one layer on rank 0 alone ([1, 0, 0, 0]); under either framework every rank's count is what one
    per-chunk count K gives it (``chunk_recompute``: v·K layers, or all of them), and the framework's plan costs no
    less than the free one (its space is a subset)."""
    from shardplan.planner.training.stages import chunk_recompute

    req = dict(model=LLAMA, system=get_system("dgx-h100"), num_gpus=32,
               workload=TrainWorkload(seq_len=8192, global_batch=32), interleave=8)
    free = plan_training(TrainRequest(**req), explain=False)
    assert free.plan is not None and free.metrics is not None
    counts = free.plan.stage_recompute_layers
    assert counts is not None and len(set(counts)) > 1  # the free search does use per-rank counts here
    for name in ("megatron", "torchtitan"):
        fw = plan_training(TrainRequest(**req, framework=name), explain=False)
        assert fw.plan is not None and fw.metrics is not None
        ks, ns, v = fw.plan.stage_recompute_layers, fw.plan.stage_layers, fw.plan.interleave
        assert ks is None or any(all(chunk_recompute(K, n, v) == k for k, n in zip(ks, ns, strict=True))
                                 for K in range(max(ns) + 1))
        assert fw.metrics.step_time_s >= free.metrics.step_time_s * (1 - 1e-9)


def test_megatron_before_uneven_stages_plans_equal_stages() -> None:
    """Megatron-Core before 0.9 (NeMo up to 24.09: ``megatron-zero1``) splits the pipeline into equal stages and equal
    model chunks, so the free plan for such a record keeps every rank and chunk at L/(pp·v) layers (no per-stage
    search, no layout whose layers do not divide); today's Megatron (any layout, which the export writes) may hold
    uneven stages. Llama-3.1-70B on 64 H100 at 8k tokens: the per-stage search moves layers off the first and last
    stage under ``megatron``; Llama-3.1-405B (126 layers) on 512: every ``megatron-zero1`` row has pp·v dividing 126."""
    free = plan_training(TrainRequest(model=LLAMA, system=get_system("dgx-h100"), num_gpus=64, workload=WORK,
                                      framework="megatron"))
    equal = plan_training(TrainRequest(model=LLAMA, system=get_system("dgx-h100"), num_gpus=64, workload=WORK,
                                       framework="megatron-zero1"))
    assert free.plan.stage_layers is not None and len(set(free.plan.stage_layers)) > 1
    assert equal.solver.stage_search is None and equal.plan.stage_layers is None
    assert LLAMA.num_layers % (equal.plan.pp * equal.plan.interleave) == 0
    big = get_model("llama-3.1-405b")
    work = TrainWorkload(seq_len=8192, global_batch=512)
    req = SpaceRequest(num_gpus=512, framework=FRAMEWORKS["megatron-zero1"], max_interleave=16)
    rows = enumerate_layouts(big, work, req).rows
    assert len(rows) > 0 and (big.num_layers % (rows.pp * rows.v) == 0).all()
    everything = enumerate_layouts(big, work, SpaceRequest(num_gpus=512, framework=FRAMEWORKS["megatron"],
                                                           max_interleave=16)).rows
    assert (big.num_layers % (everything.pp * everything.v) != 0).any()  # the rule removes real rows
