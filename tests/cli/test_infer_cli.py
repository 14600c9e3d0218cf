"""`shardplan infer` and `shardplan estimate infer`: JSON contract, exit codes, determinism."""

from __future__ import annotations

import pytest

EST = ("estimate", "infer", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "4", "--tp", "4",
       "--batch", "32", "--prompt-len", "2048", "--gen-len", "256")
PLAN = ("infer", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "8", "--prompt-len", "2048",
        "--gen-len", "256")


def test_estimate_json_contract(run_cli) -> None:
    r = run_cli(*EST, "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "feasible"
    assert d["plan"] == {"tp": 4, "pp": 1, "ep": 1, "replicas": 1, "batch_size": 32}
    for key in ("ttft_s", "tpot_s", "tokens_per_s", "max_batch_size", "e2e_latency_s"):
        assert d["metrics"][key] > 0
    mem = d["memory"]
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
                "total_bytes", "capacity_bytes", "kv_cache_tokens"):
        assert key in mem
    assert mem["gradients_bytes"] == mem["optimizer_bytes"] == 0
    assert {row["kind"] for row in d["decode_layers"]} == {"embedding", "attention", "mlp", "head"}
    assert {row["bound"] for row in d["decode_layers"]} <= {"compute", "memory", "communication"}


def test_estimate_renders_tables(run_cli) -> None:
    r = run_cli(*EST)
    assert r.code == 0
    assert "Prefill" in r.out and "engine step" in r.out and "TTFT" in r.out and "token slots" in r.out


def test_tokens_per_s_band_in_json_and_summary(run_cli) -> None:
    import json
    from importlib import resources

    w = json.loads(resources.files("shardplan.data").joinpath("error_bands.json").read_text())["bands"]["serve"]["h100"]
    m = run_cli(*EST, "--json").json()["metrics"]
    assert m["band_pct"] == pytest.approx(100 * w)
    assert m["tokens_per_s_range"] == pytest.approx([m["tokens_per_s"] / (1 + w), m["tokens_per_s"] * (1 + w)])
    assert f"±{100 * w:.0f}%" in run_cli(*EST).out


def test_plan_json_contract_and_determinism(run_cli) -> None:
    r1 = run_cli(*PLAN, "--max-batch", "--json")
    r2 = run_cli(*PLAN, "--max-batch", "--json")
    assert r1.code == 0, r1.err
    d = r1.json()
    assert d["status"] == "optimal"
    assert set(d["plan"]) == {"tp", "pp", "ep", "replicas", "batch_size"}
    assert d["plan"]["batch_size"] == d["metrics"]["max_batch_size"]
    assert {"status", "wall_time_s", "candidates"} <= set(d["solver"])
    strip = [{k: v for k, v in r.json().items() if k != "solver"} for r in (r1, r2)]
    assert strip[0] == strip[1]


def test_plan_renders(run_cli) -> None:
    r = run_cli(*PLAN, "--max-tpot-ms", "30", "--top-k", "2")
    assert r.code == 0, r.err
    assert "Plan" in r.out and "Next best plans" in r.out


def test_infeasible_layout_exits_zero_with_reason(run_cli) -> None:
    r = run_cli("estimate", "infer", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "1",
                "--batch", "1", "--prompt-len", "2048", "--gen-len", "256", "--json")
    assert r.code == 0
    d = r.json()
    assert d["status"] == "infeasible" and d["reason"].startswith("GPU memory") and d["suggestions"]


def test_bad_input_exits_two_with_one_line(run_cli) -> None:
    for args, field in ((("--tp", "3"), "tp"), (("--batch", "0"), "batch"), (("--dtype", "int3"), "dtype"),
                        (("--weight-dtype", "fp4"), "weight-dtype")):
        opts = {"--tp": "4", "--batch": "32", **dict([args])}
        r = run_cli(*EST[:8], *EST[12:], *[x for kv in opts.items() for x in kv])
        assert r.code == 2, (args, r.out, r.err)
        assert len(r.err.strip().splitlines()) == 1 and field in r.err
    r = run_cli(*PLAN, "--objective", "cheapest")
    assert r.code == 2 and "objective" in r.err and len(r.err.strip().splitlines()) == 1
    r = run_cli(*PLAN, "--batch", "4", "--max-batch")
    assert r.code == 2 and "batch" in r.err


def test_estimate_json_is_byte_identical(run_cli) -> None:
    assert run_cli(*EST, "--json").out == run_cli(*EST, "--json").out


def test_request_rate_beyond_capacity_is_infeasible_naming_the_rate(run_cli) -> None:
    r = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "8", "-p", "1024", "-n", "256",
                "--request-rate", "1000", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["status"] == "infeasible" and d["reason"].startswith("request rate")
    cap = float(d["suggestions"][0].split()[-1])
    ok = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "8", "-p", "1024", "-n", "256",
                 "--request-rate", str(cap), "--json").json()
    assert ok["status"] == "optimal" and ok["metrics"]["utilisation"] < 1
    assert ok["metrics"]["tokens_per_s"] == pytest.approx(cap * 256)


def test_bad_engine_and_mode_are_bad_input(run_cli) -> None:
    for flag, value in (("--engine", "tgi"), ("--mode", "offline"), ("--slo-statistic", "p99")):
        r = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-p", "128", "-n", "16", flag, value)
        assert r.code == 2 and r.err.count("\n") == 1 and flag.strip("-") in r.err


def test_request_rate_with_a_static_batch_is_bad_input(run_cli) -> None:
    r = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-p", "128", "-n", "16", "--mode", "static",
                "--request-rate", "5")
    assert r.code == 2 and r.err.count("\n") == 1 and "request-rate" in r.err
