"""`shardplan estimate train` and `shardplan train` through the CLI: contract keys, exit codes, errors."""

import pytest

EST = ["estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "64",
       "--global-batch", "64", "--seq-len", "2048", "--tp", "8", "--pp", "8", "--dp", "1", "--microbatch", "1",
       "--interleave", "3", "--recompute", "selective", "--sequence-parallel"]


def test_estimate_train_json_has_the_contract_keys(run_cli) -> None:
    r = run_cli(*EST, "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "feasible"
    for k in ("tp", "pp", "dp", "ep", "cp", "microbatch_size", "num_microbatches", "global_batch", "interleave",
              "recompute", "zero_stage", "sequence_parallel", "offload"):
        assert k in d["plan"]
    assert set(d["plan"]["offload"]) == {"weights", "optimizer", "activations"}
    for k in ("step_time_s", "tokens_per_s", "mfu", "tflops_per_gpu"):
        assert d["metrics"][k] > 0
    for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
              "total_bytes", "capacity_bytes"):
        assert k in d["memory"]
    assert d["plan"]["num_microbatches"] == 64
    assert d["layers"] and d["stages"]
    # Korthikanti et al. 2022 Table 5 measured 13.75 s for this recipe
    assert d["metrics"]["step_time_s"] == pytest.approx(13.75, rel=0.05)


def test_estimate_train_renders_tables(run_cli) -> None:
    r = run_cli(*EST)
    assert r.code == 0
    for text in ("Per layer", "Per stage", "step time", "MFU", "FEASIBLE"):
        assert text in r.out


def test_layout_that_does_not_fit_is_an_infeasible_result(run_cli) -> None:
    r = run_cli("estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "8",
                "--global-batch", "8", "--seq-len", "2048", "--tp", "8", "--json")
    assert r.code == 0
    d = r.json()
    assert d["status"] == "infeasible"
    assert "GPU memory" in d["reason"] and d["suggestions"]


@pytest.mark.parametrize(("args", "field"), [
    (["--tp", "5"], "tp"),
    (["--tp", "8", "--pp", "2", "--dp", "2"], "dp"),
    (["--microbatch", "3"], "microbatch"),
    (["--recompute", "bogus"], "recompute"),
    (["--zero", "7"], "zero"),
    (["--offload-optimizer", "150%"], "offload-optimizer"),
])
def test_invalid_layout_is_bad_input(run_cli, args, field) -> None:
    base = ["estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "16",
            "--global-batch", "16", "--seq-len", "2048"]
    r = run_cli(*base, *args)
    assert r.code == 2
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert field in r.err


def test_train_plans_and_pins(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "--global-batch", "64",
                "--seq-len", "4096", "--tp", "2", "--top-k", "3", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "optimal" and d["plan"]["tp"] == 2
    assert {"status", "wall_time_s", "candidates"} <= set(d["solver"])
    assert len(d["alternatives"]) == 2
    assert d["explanation"] and d["comparisons"]


def test_train_human_output(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "32",
                "--seq-len", "4096")
    assert r.code == 0
    assert "CP-SAT: OPTIMAL" in r.out and "Plan:" in r.out and "Obvious alternatives" in r.out


def test_train_needs_a_batch(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--seq-len", "4096")
    assert r.code == 2 and "global-batch" in r.err


def test_optimizer_choice_sets_the_state_bytes(run_cli) -> None:
    """Adam keeps 12 B/param (fp32 master, m, v); 8-bit Adam 6 B; SGD with momentum 8 B (ZeRO paper, K = 12)."""
    base = ["estimate", "train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1",
            "--global-batch", "8", "--seq-len", "1024", "--json"]
    got = {o: run_cli(*base, "--optimizer", o).json()["memory"]["optimizer_bytes"]
           for o in ("adam", "adam-8bit", "sgd")}
    assert got["adam-8bit"] == pytest.approx(got["adam"] / 2)
    assert got["sgd"] == pytest.approx(got["adam"] * 8 / 12)
    r = run_cli(*base, "--optimizer", "lion")
    assert r.code == 2 and "optimizer" in r.err



def test_global_batch_with_max_global_batch_is_bad_input(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "-s", "4096", "-b", "1024",
                "--max-global-batch", "2520")
    assert r.code == 2
    assert "max-global-batch" in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_memory_headroom_option_sets_the_json_field(run_cli) -> None:
    args = ["estimate", "train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "-s", "4096", "-b", "8",
            "--tp", "8", "--json"]
    r = run_cli(*args, "--memory-headroom", "8GiB")
    assert r.code == 0, r.err
    assert r.json()["memory"]["headroom_bytes"] == 8 * 1024**3
    assert r.json()["stages"][0]["headroom_bytes"] == 8 * 1024**3
    r = run_cli(*args, "--memory-headroom", "150%")
    assert r.code == 2 and "memory-headroom" in r.err


def test_recompute_layers_without_full_recompute_is_bad_input(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "-s", "4096", "-b", "8",
                "--recompute", "selective", "--recompute-layers", "4")
    assert r.code == 2 and "recompute-layers" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_estimate_train_takes_recompute_modules(run_cli) -> None:
    """``--recompute-modules`` pins Megatron's selective module set: the plan names it, the MLP's activations go
    and its forward is rerun (less memory, more time than the default core_attn); bad names exit 2 in one line."""
    base = run_cli(*EST, "--json").json()
    r = run_cli(*EST, "--recompute-modules", "core_attn,mlp", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert base["plan"]["recompute_modules"] == ["core_attn"]
    assert d["plan"]["recompute_modules"] == ["core_attn", "mlp"]
    assert d["memory"]["activations_bytes"] < base["memory"]["activations_bytes"]
    assert d["metrics"]["step_time_s"] > base["metrics"]["step_time_s"]
    bad = run_cli(*EST, "--recompute-modules", "attention")
    assert bad.code == 2 and bad.err.count("\n") == 1 and "recompute_modules" in bad.err


def test_recompute_modules_the_model_or_stack_cannot_run_exit_2(run_cli, tmp_path) -> None:
    """mla_up_proj on a model without MLA, and moe under the system's EP all-to-all overlap (Megatron asserts the
    pair away), are one-line errors naming the field."""
    mla = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "8", "-b", "64", "-s",
                  "4096", "--recompute", "selective", "--recompute-modules", "mla_up_proj")
    assert mla.code == 2 and mla.err.count("\n") == 1 and "MLA model" in mla.err
    system = tmp_path / "overlap.json"
    system.write_text('{"base": "dgx-h100", "software": {"ep_comm_overlap": true}}')
    moe = run_cli("estimate", "train", "-m", "mixtral-8x7b", "-H", str(system), "--gpus", "16", "-b", "64", "-s",
                  "4096", "--tp", "2", "--ep", "8", "--recompute", "selective", "--recompute-modules", "moe")
    assert moe.code == 2 and moe.err.count("\n") == 1 and "ep_comm_overlap" in moe.err


def test_train_takes_a_pinned_module_set_and_reports_its_own_numbers(run_cli) -> None:
    """``train --recompute selective --recompute-modules layernorm`` plans with that set only; the plan names it and
    ``estimate train`` of the same layout gives the same step time (one truth); without selective, or with an export
    that cannot write it, it is a one-line error."""
    req = ("-m", "mixtral-8x7b", "-H", "dgx-h100", "--gpus", "64", "-b", "256", "-s", "4096")
    r = run_cli("train", *req, "--recompute", "selective", "--recompute-modules", "layernorm", "--json")
    assert r.code == 0, r.err
    p, m = r.json()["plan"], r.json()["metrics"]
    assert p["recompute"] == "selective" and p["recompute_modules"] == ["layernorm"]
    est = run_cli("estimate", "train", *req, "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--dp", str(p["dp"]),
                  "--ep", str(p["ep"]), "--cp", str(p["cp"]), "--microbatch", str(p["microbatch_size"]),
                  "--interleave", str(p["interleave"]), "--zero", str(p["zero_stage"]), "--recompute", "selective",
                  "--recompute-modules", "layernorm",
                  "--sequence-parallel" if p["sequence_parallel"] else "--no-sequence-parallel", "--json")
    assert est.code == 0, est.err
    assert est.json()["metrics"]["step_time_s"] == pytest.approx(m["step_time_s"], rel=5e-3)
    no_sel = run_cli("train", *req, "--recompute-modules", "layernorm")
    assert no_sel.code == 2 and no_sel.err.count("\n") == 1 and "recompute_modules" in no_sel.err
    ds = run_cli("train", *req, "--recompute", "selective", "--recompute-modules", "moe_act", "--export", "deepspeed")
    assert ds.code == 2 and ds.err.count("\n") == 1 and "megatron" in ds.err


def test_grad_reduce_dtype_prices_the_fsdp_reduce_scatter(run_cli) -> None:
    """FSDP (ZeRO-3) reduce-scatters 16-bit gradients by default; --grad-reduce-dtype fp32 (torchtitan's
    mixed_precision_reduce, Composer's DEFAULT) moves twice the bytes, so the exposed ZeRO-3 traffic grows."""
    base = ["estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-b", "64", "-s", "8192", "-g", "64",
            "--zero", "3", "--json"]
    default, bf16, fp32 = (run_cli(*base, *extra).json()["metrics"]
                           for extra in ([], ["--grad-reduce-dtype", "bf16"], ["--grad-reduce-dtype", "fp32"]))
    assert bf16 == default
    assert fp32["zero3_exposed_s"] > default["zero3_exposed_s"] and fp32["step_time_s"] > default["step_time_s"]
    bad = run_cli(*base, "--grad-reduce-dtype", "fp8")
    assert bad.code == 2 and "grad_reduce_dtype must be bf16, fp16 or fp32" in bad.err
