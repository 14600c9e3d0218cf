"""``vllm serve`` arguments for a serving plan.

Option names and choices are those of ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``); the list,
with its commit, is ``tests/data/export/vllm_flags.json``. One ``vllm serve`` process serves one replica
(TP × PP GPUs); ``replicas`` of them go behind a load balancer, or one process with ``--data-parallel-size``.
"""

from __future__ import annotations

from shardplan.errors import ShardplanError

DTYPES = {"auto": "auto", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
          "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}
"""shardplan and vLLM datatype names to vLLM's ``--dtype`` choices (vllm/config/model.py ModelDType)."""

KV_CACHE_DTYPES = {"auto": "auto", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
                   "fp8_e5m2": "fp8_e5m2"}
"""KV-cache datatypes to ``--kv-cache-dtype`` choices (vllm/config/cache.py CacheDType); 16-bit = auto."""

QUANTIZATION = ("fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "compressed-tensors",
                "experts_int8", "fbgemm_fp8", "modelopt", "gguf", "torchao")
"""``--quantization`` methods shardplan passes on (a subset of vLLM's QuantizationMethods)."""

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)

KV_TRANSFER_NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
"""``--kv-transfer-config`` of every prefill and decode instance with vLLM's NixlConnector
(docs.vllm.ai/en/stable/features/nixl_connector_usage.html; the option is ``EngineArgs.kv_transfer_config``)."""


def vllm_args(*, model: str, tp: int, pp: int, max_num_seqs: int, max_model_len: int,
              gpu_memory_utilization: float, kv_cache_dtype: str = "auto", dtype: str = "auto",
              quantization: str | None = None, enable_expert_parallel: bool = False, block_size: int = 16,
              data_parallel_size: int = 1, max_num_batched_tokens: int | None = None,
              distributed_executor_backend: str | None = None, kv_transfer_config: str | None = None) -> list[str]:
    """``vllm serve`` argv for one serving layout (``replicas`` > 1: pass ``data_parallel_size``).

    ``model`` is a Hugging Face id or a local path; ``max_model_len`` is prompt + generated tokens;
    ``max_num_seqs`` is the planned batch (concurrent sequences per replica); ``max_num_batched_tokens`` the
    step's token budget the plan was priced with; ``distributed_executor_backend="ray"`` for TP·PP over nodes;
    ``kv_transfer_config`` the JSON of a disaggregated prefill/decode instance (``KV_TRANSFER_NIXL``).

    >>> vllm_args(model="meta-llama/Llama-3.1-70B-Instruct", tp=4, pp=1, max_num_seqs=128, max_model_len=4096,
    ...           gpu_memory_utilization=0.9)[:5]
    ['vllm', 'serve', 'meta-llama/Llama-3.1-70B-Instruct', '--tensor-parallel-size', '4']
    """
    if dtype not in DTYPES:
        raise ShardplanError(f"'{dtype}' is not a vLLM --dtype (use bf16, fp16, fp32 or auto)", field="dtype")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ShardplanError(f"'{kv_cache_dtype}' is not a vLLM --kv-cache-dtype (use auto, bf16, fp8, fp8_e4m3, "
                             "fp8_e5m2)", field="kv_cache_dtype")
    if quantization is not None and quantization not in QUANTIZATION:
        raise ShardplanError(f"'{quantization}' is not a vLLM --quantization method shardplan knows "
                             f"({', '.join(QUANTIZATION)})", field="quantization")
    if block_size not in BLOCK_SIZES:
        raise ShardplanError(f"vLLM --block-size must be one of {BLOCK_SIZES} (got {block_size})", field="block_size")
    if not 0 < gpu_memory_utilization <= 1:
        raise ShardplanError(f"must be in (0, 1] (got {gpu_memory_utilization})", field="gpu_memory_utilization")
    for name, v in (("tp", tp), ("pp", pp), ("max_num_seqs", max_num_seqs), ("max_model_len", max_model_len),
                    ("data_parallel_size", data_parallel_size)):
        if v < 1:
            raise ShardplanError(f"must be ≥ 1 (got {v})", field=name)
    if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
        raise ShardplanError(f"must be ≥ 1 (got {max_num_batched_tokens})", field="max_num_batched_tokens")
    if distributed_executor_backend not in (None, "ray", "mp"):
        raise ShardplanError("must be ray or mp", field="distributed_executor_backend")
    argv = ["vllm", "serve", model, "--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)]
    if data_parallel_size > 1:
        argv += ["--data-parallel-size", str(data_parallel_size)]
    if enable_expert_parallel:
        argv.append("--enable-expert-parallel")
    if distributed_executor_backend is not None:
        argv += ["--distributed-executor-backend", distributed_executor_backend]
    argv += ["--max-num-seqs", str(max_num_seqs)]
    if max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    argv += ["--max-model-len", str(max_model_len),
             "--gpu-memory-utilization", f"{gpu_memory_utilization:.4g}",
             "--kv-cache-dtype", KV_CACHE_DTYPES[kv_cache_dtype], "--block-size", str(block_size),
             "--dtype", DTYPES[dtype]]
    if quantization is not None:
        argv += ["--quantization", quantization]
    if kv_transfer_config is not None:
        argv += ["--kv-transfer-config", kv_transfer_config]
    return argv
