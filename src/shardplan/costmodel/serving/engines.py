"""Serving engines' defaults and KV-cache memory rules, each from the engine's source at a named version.

- **vLLM** (V1 engine; ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` at commit 99d7eb5d,
  the commit of ``tests/data/export/vllm_flags.json``; ``vllm/v1/worker/gpu_worker.py``
  ``determine_available_memory``): the
  OpenAI server's token budget per step (``max_num_batched_tokens``) is 8192 and ``max_num_seqs`` 1024 on GPUs
  with ≥ 70 GiB that are not A100, else 2048 and 256. KV pool = ``gpu_memory_utilization`` (0.9) · memory −
  weights − the peak activations of a profile forward pass of ``max_num_batched_tokens`` tokens (plus the
  sampler of ``max_num_seqs`` rows) − non-torch allocations; CUDA graphs live in the ``1 − utilisation``
  reserve. Blocks of 16 tokens.
- **SGLang** (v0.4.x releases of mid-2025, ``python/sglang/srt/server_args.py`` ``ServerArgs.__post_init__``):
  ``chunked_prefill_size`` 2048 below 35 GiB, 8192 below 160 GiB, else 16384;
  ``mem_fraction_static = (mem − reserved)/mem`` with ``reserved = 9.5 + tp·pp/2`` GiB below 90 GiB,
  ``12 + tp·pp/2`` GiB below 160 GiB, 32 GiB above (activations and CUDA graphs live in the reserve); the KV
  pool is ``mem_fraction_static · mem − weights`` (``model_runner.profile_max_num_token``); pages of 1 token;
  ``max_running_requests`` from the pool.
- **TensorRT-LLM** (0.x releases of 2025, ``tensorrt_llm/builder.py`` ``BuildConfig``: ``max_batch_size`` 2048,
  ``max_num_tokens`` 8192; ``llmapi`` ``KvCacheConfig.free_gpu_memory_fraction`` 0.9, ``tokens_per_block``
  32): the KV pool is 0.9 of the memory *free* after the weights and the runtime's activation buffers for
  ``max_num_tokens`` tokens are allocated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from shardplan.hardware.spec import GpuSpec
from shardplan.units import GiB

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "trtllm")


# Host time per scheduler step that the GPU sits idle for, in continuous batching. TensorRT-LLM's PyTorch executor
# (``PyExecutor._executor_loop_overlap``: scheduling, input preparation and sampler post-processing on one Python
# thread, one step ahead) leaves ~580 µs per iteration of GPU idle on steady decode (TensorRT-LLM issue #13957,
# nsys of Llama-3.1-8B-FP8). vLLM V1 and SGLang overlap the next step's scheduling with the GPU (async scheduling,
# overlap scheduler) and publish no idle gap: 0.
STEP_HOST_GAP_S: dict[str, float] = {"vllm": 0.0, "sglang": 0.0, "trtllm": 580e-6}


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """What an engine picks when the user does not say."""

    max_num_batched_tokens: int
    max_num_seqs: int
    memory_fraction: float | None  # vLLM gpu_memory_utilization / TRT-LLM free fraction; None: per layout (SGLang)
    block_size: int


def engine_defaults(engine: Engine, gpu: GpuSpec) -> EngineDefaults:
    """The engine's defaults on this GPU (server entry points: ``vllm serve``, ``sglang.launch_server``,
    ``trtllm-serve``)."""
    mem = gpu.memory_bytes
    if engine == "vllm":
        large = mem >= 70 * GiB and "a100" not in gpu.name.lower()
        return EngineDefaults(8192 if large else 2048, 1024 if large else 256, 0.9, 16)
    if engine == "sglang":
        tokens = 2048 if mem < 35 * GiB else 8192 if mem < 160 * GiB else 16384
        return EngineDefaults(tokens, 1024, None, 1)  # max_running_requests follows the pool; 1024 caps the table
    return EngineDefaults(8192, 2048, 0.9, 32)


def with_engine_defaults(values: dict[str, Any], gpu: GpuSpec) -> dict[str, Any]:
    """Workload fields with the engine's defaults filled in where the user left them out (block size, token budget
    per step, sequences in flight): the one place the CLI, the notebook API and the sweep take them from."""
    engine = values.get("engine") or "vllm"
    if engine not in ENGINES:
        return values  # the workload's own validation names the field
    d = engine_defaults(engine, gpu)
    out = dict(values)
    for key, default in (("block_size", d.block_size), ("max_num_batched_tokens", d.max_num_batched_tokens),
                         ("max_num_seqs", d.max_num_seqs)):
        if out.get(key) is None:
            out[key] = default
    return out


def sglang_mem_fraction_static(gpu: GpuSpec, parallel: np.ndarray) -> np.ndarray:
    """SGLang's default ``mem_fraction_static`` for ``parallel = tp·pp`` GPUs per engine (see module doc)."""
    mem_gib = gpu.memory_bytes / GiB
    n = np.asarray(parallel, dtype=float)
    if mem_gib < 35:
        reserved = 2.8 + n / 10
    elif mem_gib < 90:
        reserved = 9.5 + n / 2
    elif mem_gib < 160:
        reserved = 12 + n / 2
    else:
        reserved = np.full_like(n, 32.0)
    return np.round((mem_gib - reserved) / mem_gib, 3)


def kv_pool_bytes(engine: Engine, gpu: GpuSpec, *, fraction: float | None, weights: np.ndarray,
                  activations: np.ndarray, non_torch: np.ndarray, parallel: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes each engine hands to the KV cache on one GPU, and what it holds back (the reserve).

    ``fraction`` overrides the engine's default share (vLLM ``--gpu-memory-utilization``, SGLang
    ``--mem-fraction-static``, TRT-LLM ``free_gpu_memory_fraction``)."""
    cap = float(gpu.memory_bytes)
    if engine == "vllm":
        f = 0.9 if fraction is None else fraction
        pool = f * cap - weights - activations - non_torch
        return pool, np.full_like(pool, (1 - f) * cap)
    if engine == "sglang":
        f = sglang_mem_fraction_static(gpu, parallel) if fraction is None else np.full(np.shape(parallel), fraction)
        pool = f * cap - weights
        return pool, (1 - f) * cap - activations - non_torch
    f = 0.9 if fraction is None else fraction
    free = cap - weights - activations - non_torch
    return f * free, (1 - f) * np.maximum(free, 0.0)


# trtllm-bench (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting`` / ``finetune_setting``
# and ``bench/benchmark/utils/general.py`` ``get_settings``, 2025): the throughput benchmark's own
# ``max_batch_size`` and ``max_num_tokens`` when the user gives neither.
BENCH_MAX_REQUESTS = 4096  # "Cap total batch size to avoid decoder buffer size becoming too large"
BENCH_MAX_TOKENS = 32768  # "Cap num tokens to avoid TRT activation buffer becoming too large"
BENCH_MIN_TOKENS = 2048  # "Set min to 2048 to ensure Ctx/Gen overlap efficiency"


def trtllm_bench_settings(*, gpu_memory_bytes: float, gpus: int, pp: int, weight_bytes: float,
                          kv_bytes_per_token: float, input_len: int, output_len: int, fraction: float = 0.9,
                          chunked_prefill: bool = False) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` as trtllm-bench picks them for a dataset of ``input_len``/``output_len``.

    Requests that fit: ``fraction · (gpus · memory − weights) / (kv_bytes_per_token · (ISL + OSL))`` (the KV bytes
    per token of the whole model, every GPU's memory from NVML in GiB); the batch is that, capped at 4096 and
    split over pp, rounded up (to 32 below 256 with a floor of 64, to 128 below 1024, else to 256); the token
    budget is the batch times ``1 + ISL/OSL`` capped at 32768, rounded up (to 256 below 4096 with a floor of 2048,
    to 512 below 8192, else to 1024). Without chunked prefill (trtllm-bench's default) the budget is raised to
    ``ISL + max_batch_size`` so a whole prompt fits one step. ``fraction`` is ``--kv_cache_free_gpu_mem_fraction``
    (0.90 by default)."""
    requests = fraction * (gpus * gpu_memory_bytes - weight_bytes) / (kv_bytes_per_token * (input_len + output_len))
    raw_bs = min(requests, BENCH_MAX_REQUESTS) / pp
    raw_tokens = min(raw_bs * (1 + input_len / output_len), BENCH_MAX_TOKENS)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(BENCH_MIN_TOKENS, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    if not chunked_prefill:
        tokens = max(tokens, input_len + bs)
    return bs, tokens
