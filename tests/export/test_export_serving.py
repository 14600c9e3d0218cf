"""vllm serve and FlexGen flex_opt arguments: every flag exists in the target, values are valid, goldens."""

from __future__ import annotations

import shlex

import pytest
from export_plans import check_golden, load

from shardplan.cli.export import flexgen_args, shell_join, vllm_args
from shardplan.errors import ShardplanError

VLLM = load("vllm_flags.json")
FLEXGEN = load("flexgen_flags.json")

VLLM_PLANS = {
    # Llama-3.1-70B on one 8×H100 node as two TP=4 replicas, 2k prompt + 512 generated tokens.
    "llama-3.1-70b": dict(model="meta-llama/Llama-3.1-70B-Instruct", tp=4, pp=1, max_num_seqs=96, max_model_len=2560,
                          gpu_memory_utilization=0.9, dtype="bf16", data_parallel_size=2),
    # Mixtral-8x7B with expert parallelism, fp8 weights and fp8 KV cache.
    "mixtral-8x7b": dict(model="mistralai/Mixtral-8x7B-Instruct-v0.1", tp=2, pp=2, max_num_seqs=256,
                         max_model_len=4096, gpu_memory_utilization=0.92, kv_cache_dtype="fp8", dtype="bf16",
                         quantization="fp8", enable_expert_parallel=True),
}
FLEXGEN_PLANS = {
    # FlexGen paper setting: OPT-30B on one 16 GB T4 with 208 GB of CPU memory (Sheng et al. 2023, Table 2 era).
    "opt-30b": dict(model="opt-30b", gpu_batch_size=48, num_gpu_batches=3, weights=(0.2, 0.8, 0.0),
                    kv_cache=(0.0, 1.0, 0.0), activations=(1.0, 0.0, 0.0), cpu_attention=True, compress_weight=False,
                    compress_cache=False, prompt_len=512, gen_len=32),
    # OPT-175B spilling weights to disk, with 4-bit compression.
    "opt-175b": dict(model="facebook/opt-175b", gpu_batch_size=32, num_gpu_batches=8, weights=(0.0, 0.5, 0.5),
                     kv_cache=(0.0, 1.0, 0.0), activations=(1.0, 0.0, 0.0), cpu_attention=True, compress_weight=True,
                     compress_cache=True, prompt_len=512, gen_len=32, offload_dir="/mnt/nvme/flexgen"),
}


def options(argv: list[str], command_len: int) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for word in argv[command_len:]:
        if word.startswith("--"):
            out.append((word, []))
        else:
            out[-1][1].append(word)
    return out


@pytest.mark.parametrize("name", sorted(VLLM_PLANS))
def test_vllm_flags_exist_and_values_are_valid(name: str) -> None:
    argv = vllm_args(**VLLM_PLANS[name])
    assert argv[:2] == VLLM["command"] and not argv[2].startswith("--")
    for flag, values in options(argv, 3):
        assert flag in VLLM["flags"], flag
        assert len(values) == (0 if VLLM["flags"][flag] == "switch" else 1), flag
        if flag in VLLM["choices"]:
            assert values[0] in VLLM["choices"][flag], (flag, values)


@pytest.mark.parametrize("name", sorted(VLLM_PLANS))
def test_vllm_golden(name: str) -> None:
    text = shell_join(vllm_args(**VLLM_PLANS[name])) + "\n"
    assert shlex.split(text.replace("\\\n", " ")) == vllm_args(**VLLM_PLANS[name])
    check_golden(f"{name}.vllm.sh", text)


@pytest.mark.parametrize(("kw", "field"), [
    ({"dtype": "int4"}, "dtype"), ({"kv_cache_dtype": "int8"}, "kv_cache_dtype"),
    ({"quantization": "magic"}, "quantization"), ({"block_size": 12}, "block_size"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"), ({"tp": 0}, "tp"),
])
def test_vllm_rejects_values_vllm_would(kw: dict, field: str) -> None:
    base = dict(model="m", tp=1, pp=1, max_num_seqs=8, max_model_len=1024, gpu_memory_utilization=0.9)
    with pytest.raises(ShardplanError) as e:
        vllm_args(**(base | kw))
    assert e.value.field == field


@pytest.mark.parametrize("name", sorted(FLEXGEN_PLANS))
def test_flexgen_flags_exist_and_percentages_add_up(name: str) -> None:
    argv = flexgen_args(**FLEXGEN_PLANS[name])
    assert argv[:3] == FLEXGEN["command"]
    opts = dict(options(argv, 3))
    for flag, values in opts.items():
        assert flag in FLEXGEN["flags"], flag
        kind = FLEXGEN["flags"][flag]
        assert len(values) == {"switch": 0, "value": 1, "six": 6}[kind], flag
    pct = [int(v) for v in opts["--percent"]]
    assert all(0 <= x <= 100 for x in pct)
    assert all(pct[i] + pct[i + 1] <= 100 for i in (0, 2, 4))
    assert opts["--model"][0].split("/")[1] in FLEXGEN["models"]


@pytest.mark.parametrize("name", sorted(FLEXGEN_PLANS))
def test_flexgen_golden(name: str) -> None:
    check_golden(f"{name}.flexgen.sh", shell_join(flexgen_args(**FLEXGEN_PLANS[name])) + "\n")


def test_flexgen_rounds_to_whole_percent_and_keeps_disk_as_the_rest() -> None:
    argv = flexgen_args(**(FLEXGEN_PLANS["opt-30b"] | {"weights": (0.333, 0.667, 0.0), "kv_cache": (0.3, 0.35, 0.35)}))
    pct = argv[argv.index("--percent") + 1:argv.index("--percent") + 7]
    assert pct[:4] == ["33", "67", "30", "35"]


def test_flexgen_refuses_models_it_cannot_run() -> None:
    with pytest.raises(ShardplanError, match="OPT models only") as e:
        flexgen_args(**(FLEXGEN_PLANS["opt-30b"] | {"model": "llama-3.1-8b"}))
    assert e.value.field == "model"


def test_docstring_examples_run() -> None:
    import doctest

    from shardplan.cli.export import flexgen, vllm

    for module in (vllm, flexgen):
        assert doctest.testmod(module).failed == 0
