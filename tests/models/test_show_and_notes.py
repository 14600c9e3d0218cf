"""`models show` prints MLA dims, the shared-expert FFN, the layer pattern and the counting convention; the jobs
say on stderr what of a new layer kind the cost model does not yet cost exactly."""

from __future__ import annotations

import json


def test_show_deepseek_v3_mla_dims_and_shared_expert(run_cli):
    # deepseek-ai/DeepSeek-V3 config.json: qk_nope_head_dim 128 + qk_rope_head_dim 64, v_head_dim 128; one shared
    # expert of moe_intermediate_size 2048.
    r = run_cli("models", "show", "deepseek-v3")
    assert r.code == 0
    assert "q/k 192 (nope 128 + rope 64), v 128" in r.out
    assert "1 shared × 2048" in r.out and "head_dim 56" not in r.out
    assert "tied embeddings once" in r.out and "MTP" in r.out
    d = json.loads(run_cli("models", "show", "deepseek-v3", "--json").out)
    assert d["mla_head_dims"] == {"qk": 192, "qk_nope": 128, "qk_rope": 64, "v": 128}
    assert d["head_dim"] == 192 and d["shared_expert_ffn_hidden_size"] == 2048
    assert d["layer_kinds"] == {"Fd": 3, "Fe": 58} and d["mtp_layers"] == 1


def test_show_gemma3_pattern(run_cli):
    r = run_cli("models", "show", "gemma-3-4b")
    assert r.code == 0 and "pattern [S*5 F]" in r.out
    # 34 layers: global at 5, 11, 17, 23, 29 → 5 full, 29 sliding.
    assert json.loads(run_cli("models", "show", "gemma-3-4b", "--json").out)["layer_kinds"] == {"Fd": 5, "Sd": 29}


def test_estimate_says_what_is_approximated(run_cli):
    r = run_cli("estimate", "train", "-m", "gemma-3-4b", "-H", "dgx-h100", "-g", "8", "-b", "8", "-s", "2048",
                "--json")
    assert r.code == 0
    assert "sliding-window" not in r.err  # costed per kind in training (the offload job still approximates)
    assert "note: vision tower not planned" in r.err
    json.loads(r.out)  # stdout stays one JSON object


def test_dense_llama_gets_no_note(run_cli):
    r = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "8", "-b", "8", "-s", "2048",
                "--json")
    assert r.code == 0 and "note:" not in r.err
