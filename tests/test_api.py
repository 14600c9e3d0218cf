"""The notebook API: the same pydantic objects the CLI prints, errors as ShardplanError, a light import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import shardplan
from shardplan.errors import ShardplanError


def test_plan_training_is_what_the_cli_prints(run_cli) -> None:
    plan = shardplan.plan_training("llama-3.1-8b", "dgx-h100", gpus=8, global_batch=64, seq_len=4096)
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                "--seq-len", "4096", "--json")
    cli = json.loads(r.out)
    assert type(plan).__name__ == "TrainPlan"
    assert plan.model_dump(mode="json")["plan"] == cli["plan"]
    assert plan.metrics.step_time_s == pytest.approx(cli["metrics"]["step_time_s"])


def test_plan_training_pins_and_aliases() -> None:
    plan = shardplan.plan_training("llama-3.1-8b", "dgx-h100", gpus=8, global_batch=64, seq_len=4096, tp=2, zero=1,
                                   recompute="full")
    assert (plan.plan.tp, plan.plan.zero_stage, plan.plan.recompute) == (2, 1, "full")


def test_estimate_training_matches_korthikanti() -> None:
    r = shardplan.estimate_training("gpt3-175b", "dgx-a100-80gb", gpus=64, global_batch=64, seq_len=2048, tp=8, pp=8,
                                    interleave=3, recompute="selective", sequence_parallel=True)
    assert type(r).__name__ == "TrainReport" and r.status == "feasible"
    assert r.metrics.step_time_s == pytest.approx(13.75, rel=0.05)  # Korthikanti et al. 2022, Table 5


def test_specs_are_accepted_as_objects() -> None:
    from shardplan.hardware import resolve_system
    from shardplan.models import resolve_model

    r = shardplan.estimate_training(resolve_model("llama-3.1-8b"), resolve_system("dgx-h100"), global_batch=8,
                                    seq_len=2048)
    assert r.plan.dp == 8


def test_export_training_from_a_result() -> None:
    r = shardplan.estimate_training("gpt3-175b", "dgx-a100-80gb", gpus=64, global_batch=64, seq_len=2048, tp=8, pp=8)
    text = shardplan.export_training(r, "megatron")
    assert "--tensor-model-parallel-size 8\n" in text and "--pipeline-model-parallel-size 8\n" in text


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"bogus": 1}, "bogus"),
    ({"tp": 3}, "tp"),
    ({"global_batch": None}, "global_batch"),
    ({"dtype": "int3"}, "dtype"),
])
def test_bad_input_is_a_shardplan_error_naming_the_field(kwargs: dict, field: str) -> None:
    base = {"gpus": 8, "global_batch": 64, "seq_len": 1024}
    with pytest.raises(ShardplanError) as e:
        shardplan.plan_training("llama-3.1-8b", "dgx-h100", **(base | kwargs))
    assert e.value.field == field


def test_unknown_model_suggests_names() -> None:
    with pytest.raises(ShardplanError, match="Did you mean"):
        shardplan.estimate_training("llama-3.1-8", "dgx-h100", global_batch=8, seq_len=1024)


def test_import_shardplan_stays_light() -> None:
    code = ("import sys, shardplan; heavy = [m for m in ('ortools', 'typer', 'rich', 'numpy', 'shardplan.api') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert set(shardplan.__all__) >= {"plan_training", "estimate_training", "plan_inference", "plan_offload"}
    with pytest.raises(AttributeError):
        _ = shardplan.no_such_function


def test_every_api_function_has_a_docstring_example() -> None:
    from shardplan import api

    for name in api.__all__:
        doc = getattr(api, name).__doc__
        assert doc and ">>>" in doc, name


def test_plan_and_estimate_inference() -> None:
    pytest.importorskip("shardplan.planner.serving.solve")
    plan = shardplan.plan_inference("llama-3.1-8b", "dgx-h100", gpus=1, prompt_len=512, gen_len=128, time_limit_s=5)
    assert plan.status in ("optimal", "feasible") and plan.plan.tp == 1
    r = shardplan.estimate_inference("llama-3.1-8b", "dgx-h100", gpus=1, prompt_len=512, gen_len=128, batch=8)
    assert r.status == "feasible" and r.metrics.tokens_per_s > 0
    with pytest.raises(ShardplanError) as e:
        shardplan.plan_inference("llama-3.1-8b", "dgx-h100", gpus=1, prompt_len=512, gen_len=128, bogus=1)
    assert e.value.field == "bogus"


def test_plan_and_estimate_offload() -> None:
    pytest.importorskip("shardplan.planner.offload.solve")
    r = shardplan.estimate_offload("opt-30b", "dgx-a100-40gb", prompt_len=512, gen_len=32, gpu_batch_size=8,
                                   num_gpu_batches=2, weights=(0.2, 0.8, 0.0), kv_cache=(0.0, 1.0, 0.0))
    assert r.status in ("feasible", "infeasible") and r.model == "opt-30b"
    plan = shardplan.plan_offload("opt-6.7b", "dgx-a100-40gb", prompt_len=256, gen_len=16, time_limit_s=5)
    assert plan.status in ("optimal", "feasible", "infeasible")
