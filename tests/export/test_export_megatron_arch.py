"""The Megatron export trains the planned architecture: RoPE base and scaling, router, MTP, sliding-window and
linear-attention patterns, sinks, output gate, expert TP. Every flag written is checked against Megatron-LM's
argument list (tests/data/export/megatron_flags.json, with its commit) by test_export_megatron.py too."""

from __future__ import annotations

import dataclasses

import pytest
from export_plans import load, target

from shardplan.cli.export import export_train

FLAGS = load("megatron_flags.json")["flags"]


def _args(model: str, **plan) -> tuple[dict[str, str | None], tuple[str, ...]]:
    t = target(model, num_gpus=8, seq_len=4096, **({"tp": 8} | plan))
    out = export_train("megatron", t)
    args: dict[str, str | None] = {}
    for line in out.text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, *value = line.split(maxsplit=1)
        assert flag in FLAGS, f"{flag} is not a Megatron-LM argument"
        args[flag] = value[0] if value else None
    return args, out.notes


def test_llama31_rope() -> None:
    """Llama 3.1: base 500000 and llama3 scaling ×8 (Megatron's default base is 10000)."""
    a, _ = _args("llama-3.1-8b")
    assert a["--rotary-base"] == "500000" and "--use-rope-scaling" in a and a["--rope-scaling-factor"] == "8"


def test_mixtral_rope_base() -> None:
    a, _ = _args("mixtral-8x7b", ep=8, tp=1, dp=8)
    assert a["--rotary-base"] == "1000000"


def test_deepseek_v3_router_yarn_and_mtp() -> None:
    """DeepSeek-V3 (config.json): sigmoid scores, e_score_correction_bias, routed_scaling_factor 2.5, n_group 8,
    topk_group 4, YaRN ×40 over 4096 tokens; its 1 MTP layer is written only where the plan priced it."""
    a, notes = _args("deepseek-v3", tp=1, ep=8, dp=8)
    assert "--mtp-num-layers" not in a and any("--mtp-layers 1" in n for n in notes)
    t = dataclasses.replace(target("deepseek-v3", num_gpus=8, seq_len=4096, tp=1, ep=8, dp=8), mtp_layers=1)
    a = dict(line.split(maxsplit=1) if " " in line else (line, None) for line in export_train("megatron", t).text
             .splitlines() if line.strip() and not line.startswith("#"))
    assert a["--moe-router-score-function"] == "sigmoid"
    assert "--moe-router-enable-expert-bias" in a
    assert a["--moe-router-topk-scaling-factor"] == "2.5"
    assert a["--moe-router-num-groups"] == "8" and a["--moe-router-group-topk"] == "4"
    assert a["--rope-type"] == "yarn" and a["--rotary-scaling-factor"] == "40"
    assert a["--yarn-original-max-position-embeddings"] == "4096"
    assert a["--mtp-num-layers"] == "1"


def test_gemma3_sliding_window_pattern() -> None:
    """Gemma 3: five 1024-token sliding layers then one global layer → window (1023, 0), every 6th layer full;
    the local RoPE base and linear scaling have no flag: said as notes."""
    a, notes = _args("gemma-3-27b", tp=8)
    assert a["--window-size"] == "1023,0" and a["--window-attn-skip-freq"] == "6" and "--qk-layernorm" in a
    assert any("RoPE base 10000" in n for n in notes) and any("linear RoPE scaling" in n for n in notes)


def test_gpt_oss_sinks_window_and_yarn() -> None:
    a, notes = _args("gpt-oss-120b", tp=8)
    assert a["--softmax-type"] == "learnable" and a["--window-size"] == "127,0"
    assert a["--window-attn-skip-freq"] == "2" and a["--position-embedding-type"] == "yarn"
    assert any("router's bias" in n for n in notes)


def test_qwen3_next_gated_deltanet() -> None:
    """Qwen3-Next: three Gated DeltaNet layers then one gated full-attention layer (full_attention_interval 4)."""
    a, _ = _args("qwen3-next-80b-a3b", tp=2, dp=4)
    assert a["--experimental-attention-variant"] == "gated_delta_net" and a["--linear-attention-freq"] == "4"
    assert a["--linear-num-value-heads"] == "32" and "--attention-output-gate" in a


@pytest.mark.parametrize(("etp", "written"), [(None, False), (2, False), (1, True)])
def test_expert_tensor_parallel_size(etp, written) -> None:
    """--expert-tensor-parallel-size only where expert TP differs from tp (Megatron defaults it to tp)."""
    a, _ = _args("qwen3-30b-a3b", tp=2, dp=4, ep=8, etp=etp)
    assert ("--expert-tensor-parallel-size" in a) == written
    if written:
        assert a["--expert-tensor-parallel-size"] == "1" and a["--expert-model-parallel-size"] == "8"


def test_llama4_chunked_attention_is_a_note() -> None:
    _, notes = _args("llama-4-scout", tp=8)
    assert any("chunked local attention" in n for n in notes)
