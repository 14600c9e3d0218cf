"""torchtitan TOML: parses with tomllib, every key and value is one torchtitan v0.2 reads, batch arithmetic holds."""

from __future__ import annotations

import math
import tomllib

import pytest
from export_plans import CORNERS, GPT3, LLAMA70, check_golden, load, target

from shardplan.cli.export import export_train
from shardplan.cli.export.torchtitan import toml_value
from shardplan.errors import ShardplanError

KEYS = load("torchtitan_keys.json")
REFUSED = {"mixtral-offload": "activations", "qwen3-zero3": "enable_cpu_offload", "qwen2.5-fp16": "fp16"}


def test_fixture_names_its_source() -> None:
    assert KEYS["commit"] in KEYS["source"] and KEYS["release"] == "v0.2.2"


def test_parses_and_every_key_exists(any_plan) -> None:
    name, t = any_plan
    try:
        text = export_train("torchtitan", t).text
    except ShardplanError as e:
        assert name in REFUSED and REFUSED[name] in str(e) and e.field == "export"
        return
    assert name not in REFUSED
    doc = tomllib.loads(text)
    flat = {}
    for section, table in doc.items():
        if section == "model":
            flat.update({f"model.{k}": v for k, v in table.items()})
            continue
        assert section in KEYS["keys"], section
        for key, value in table.items():
            assert key in KEYS["keys"][section], f"{name}: [{section}] {key}"
            flat[f"{section}.{key}"] = value
    for key, value in flat.items():
        allowed = KEYS["values"].get(key)
        if allowed is not None:
            assert all(v in allowed for v in (value if isinstance(value, list) else [value])), (key, value)
    p = t.plan
    par, tr = doc["parallelism"], doc["training"]
    degrees = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["tensor_parallel_degree"]
    assert degrees * par["pipeline_parallel_degree"] * par["context_parallel_degree"] == t.num_gpus
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    # train.py: gradient accumulation = global / (local × DP); with PP the local batch is cut into microbatches
    accumulation = tr["global_batch_size"] // (tr["local_batch_size"] * dp)
    assert tr["global_batch_size"] % (tr["local_batch_size"] * dp) == 0
    if p.pp > 1:
        assert tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"] * accumulation == p.num_microbatches
    else:
        assert accumulation == p.num_microbatches


def test_interleaved_layers_per_stage_gives_pp_times_v_stages() -> None:
    for t in (GPT3, CORNERS["llama-405b-uneven"], CORNERS["mixtral-offload"]):
        try:
            par = tomllib.loads(export_train("torchtitan", t).text)["parallelism"]
        except ShardplanError:
            continue
        less = par.get("pipeline_parallel_first_stage_less_layers", 1) + par.get(
            "pipeline_parallel_last_stage_less_layers", 1)
        # distributed/pipeline_parallel.py: ceil((layers + less) / layers_per_stage) virtual stages
        stages = math.ceil((t.model.num_layers + less) / par["pipeline_parallel_layers_per_stage"])
        assert stages == t.plan.pp * t.plan.interleave
        assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"


@pytest.mark.parametrize("name", ["gpt3-175b", "llama-3.1-70b"])
def test_golden(name: str) -> None:
    t = {"gpt3-175b": GPT3, "llama-3.1-70b": LLAMA70}[name]
    check_golden(f"{name}.torchtitan.toml", export_train("torchtitan", t).text)


def test_header_overrides_match_the_tables() -> None:
    text = export_train("torchtitan", LLAMA70).text
    doc = tomllib.loads(text)
    line = next(ln for ln in text.splitlines() if ln.startswith("#     --"))
    words = line[1:].split()
    pairs: dict[str, str] = {}
    for i, w in enumerate(words):  # ``--flag`` alone is true (torchtitan's boolean flags), else ``--key value``
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            pairs[w] = "True" if nxt.startswith("--") else nxt
    for section, table in doc.items():
        for key, value in table.items():
            assert pairs[f"--{section}.{key}"] == (",".join(value) if isinstance(value, list) else str(value))


def test_compile_follows_the_kernels_the_plan_was_costed_with() -> None:
    """A plan costed with fused kernels turns torch.compile on (torchtitan v0.2.2 ``[compile]``: model and loss);
    one costed with eager PyTorch kernels leaves it off (its default) and says why."""
    from dataclasses import replace

    assert tomllib.loads(export_train("torchtitan", LLAMA70).text)["compile"] == {
        "enable": True, "components": ["model", "loss"]}
    eager = export_train("torchtitan", replace(LLAMA70, eager_kernels=True))
    assert "compile" not in tomllib.loads(eager.text)
    assert any("eager PyTorch elementwise kernels" in n for n in eager.notes)


def test_zero_stage_mapping() -> None:
    par = tomllib.loads(export_train("torchtitan", LLAMA70).text)["parallelism"]
    assert par["data_parallel_shard_degree"] == 8 and par["fsdp_reshard_after_forward"] == "never"
    par = tomllib.loads(export_train("torchtitan", GPT3).text)["parallelism"]
    assert par["data_parallel_replicate_degree"] == 1 and par["data_parallel_shard_degree"] == 1


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (3, "3"), (0.5, "0.5"), ('a"b', '"a\\"b"'),
                                             (["x", "y"], '["x", "y"]')])
def test_toml_values(value, text: str) -> None:
    assert toml_value(value) == text
    assert tomllib.loads(f"k = {text}")["k"] == value


def test_default_allowances_reproduce_the_reported_uneven_split() -> None:
    """Issue 15 saw torchtitan put 20/21/20/19 of Llama-70B's 80 layers on 4 stages with the defaults (1, 1)."""
    from shardplan.cli.export.titan_split import plan_layers_per_rank, titan_split

    assert titan_split(4, 80, 1, 1) == [20, 21, 20, 19]
    assert plan_layers_per_rank(80, 4) == [20, 20, 20, 20]


@pytest.mark.parametrize(("layers", "pp", "v", "expected"), [
    # hand-derived: 80 layers on 4 stages need no allowance to split 20 each
    (80, 4, 1, {"pipeline_parallel_first_stage_less_layers": 0, "pipeline_parallel_last_stage_less_layers": 0}),
    # 30 on 4: the plan gives the 2 extras to the middles (7/8/8/7); the defaults (1, 1) do the same: 32 → 8 each
    (30, 4, 1, {"pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1}),
    # 126 on 16 × 2 chunks: 7/8…8/7; with (1, 1) 128 effective layers, 4 per virtual stage, 3 on the ends
    (126, 16, 2, {"pipeline_parallel_layers_per_stage": 4, "pipeline_parallel_first_stage_less_layers": 1,
                  "pipeline_parallel_last_stage_less_layers": 1}),
])
def test_pipeline_allowances_make_torchtitans_split_the_plans(layers: int, pp: int, v: int, expected: dict) -> None:
    from shardplan.cli.export.titan_split import pipeline_settings

    assert pipeline_settings(layers, pp, v) == expected


def test_explicit_module_lists_when_no_allowance_fits() -> None:
    """7 layers on 2 ranks × 3 chunks: the plan puts 4 and 3 on the ranks; no allowance pair yields 6 stages that
    do (checked by hand for all nine pairs), so the module lists are written: chunks 2,1,1 on rank 0, 1,1,1 on 1."""
    from shardplan.cli.export.titan_split import pipeline_settings

    fqns = pipeline_settings(7, 2, 3)["module_fqns_per_model_part"]
    assert [len([m for m in s if m.startswith("layers.")]) for s in fqns] == [2, 1, 1, 1, 1, 1]
    assert fqns[0][0] == "tok_embeddings" and fqns[-1][-2:] == ["norm", "output"]
    assert [m for s in fqns for m in s if m.startswith("layers.")] == [f"layers.{i}" for i in range(7)]


def test_one_f_one_b_export_sets_the_allowances() -> None:
    t = target("llama-3.1-70b", num_gpus=32, seq_len=4096, tp=8, pp=4, dp=1, num_microbatches=8, global_batch=8)
    par = tomllib.loads(export_train("torchtitan", t).text)["parallelism"]
    assert par["pipeline_parallel_first_stage_less_layers"] == 0
    assert par["pipeline_parallel_last_stage_less_layers"] == 0


def test_models_torchtitan_lacks_get_a_note() -> None:
    """torchtitan v0.2 ships llama3, llama4, deepseek_v3 and qwen3: GPT-3 and Mixtral need model code."""
    assert any("no gpt model" in n for n in export_train("torchtitan", GPT3).notes)
    mixtral = target("mixtral-8x7b", num_gpus=8, seq_len=4096, dp=8, ep=8, num_microbatches=1, global_batch=8,
                     zero_stage=1)
    assert any("no mixtral model" in n for n in export_train("torchtitan", mixtral).notes)
    assert not any("torchtitan v0.2 has no" in n for n in export_train("torchtitan", LLAMA70).notes)


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
def test_a_module_set_only_megatron_expresses_is_refused(fmt: str) -> None:
    from shardplan.errors import ShardplanError

    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, hardware="dgx-h100", tp=1, pp=1, dp=8, microbatch_size=1,
               num_microbatches=8, global_batch=64, recompute="selective", recompute_modules=["layernorm", "mlp"])
    with pytest.raises(ShardplanError, match="recompute-modules"):
        export_train(fmt, t)
    plain = target("llama-3.1-8b", num_gpus=8, seq_len=4096, hardware="dgx-h100", tp=1, pp=1, dp=8,
                   microbatch_size=1, num_microbatches=8, global_batch=64, recompute="selective")
    assert export_train(fmt, plain).text


def test_interleaved_plan_says_its_sends_were_priced_overlapped() -> None:
    """torchtitan's Interleaved1F1B has no overlap_p2p_comm switch: an interleaved plan priced with overlapped sends
    says so and names the hardware-file setting that plans with blocking ones."""
    import dataclasses

    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, pp=4, num_microbatches=16, global_batch=16, interleave=2)
    assert any("overlap_p2p_comm: false" in n for n in export_train("torchtitan", t).notes)
    blocking = dataclasses.replace(t, overlap_p2p_comm=False)
    assert not any("overlap_p2p_comm" in n for n in export_train("torchtitan", blocking).notes)
