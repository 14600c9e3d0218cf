"""Per-stage plans end to end: `train` reports the cost model's evaluation of its per-stage plan, never worse than
the uniform split; `estimate train --stage-layers` pins a split; the exports write it."""

from __future__ import annotations

import json
import tomllib

import pytest

from shardplan.cli.export.megatron import pipeline_layout
from shardplan.costmodel.training.layout import TrainWorkload
from shardplan.costmodel.training.stage_split import evaluate_split
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.solve import TrainRequest, plan_training

EST = ["estimate", "train", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "64", "--global-batch",
       "256", "--seq-len", "8192", "--tp", "4", "--pp", "4", "--microbatch", "1", "--recompute", "full",
       "--sequence-parallel", "--zero", "1"]


def _request(**kw) -> TrainRequest:
    return TrainRequest(model=get_model("llama-3.1-70b"), system=get_system("dgx-h100"), num_gpus=64,
                        workload=TrainWorkload(seq_len=8192, global_batch=256), pp=4, interleave=1, **kw)


def test_train_reports_the_cost_model_of_its_per_stage_plan() -> None:
    plan = plan_training(_request())
    uniform = plan_training(_request(uniform_stages=True))
    p, search = plan.plan, plan.solver.stage_search
    assert p is not None and search is not None and uniform.metrics is not None and plan.metrics is not None
    assert uniform.solver.stage_search is None
    assert search.status == "optimal" and search.skipped == 0 and plan.status == "optimal"
    assert search.uniform_step_time_s == uniform.metrics.step_time_s
    assert plan.metrics.step_time_s <= uniform.metrics.step_time_s
    # the numbers printed are the per-rank evaluation of exactly this plan
    lay = dict(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep, cp=p.cp, microbatch=p.microbatch_size, interleave=p.interleave,
               recompute=p.recompute, sequence_parallel=p.sequence_parallel, zero_stage=p.zero_stage,
               offload_optimizer=p.offload.optimizer, offload_weights=p.offload.weights)
    from shardplan.costmodel.training.layout import TrainLayout

    ev = evaluate_split(get_model("llama-3.1-70b"), get_system("dgx-h100"), TrainWorkload(seq_len=8192,
                        global_batch=256), TrainLayout(**lay), p.stage_layers, p.stage_recompute_layers,
                        [round(100 * x) for x in p.stage_offload_activations or [0] * p.pp])
    assert ev.fits and ev.step_time_s == plan.metrics.step_time_s
    assert sum(p.stage_layers or []) == 80 and len(plan.stages) == 4
    assert [s.layers for s in plan.stages] == p.stage_layers
    assert max(s.total_bytes for s in plan.stages) == plan.memory.total_bytes <= plan.memory.capacity_bytes
    assert any("uniform split" in x for x in plan.explanation)


def test_megatron_layout_of_a_per_stage_split() -> None:
    # hand-written: virtual stage k = chunk·pp + rank; rank 0 opens with E, the last chunk of the last rank ends in L
    assert pipeline_layout(6, 3, 1, [1, 3, 2]) == "Et|t*3|t*2L"
    # v = 2: rank 0 holds 3 layers as chunks (2, 1), rank 1 holds 4 as (2, 2)
    assert pipeline_layout(7, 2, 2, [3, 4]) == "Et*2|t*2|t|t*2L"


def test_estimate_pins_a_split_and_exports_it(run_cli, tmp_path) -> None:
    r = run_cli(*EST, "--stage-layers", "19,21,21,19", "--stage-recompute-layers", "4,2,1,0", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["plan"]["stage_layers"] == [19, 21, 21, 19]
    assert d["plan"]["stage_recompute_layers"] == [4, 2, 1, 0]
    assert [s["layers"] for s in d["stages"]] == [19, 21, 21, 19]
    from shardplan.api import estimate_training

    api = estimate_training("llama-3.1-70b", "dgx-h100", gpus=64, global_batch=256, seq_len=8192, tp=4, pp=4,
                            recompute="full", sequence_parallel=True, zero_stage=1, stage_layers=[19, 21, 21, 19],
                            stage_recompute_layers=[4, 2, 1, 0])
    assert api.metrics.step_time_s == d["metrics"]["step_time_s"]
    mega = tmp_path / "m.args"
    assert run_cli(*EST, "--stage-layers", "19,21,21,19", "--export", "megatron", "-o", str(mega)).code == 0
    assert "--pipeline-model-parallel-layout Et*19|t*21|t*21|t*19L\n" in mega.read_text()
    tt = tmp_path / "t.toml"
    assert run_cli(*EST, "--stage-layers", "19,21,21,19", "--export", "torchtitan", "-o", str(tt)).code == 0
    parts = tomllib.loads(tt.read_text())["parallelism"]["module_fqns_per_model_part"]
    assert [len(x) for x in parts] == [1 + 19, 21, 21, 19 + 2]
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[3][-3:] == ["layers.79", "norm", "output"]


def test_bad_split_is_one_line_and_exit_2(run_cli) -> None:
    r = run_cli(*EST, "--stage-layers", "20,20,20,19")
    assert r.code == 2 and "stage-layers" in r.err and "sum to num_layers (80)" in r.err
    r = run_cli(*EST, "--stage-layers", "20,20,20")
    assert r.code == 2 and "4 counts" in r.err
    r = run_cli(*EST, "--stage-layers", "20,20,20,20", "--stage-recompute-layers", "1,2,3,30")
    assert r.code == 2 and "stage-recompute-layers" in r.err


def test_alternating_moe_layers_keep_the_uniform_split() -> None:
    """A rank's MoE count depends on where its layers start when MoE layers alternate: no per-stage search."""
    from shardplan.models.spec import ModelSpec, MoESpec

    model = ModelSpec(name="alt", num_layers=8, hidden_size=1024, num_heads=8, ffn_hidden_size=4096,
                      vocab_size=32000, moe=MoESpec(num_experts=8, experts_per_token=2,
                                                    expert_ffn_hidden_size=1024, layer_freq=2))
    plan = plan_training(TrainRequest(model=model, system=get_system("dgx-h100"), num_gpus=8, pp=2,
                                      workload=TrainWorkload(seq_len=2048, global_batch=16)))
    assert plan.status == "optimal" and plan.solver.stage_search is None and plan.plan.stage_layers is None


def test_per_layer_rows_count_each_ranks_recomputed_layers() -> None:
    # the issue-11 complaint ("the per-layer table ignores --recompute-layers"), for a per-stage split: the rows of
    # each rank split into its fully recomputed layers and the rest, as --stage-recompute-layers pins them
    from shardplan.api import estimate_training

    splits, recomputed = [19, 21, 21, 19], [4, 2, 1, 0]
    rep = estimate_training("llama-3.1-70b", "dgx-h100", gpus=64, global_batch=256, seq_len=8192, tp=4, pp=4,
                            recompute="full", sequence_parallel=True, zero_stage=1, stage_layers=splits,
                            stage_recompute_layers=recomputed)
    middle = max((1, 2), key=lambda i: rep.stages[i].fwd_time_s + rep.stages[i].bwd_time_s)
    for name, i in (("first", 0), ("middle", middle), ("last", 3)):
        rows = [r for r in rep.layers if r.stage == name and r.kind in ("attention", "mlp")]
        for kind in ("attention", "mlp"):
            full = sum(r.count for r in rows if r.kind == kind and r.recompute == "full")
            plain = sum(r.count for r in rows if r.kind == kind and r.recompute != "full")
            assert (full, plain) == (recomputed[i], splits[i] - recomputed[i]), (name, kind)
        # a recomputed row re-runs its forward; a plain one does not
        assert all((r.recompute_time_s > 0) == (r.recompute == "full") for r in rows)


@pytest.mark.parametrize("offload", [0.0, 1.0])
def test_a_split_that_recomputes_nothing_is_named_without_recompute(offload: float) -> None:
    # with weights offloaded too: a full recompute of no layer streams them no third time
    from shardplan.api import estimate_training

    kw = dict(gpus=64, global_batch=256, seq_len=8192, tp=4, pp=4, sequence_parallel=True, zero_stage=1,
              stage_layers=[19, 21, 21, 19], offload_weights=offload)
    idle = estimate_training("llama-3.1-70b", "dgx-h100", recompute="full", stage_recompute_layers=[0, 0, 0, 0], **kw)
    plain = estimate_training("llama-3.1-70b", "dgx-h100", recompute="none", **kw)
    assert idle.plan.recompute == plain.plan.recompute == "none" and idle.plan.stage_recompute_layers is None
    assert idle.metrics.step_time_s == plain.metrics.step_time_s
    assert [s.total_bytes for s in idle.stages] == [s.total_bytes for s in plain.stages]
    assert all(r.recompute == "none" for r in idle.layers)


@pytest.mark.parametrize(("recompute", "per_rank"), [("none", None), ("full", [2] * 16)])
def test_per_layer_rows_list_every_kind_a_rank_holds(recompute: str, per_rank: list[int] | None) -> None:
    # DeepSeek-V3 (3 dense layers first) at PP 16: the uniform split fills rank 0 with the dense layers only, this
    # split gives it one MoE layer too; the rows of every listed rank add up to its layers, MLP and MoE together
    from shardplan.api import estimate_training

    splits = [4] * 14 + [2, 3]
    rep = estimate_training("deepseek-v3", "dgx-h100", gpus=256, global_batch=1024, seq_len=4096, tp=1, pp=16, ep=16,
                            recompute=recompute, zero_stage=1, stage_layers=splits, stage_recompute_layers=per_rank)
    middle = max(range(1, 15), key=lambda i: rep.stages[i].fwd_time_s + rep.stages[i].bwd_time_s)
    for name, i in (("first", 0), ("middle", middle), ("last", 15)):
        rows = [r for r in rep.layers if r.stage == name]
        assert sum(r.count for r in rows if r.kind == "attention") == splits[i], name
        assert sum(r.count for r in rows if r.kind in ("mlp", "moe")) == splits[i], name
        assert sum(r.count for r in rows if r.kind == "moe") == rep.stages[i].moe_layers, name
        if per_rank is not None:
            assert sum(r.count for r in rows if r.kind == "attention" and r.recompute == "full") == per_rank[i]
