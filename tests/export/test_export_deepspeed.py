"""DeepSpeed config JSON: parses, every key is one DeepSpeed reads, batch arithmetic holds, goldens, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from export_plans import CORNERS, GPT3, LLAMA70, check_golden, load, target

from shardplan.cli.export import export_train
from shardplan.errors import ShardplanError

KEYS = load("deepspeed_keys.json")
REFUSED = {"mixtral-offload": "offload-activations"}


def walk(cfg: dict[str, Any], prefix: str = "") -> list[tuple[str, str, Any]]:
    """(section, key, value) for every key, sections named by their dotted path ('' = top level)."""
    out = []
    for k, v in cfg.items():
        out.append((prefix, k, v))
        if isinstance(v, dict):
            out += walk(v, f"{prefix}.{k}" if prefix else k)
    return out


def test_fixture_names_its_source() -> None:
    assert KEYS["commit"] in KEYS["source"] and "zero_optimization" in KEYS["keys"]


def test_every_key_is_read_by_deepspeed(any_plan) -> None:
    name, t = any_plan
    try:
        text = export_train("deepspeed", t).text
    except ShardplanError as e:
        assert name in REFUSED and REFUSED[name] in str(e) and e.field == "export"
        return
    assert name not in REFUSED
    cfg = json.loads(text)
    for section, key, value in walk(cfg):
        assert section in KEYS["keys"], f"{name}: section {section!r}"
        assert key in KEYS["keys"][section], f"{name}: {section}.{key} is not a DeepSpeed config key"
        dotted = f"{section}.{key}" if section else key
        if dotted in KEYS["values"]:
            assert value in KEYS["values"][dotted]
    p = t.plan
    # runtime/config.py _batch_assertion with DeepSpeed's world size = the data-parallel size
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * p.dp
    if cfg["zero_optimization"]["stage"] == 0:  # engine.py _do_optimizer_sanity_check
        assert "data_types" not in cfg
    ratio = cfg["zero_optimization"].get("offload_optimizer", {}).get("ratio", 1.0)
    assert ratio == 1.0 or cfg["zero_optimization"]["stage"] == 3  # zero/config.py offload_ratio_check


@pytest.mark.parametrize("name", ["gpt3-175b", "llama-3.1-70b"])
def test_golden(name: str) -> None:
    t = {"gpt3-175b": GPT3, "llama-3.1-70b": LLAMA70}[name]
    check_golden(f"{name}.deepspeed.json", export_train("deepspeed", t).text)


def test_parallel_degrees_and_launch_are_notes() -> None:
    notes = export_train("deepspeed", LLAMA70, file_name="ds.json").notes
    assert "TP=4 CP=2" in notes[0] and "must come out as 8" in notes[0]
    assert notes[-1].startswith("launch: deepspeed --num_nodes 8 --hostfile <hostfile> --num_gpus 8")
    assert notes[-1].endswith("--deepspeed --deepspeed_config ds.json")
    launcher = set(KEYS["launcher"]["flags"])
    assert {w for w in notes[-1].split() if w.startswith("--")} <= launcher


def test_partial_optimizer_offload_needs_zero3() -> None:
    cfg = json.loads(export_train("deepspeed", CORNERS["qwen3-zero3"]).text)
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True, "ratio": 0.4}
    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, dp=8, num_microbatches=1, global_batch=8, zero_stage=2,
               optimizer=0.3)
    with pytest.raises(ShardplanError, match="ratio needs stage 3") as e:
        export_train("deepspeed", t)
    assert e.value.field == "export"


def test_zero2_with_pipeline_is_refused() -> None:
    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, pp=2, dp=4, num_microbatches=2, global_batch=8, zero_stage=2)
    with pytest.raises(ShardplanError, match="pipeline parallelism"):
        export_train("deepspeed", t)


def test_full_recompute_writes_activation_checkpointing() -> None:
    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, dp=8, num_microbatches=1, global_batch=8, zero_stage=3,
               recompute="full", weights=1.0, optimizer=1.0, activations=1.0)
    cfg = json.loads(export_train("deepspeed", t).text)
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is True
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"


def test_expert_parallel_with_zero3_is_refused_with_the_fix() -> None:
    """runtime/engine.py: ``assert not self.has_moe_layers, "MoE not supported with Stage 3"``."""
    t = target("mixtral-8x7b", num_gpus=8, seq_len=4096, dp=8, ep=8, num_microbatches=1, global_batch=8, zero_stage=3)
    with pytest.raises(ShardplanError, match="ZeRO-3") as e:
        export_train("deepspeed", t)
    assert "--zero 2" in str(e.value) and e.value.field == "export"


def test_expert_parallel_note_names_deepspeeds_moe_layer() -> None:
    notes = export_train("deepspeed", CORNERS["deepseek-v3-ep"]).notes
    ep = [n for n in notes if n.startswith("EP=16")]
    assert len(ep) == 1 and "deepspeed.moe.layer.MoE" in ep[0] and "ep_size=16" in ep[0]
    assert "num_experts=256" in ep[0] and "k=8" in ep[0]  # DeepSeek-V3 config.json: n_routed_experts, top-8
    assert "--moe-expert-parallel-size" in ep[0]
    assert not any("EP=" in n and "--tensor-model-parallel-size" in n for n in notes)


def test_pipelined_plan_notes_what_the_pipeline_engine_cannot_take() -> None:
    # DeepSpeed runtime/pipe/schedule.py TrainSchedule runs one chunk per stage; runtime/pipe/module.py
    # PipelineModule._partition_layers knows uniform, parameters and type:REGEX only (found by benchmarks/frameworks)
    t = target("llama-3.1-70b", num_gpus=64, seq_len=8192, tp=4, pp=4, dp=2, cp=2, microbatch_size=1,
               num_microbatches=128, global_batch=256, interleave=2, zero_stage=1, sequence_parallel=True,
               stage_layers=[19, 21, 21, 19])
    notes = export_train("deepspeed", t).notes
    assert any("2 interleaved chunks per stage" in n for n in notes)
    assert any("[19, 21, 21, 19]" in n and "--uniform-stages" in n for n in notes)
    even = target("llama-3.1-70b", num_gpus=64, seq_len=8192, tp=4, pp=4, dp=2, cp=2, microbatch_size=1,
                  num_microbatches=128, global_batch=256, zero_stage=1, stage_layers=[20, 20, 20, 20])
    assert not any("PipelineModule" in n or "chunk" in n for n in export_train("deepspeed", even).notes)
