"""`--export`, `--output` through the CLI: stdout holds either the export or the JSON, never both."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

EST = ["estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "64",
       "--global-batch", "64", "--seq-len", "2048", "--tp", "8", "--pp", "8", "--microbatch", "1",
       "--interleave", "3", "--recompute", "selective", "--sequence-parallel"]


def test_export_without_output_prints_it_instead_of_the_tables(run_cli) -> None:
    r = run_cli(*EST, "--export", "megatron")
    assert r.code == 0, r.err
    assert r.out.startswith("# Megatron-LM arguments for gpt3-175b")
    assert "Per layer" not in r.out and "--tensor-model-parallel-size 8\n" in r.out


def test_export_to_file_with_json_prints_only_the_json(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "ds.json"
    r = run_cli(*EST, "--export", "deepspeed", "--output", str(out), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["plan"]["tp"] == 8
    assert r.err == ""
    assert json.loads(out.read_text())["train_batch_size"] == 64


def test_export_to_file_prints_tables_and_says_where(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "tt.toml"
    r = run_cli(*EST, "--export", "torchtitan", "-o", str(out))
    assert r.code == 0, r.err
    assert "Per layer" in r.out and f"wrote {out}" in r.err
    assert tomllib.loads(out.read_text())["parallelism"]["pipeline_parallel_degree"] == 8


def test_train_exports_the_chosen_plan(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "plan.args"
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                "--seq-len", "4096", "--export", "megatron", "-o", str(out), "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)["plan"]
    assert f"--tensor-model-parallel-size {plan['tp']}\n" in out.read_text()
    assert f"--global-batch-size {plan['global_batch']}\n" in out.read_text()


def test_output_without_export_is_bad_input(run_cli, tmp_path: Path) -> None:
    r = run_cli(*EST, "--output", str(tmp_path / "x"))
    assert r.code == 2 and "output" in r.err and r.err.count("\n") == 1


def test_export_to_stdout_with_json_is_bad_input(run_cli) -> None:
    r = run_cli(*EST, "--export", "megatron", "--json")
    assert r.code == 2 and "--output" in r.err


def test_serving_export_on_train_is_bad_input(run_cli) -> None:
    r = run_cli(*EST, "--export", "vllm")
    assert r.code == 2 and "export" in r.err


def test_export_of_a_layout_that_does_not_fit_warns(run_cli) -> None:
    r = run_cli("estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "8",
                "--global-batch", "8", "--seq-len", "2048", "--tp", "8", "--export", "megatron")
    assert r.code == 0
    assert "does not fit" in r.err and r.out.startswith("# Megatron-LM")


def test_refused_export_is_bad_input_naming_the_option(run_cli) -> None:
    r = run_cli("estimate", "train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8",
                "--global-batch", "8", "--seq-len", "2048", "--zero", "2", "--offload-optimizer", "30%",
                "--export", "deepspeed")
    assert r.code == 2 and "ratio" in r.err and "Traceback" not in r.err


def test_deepspeed_export_plans_without_zero3_under_expert_parallelism(run_cli) -> None:
    """DeepSpeed's MoE layer refuses ZeRO-3: with --export deepspeed the planner leaves those layouts out (exportable
    by construction) where the free plan for the same request takes ZeRO-3 with EP 8."""
    args = ("train", "-m", "qwen3-30b-a3b", "-H", "dgx-h100", "-g", "8", "-b", "128", "-s", "4096", "--ep", "8")
    free = run_cli(*args, "--json").json()
    assert free["plan"]["zero_stage"] == 3
    r = run_cli(*args, "--export", "deepspeed")
    assert r.code == 0, r.err
    assert '"stage": 3' not in r.out and '"train_batch_size": 128' in r.out
