"""Other frameworks' recompute policies through the CLI: pinned, re-estimated, exported, refused."""

import pytest

REQ = ("-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "8", "-b", "16", "-s", "8192")


@pytest.mark.parametrize("policy", ["torchtitan_op", "maxtext_save_dot_except_mlpwi"])
def test_train_with_a_pinned_policy_re_estimates_to_the_same_step(run_cli, policy: str) -> None:
    r = run_cli("train", *REQ, "--recompute", "selective", "--recompute-modules", policy, "--json")
    assert r.code == 0, r.err
    p, m = r.json()["plan"], r.json()["metrics"]
    assert p["recompute"] == "selective" and p["recompute_modules"] == [policy]
    assert m["hfu"] > m["mfu"]  # the rerun forward is hardware work, not model work
    est = run_cli("estimate", "train", *REQ, "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--dp", str(p["dp"]),
                  "--cp", str(p["cp"]), "--microbatch", str(p["microbatch_size"]), "--interleave", str(p["interleave"]),
                  "--zero", str(p["zero_stage"]), "--recompute", "selective", "--recompute-modules", policy,
                  "--sequence-parallel" if p["sequence_parallel"] else "--no-sequence-parallel", "--json")
    assert est.code == 0, est.err
    assert est.json()["metrics"]["step_time_s"] == pytest.approx(m["step_time_s"], rel=5e-3)
    assert est.json()["memory"]["total_bytes"] == pytest.approx(r.json()["memory"]["total_bytes"], rel=5e-3)


@pytest.mark.parametrize(("modules", "words"), [
    ("torchtitan_opp", "must be a non-empty set of"),
    ("torchtitan_op,layernorm", "name it alone"),
])
def test_bad_policy_names_are_one_line_exit_2(run_cli, modules: str, words: str) -> None:
    r = run_cli("estimate", "train", *REQ, "--tp", "1", "--recompute", "selective", "--recompute-modules", modules)
    assert r.code == 2 and r.err.count("\n") == 1 and words in r.err and "recompute_modules" in r.err


def test_policy_needs_dense_attention_layers(run_cli) -> None:
    r = run_cli("estimate", "train", "-m", "mixtral-8x7b", "-H", "dgx-h100", "--gpus", "64", "-b", "256", "-s",
                "4096", "--tp", "2", "--ep", "8", "--recompute", "selective", "--recompute-modules", "torchtitan_op")
    assert r.code == 2 and r.err.count("\n") == 1 and "no MoE" in r.err


def test_exports_write_or_refuse_the_policy(run_cli, tmp_path) -> None:
    est = ("estimate", "train", *REQ, "--tp", "1", "--zero", "3", "--recompute", "selective", "--recompute-modules")
    out = tmp_path / "run.toml"
    ok = run_cli(*est, "torchtitan_op", "--export", "torchtitan", "-o", str(out))
    assert ok.code == 0, ok.err
    text = out.read_text()
    assert '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"' in text
    for policy, framework in (("torchtitan_op", "megatron"), ("maxtext_save_dot_except_mlpwi", "torchtitan"),
                              ("maxtext_save_dot_except_mlpwi", "megatron")):
        r = run_cli(*est, policy, "--export", framework, "-o", str(tmp_path / "x"))
        assert r.code == 2 and r.err.count("\n") == 1 and "cannot express" in r.err and policy in r.err
