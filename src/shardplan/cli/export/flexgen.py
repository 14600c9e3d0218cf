"""FlexGen ``python3 -m flexgen.flex_opt`` arguments for an offload plan.

Option names are those of ``add_parser_arguments`` in ``flexgen/flex_opt.py`` (FMInference/FlexGen main; the
list, with its commit, is ``tests/data/export/flexgen_flags.json``). ``--percent`` takes six integers: weights,
KV cache and activations on the GPU and on the CPU; the remainder of each lives in ``--offload-dir`` (disk).
FlexGen runs OPT models (and Galactica-30B) only, and keeps the activations (hidden states) wholly on one tier
(``OptLM.init_cache``/``init_all_weights`` raise ``NotImplementedError`` for a split ``act_*_percent``): an export
refuses a split, and ``shardplan offload --export flexgen`` plans with that constraint.

The module differs between distributions: the PyPI package ``flexgen`` (FlexGen ≤ 0.1.7) is run as
``python3 -m flexgen.flex_opt``; the renamed repository FMInference/FlexLLMGen as ``python3 -m flexllmgen.flex_opt``
(the same flags). ``module`` picks it.
"""

from __future__ import annotations

from shardplan.errors import ShardplanError

MODELS = ("opt-125m", "opt-350m", "opt-1.3b", "opt-2.7b", "opt-6.7b", "opt-13b", "opt-30b", "galactica-30b",
          "opt-66b", "opt-175b")
"""Architectures ``flexgen/opt_config.py get_opt_config`` knows (with -iml / -iml-max variants)."""

Split = tuple[float, float, float]

MODULES = {"flexgen": "flexgen.flex_opt", "flexllmgen": "flexllmgen.flex_opt"}
"""``python3 -m`` module of each distribution: PyPI ``flexgen``, and FlexLLMGen (FMInference/FlexLLMGen main)."""


def whole_tier(split: Split) -> bool:
    """True when the split puts everything on one tier (what FlexGen's activations need)."""
    return max(split) >= 1 - 1e-9


def _hf_name(model: str) -> str:
    """``facebook/opt-30b`` for ``opt-30b`` (or any name get_opt_config accepts); refuses other models."""
    arch = model.split("/")[-1].lower().replace("-iml-max", "").replace("-iml", "")
    if arch not in MODELS:
        raise ShardplanError(f"FlexGen runs OPT models only ({', '.join(MODELS)}), not '{model}'", field="model")
    return model if "/" in model else f"facebook/{model}"


def percents(split: Split, *, field: str) -> tuple[int, int]:
    """GPU and CPU shares of a (gpu, cpu, disk) fraction triple as FlexGen's integer percentages.

    Rounded to the nearest percent; the disk share is what is left, so GPU + CPU never exceeds 100.
    """
    g, c, d = split
    if min(split) < 0 or abs(g + c + d - 1) > 1e-6:
        raise ShardplanError(f"{split} must be three fractions (GPU, CPU, disk) summing to 1", field=field)
    gpu = round(100 * g)
    cpu = min(round(100 * c), 100 - gpu)
    if d == 0:
        cpu = 100 - gpu
    return gpu, cpu


def flexgen_args(*, model: str, gpu_batch_size: int, num_gpu_batches: int, weights: Split, kv_cache: Split,
                 activations: Split, cpu_attention: bool, compress_weight: bool, compress_cache: bool,
                 prompt_len: int, gen_len: int, offload_dir: str = "~/flexgen_offload_dir",
                 path: str = "~/opt_weights", module: str = "flexgen",
                 weight_percent: tuple[int, int] | None = None) -> list[str]:
    """``flex_opt`` argv for one offload policy (fractions on GPU, CPU, disk for each tensor class).
    ``weight_percent``: the weights' ``--percent`` pair to give FlexGen in place of the shares rounded (FlexGen places
    whole tensors: ``cli.launch.flexgen_export`` picks it from ``costmodel.offload.flexgen_layout.flexgen_candidates``).

    >>> flexgen_args(model="opt-30b", gpu_batch_size=48, num_gpu_batches=3, weights=(0.2, 0.8, 0.0),
    ...              kv_cache=(0.0, 1.0, 0.0), activations=(1.0, 0.0, 0.0), cpu_attention=True,
    ...              compress_weight=False, compress_cache=False, prompt_len=512, gen_len=32)[13:20]
    ['--percent', '20', '80', '0', '100', '100', '0']
    """
    for name, v in (("gpu_batch_size", gpu_batch_size), ("num_gpu_batches", num_gpu_batches),
                    ("prompt_len", prompt_len), ("gen_len", gen_len)):
        if v < 1:
            raise ShardplanError(f"must be ≥ 1 (got {v})", field=name)
    if module not in MODULES:
        raise ShardplanError(f"'{module}' is not one of {', '.join(MODULES)}", field="flexgen-module")
    if not whole_tier(activations):
        raise ShardplanError(f"FlexGen keeps the activations wholly on one tier; this policy splits them "
                             f"{round(100 * activations[0])}/{round(100 * activations[1])}/"
                             f"{round(100 * activations[2])} (GPU/CPU/disk): use --activations 100,0,0 (or 0,100,0)",
                             field="activations")
    pct = [*(weight_percent or percents(weights, field="weights")), *percents(kv_cache, field="kv_cache"),
           *percents(activations, field="activations")]
    argv = ["python3", "-m", MODULES[module], "--model", _hf_name(model), "--path", path,
            "--offload-dir", offload_dir, "--prompt-len", str(prompt_len), "--gen-len", str(gen_len),
            "--percent", *map(str, pct), "--gpu-batch-size", str(gpu_batch_size),
            "--num-gpu-batches", str(num_gpu_batches)]
    if cpu_attention:
        argv.append("--cpu-cache-compute")
    if compress_weight:
        argv.append("--compress-weight")
    if compress_cache:
        argv.append("--compress-cache")
    return argv
