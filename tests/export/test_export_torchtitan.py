"""torchtitan TOML: parses with tomllib, every key and value is one torchtitan v0.2 reads, batch arithmetic holds."""

from __future__ import annotations

import math
import tomllib

import pytest
from export_plans import CORNERS, GPT3, LLAMA70, check_golden, load

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
    pairs = dict(zip(words[::2], words[1::2], strict=True))
    for section, table in doc.items():
        for key, value in table.items():
            assert pairs[f"--{section}.{key}"] == str(value)


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
