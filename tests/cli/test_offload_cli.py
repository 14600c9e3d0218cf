"""`shardplan offload` and `shardplan estimate offload`: the JSON contract, exit codes and bad input."""

import pytest

FLEXGEN_30B = ["estimate", "offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "512",
               "--gen-len", "32", "--gpu-batch", "48", "--num-gpu-batches", "3", "--kv-cache", "0,100,0",
               "--activations", "0,100,0", "--cpu-attention"]


def test_estimate_json_contract(run_cli) -> None:
    r = run_cli(*FLEXGEN_30B, "--weights", "8,92,0", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "feasible"
    plan = d["plan"]
    assert (plan["gpu_batch_size"], plan["num_gpu_batches"], plan["block_size"]) == (48, 3, 144)
    assert plan["weights"] == {"gpu": 0.08, "cpu": 0.92, "disk": 0.0}
    assert plan["kv_cache"] == {"gpu": 0.0, "cpu": 1.0, "disk": 0.0}
    assert plan["activations"]["cpu"] == 1.0
    assert plan["cpu_attention"] is True and plan["compression"] is False
    m = d["metrics"]
    assert m["tokens_per_s"] == pytest.approx(144 * 32 / (m["prefill_s"] + m["decode_s"]))
    mem = d["memory"]
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
                "total_bytes", "capacity_bytes", "cpu_bytes", "disk_bytes"):
        assert key in mem
    assert mem["gradients_bytes"] == mem["optimizer_bytes"] == 0
    assert mem["total_bytes"] <= mem["capacity_bytes"]
    assert d["bottleneck"] == {"prefill": "gpu", "decode": "cpu"}


def test_estimate_scoreboard_form_reads_tokens_per_s(run_cli) -> None:
    """The scoreboard's OPT-175B command: FlexGen's policy, measured 0.69 tokens/s."""
    r = run_cli("estimate", "offload", "--model", "opt-175b", "--hardware", "gcp-t4", "--prompt-len", "512",
                "--gen-len", "32", "--gpu-batch", "32", "--num-gpu-batches", "8", "--weights", "0,50,50",
                "--kv-cache", "0,0,100", "--activations", "0,100,0", "--cpu-attention", "--json")
    assert r.code == 0
    assert r.json()["metrics"]["tokens_per_s"] == pytest.approx(0.69, rel=0.25)


def test_infeasible_placement_is_a_result(run_cli) -> None:
    r = run_cli(*FLEXGEN_30B, "--weights", "60,40,0", "--json")
    assert r.code == 0
    d = r.json()
    assert d["status"] == "infeasible"
    assert d["reason"].startswith("GPU memory")
    assert d["suggestions"] and any(s.startswith("--weights") for s in d["suggestions"])
    assert d["metrics"]["tokens_per_s"] > 0  # the cost is still reported


def test_estimate_table_output(run_cli) -> None:
    r = run_cli(*FLEXGEN_30B, "--weights", "8,92,0", "--compress-cache")
    assert r.code == 0
    assert "Placement" in r.out and "Memory per tier" in r.out and "FEASIBLE" in r.out
    assert "4-bit KV cache" in r.out


def _estimate(**over: str) -> list[str]:
    """The FlexGen OPT-30B estimate command with some options replaced (``kv_cache="abc"``)."""
    opts = {"weights": "8,92,0", "kv_cache": "0,100,0", "activations": "0,100,0", **over}
    args = FLEXGEN_30B[:FLEXGEN_30B.index("--kv-cache")]
    for key, value in opts.items():
        args += [f"--{key.replace('_', '-')}", value]
    return args


@pytest.mark.parametrize("over,field", [
    ({"weights": "20,70,0"}, "weights"),
    ({"weights": "20,-10,90"}, "weights"),
    ({"weights": "20,80"}, "weights"),
    ({"kv_cache": "abc"}, "kv-cache"),
    ({"activations": "0,100,1"}, "activations"),
    ({"cpu_mem": "lots"}, "cpu-mem"),
    ({"disk": "-1TB"}, "disk"),
])
def test_bad_input_is_one_line_exit_2(run_cli, over: dict, field: str) -> None:
    r = run_cli(*_estimate(**over))
    assert r.code == 2
    assert r.err.count("\n") == 1 and field in r.err
    assert r.out == ""


def test_unknown_model_and_bad_lengths(run_cli) -> None:
    r = run_cli("offload", "--model", "opt-31b", "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32")
    assert r.code == 2 and "model" in r.err and r.err.count("\n") == 1
    r = run_cli("offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "0", "--gen-len", "32")
    assert r.code == 2 and "prompt-len" in r.err


def test_offload_plan_json(run_cli) -> None:
    r = run_cli("offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
                "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "optimal"
    assert set(d["solver"]) >= {"status", "wall_time_s", "candidates"}
    assert d["solver"]["candidates"] > 100
    for cls in ("weights", "kv_cache", "activations"):
        assert sum(d["plan"][cls].values()) == pytest.approx(1.0)
    assert d["metrics"]["tokens_per_s"] >= 7.32  # at least FlexGen's measured throughput under our model
    assert d["memory"]["total_bytes"] <= d["memory"]["capacity_bytes"]


def test_offload_with_sizes_objective_and_compression(run_cli) -> None:
    r = run_cli("offload", "--model", "llama-2-70b", "--hardware", "a6000-ws", "--prompt-len", "512", "--gen-len",
                "32", "--cpu-mem", "200GiB", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["memory"]["cpu_capacity_bytes"] == 200 * 2**30
    r = run_cli("offload", "--model", "mixtral-8x7b", "--hardware", "rtx4090-pc", "--prompt-len", "1024",
                "--gen-len", "128", "--objective", "latency")
    assert r.code == 0, r.err
    assert "objective latency" in r.out and "GPU batch 1 × 1" in r.out
    r = run_cli("offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
                "--objective", "fastest")
    assert r.code == 2


def test_offload_infeasible_exit_0(run_cli) -> None:
    r = run_cli("offload", "--model", "opt-175b", "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
                "--cpu-mem", "16GiB", "--disk", "64GiB", "--json")
    assert r.code == 0
    d = r.json()
    assert d["status"] == "infeasible" and d["reason"] and d["suggestions"]
