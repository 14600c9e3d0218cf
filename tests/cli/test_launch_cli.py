"""`--export vllm|flexgen` and the Pareto plot on the serving and offload commands."""

import pytest


def test_infer_exports_vllm_serve_flags(run_cli, tmp_path) -> None:
    out = tmp_path / "serve.sh"
    r = run_cli("infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "4", "--prompt-len", "1024",
                "--gen-len", "256", "--tp", "2", "--export", "vllm", "--output", str(out), "--json")
    assert r.code == 0, r.err
    plan = r.json()["plan"]
    words = out.read_text().replace("\\\n", " ").split()
    assert words[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]
    value = {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--") and i + 1 < len(words)}
    assert value["--tensor-parallel-size"] == "2"
    assert value["--max-num-seqs"] == str(plan["batch_size"])
    assert value["--max-model-len"] == "1280"
    assert value["--data-parallel-size"] == str(plan["replicas"])


def test_offload_exports_flexgen_percent(run_cli) -> None:
    r = run_cli("estimate", "offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "512",
                "--gen-len", "32", "--gpu-batch", "48", "--num-gpu-batches", "3", "--weights", "20,80,0",
                "--kv-cache", "0,100,0", "--activations", "0,100,0", "--cpu-attention", "--export", "flexgen")
    assert r.code == 0, r.err
    words = r.out.replace("\\\n", " ").split()
    i = words.index("--percent")
    assert words[i + 1:i + 7] == ["20", "80", "0", "100", "0", "100"]
    assert "--cpu-cache-compute" in words and words[words.index("--gpu-batch-size") + 1] == "48"


@pytest.mark.parametrize(("model", "module"), [("opt-30b", "flexgen"), ("opt-175b", "flexllmgen")])
def test_offload_plan_for_flexgen_keeps_activations_on_one_tier(run_cli, model: str, module: str) -> None:
    """FlexGen's OptLM raises NotImplementedError unless act_gpu, act_cpu or act_disk percent is 100
    (flex_opt.py); without --export the planner split them (issue 15: opt-175b on gcp-t4, 9/0/91)."""
    r = run_cli("offload", "--model", model, "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
                "--export", "flexgen", "--flexgen-module", module)
    assert r.code == 0, r.err
    words = r.out.replace("\\\n", " ").split()
    assert words[:3] == ["python3", "-m", f"{module}.flex_opt"]
    i = words.index("--percent")
    act_gpu, act_cpu = int(words[i + 5]), int(words[i + 6])
    assert (act_gpu, act_cpu) in ((100, 0), (0, 100), (0, 0))


def test_estimate_with_split_activations_cannot_export_to_flexgen(run_cli) -> None:
    r = run_cli("estimate", "offload", "--model", "opt-30b", "--hardware", "gcp-t4", "--prompt-len", "512",
                "--gen-len", "32", "--gpu-batch", "48", "--num-gpu-batches", "3", "--weights", "20,80,0",
                "--kv-cache", "0,100,0", "--activations", "60,40,0", "--export", "flexgen")
    assert r.code == 2 and r.out == "" and "one tier" in r.err and r.err.count("\n") == 1


def test_export_name_must_match_the_command(run_cli) -> None:
    r = run_cli("offload", "--model", "opt-6.7b", "--hardware", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
                "--export", "vllm")
    assert r.code == 2 and r.err.count("\n") == 1


def test_pareto_plot_needs_pareto(run_cli, tmp_path) -> None:
    r = run_cli("infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--prompt-len", "512",
                "--gen-len", "64", "--plot", str(tmp_path / "p.png"))
    assert r.code == 2 and "pareto" in r.err


def test_pareto_plot_is_written(run_cli, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "pareto.png"
    r = run_cli("infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--prompt-len", "512",
                "--gen-len", "64", "--pareto", "--plot", str(path))
    assert r.code == 0, r.err
    assert path.stat().st_size > 10_000 and path.read_bytes()[:4] == b"\x89PNG"


def _flags(text: str) -> dict[str, str]:
    words = text.replace("\\\n", " ").split()
    return {w: (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else "")
            for i, w in enumerate(words) if w.startswith("--")}


def test_vllm_export_writes_the_budget_and_the_plan_batch(run_cli, tmp_path) -> None:
    out = tmp_path / "serve.sh"
    r = run_cli("infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1", "--prompt-len", "1024",
                "--gen-len", "256", "--max-num-batched-tokens", "4096", "--kv-dtype", "fp8",
                "--gpu-memory-utilization", "0.85", "--export", "vllm", "--output", str(out), "--json")
    assert r.code == 0, r.err
    v = _flags(out.read_text())
    assert v["--max-num-batched-tokens"] == "4096" and v["--max-num-seqs"] == str(r.json()["plan"]["batch_size"])
    assert v["--gpu-memory-utilization"] == "0.85" and v["--kv-cache-dtype"] == "fp8"


def test_vllm_export_keeps_the_plans_expert_parallel_degree(run_cli) -> None:
    # EP=4 over 8 replicas of TP=2: vLLM's EP spans TP×DP of one deployment, so DP=4 and two deployments
    r = run_cli("infer", "--model", "deepseek-v3", "--hardware", "hgx-h200", "--gpus", "16", "--prompt-len", "1024",
                "--gen-len", "256", "--tp", "2", "--ep", "4", "--export", "vllm")
    assert r.code == 0, r.err
    v = _flags(r.out)
    assert v["--data-parallel-size"] == "4" and "--enable-expert-parallel" in v
    assert "run 2 such deployments" in r.err and "EP=4" in r.err


def test_vllm_export_notes_a_multi_node_launch(run_cli) -> None:
    r = run_cli("infer", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "16", "--prompt-len", "1024",
                "--gen-len", "256", "--tp", "16", "--allow-cross-node-tp", "--export", "vllm")
    assert r.code == 0, r.err
    assert _flags(r.out)["--distributed-executor-backend"] == "ray" and "ray start" in r.err
    r = run_cli("infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "16", "--prompt-len", "1024",
                "--gen-len", "256", "--tp", "1", "--pp", "1", "--export", "vllm")
    assert r.code == 0 and "--data-parallel-size-local 8" in r.err and "--headless" in r.err
