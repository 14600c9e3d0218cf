"""The ``serving`` validate group: the planner's saturation throughput against an engine vendor's published table.

Records (``shardplan/data/serving_runs.json``) are NVIDIA's TensorRT-LLM performance overview (PyTorch backend,
``trtllm-bench throughput`` at an infinite request rate, commit 00f37686 of the docs): output tokens/s for Llama 3.1
8B, Llama 3.3 70B (the Llama 3.1 70B architecture) and Llama 3.1 405B, ModelOpt FP8 checkpoints on H100/H200 at the
published TP, ten input/output lengths each.

The prediction runs ``plan_inference`` as a user would: continuous mode at saturation, ``--engine trtllm`` (32-token
blocks, KV pool 0.9 of free memory, GUARANTEED_NO_EVICT reservation of ISL + OSL per request) with the
``max_batch_size`` and ``max_num_tokens`` trtllm-bench picks for the dataset when given neither (``bench_settings``;
chunked prefill off, so a whole prompt fits a step), the published TP pinned and PP 1, the batch chosen by the
planner. FP8 weights with FP8 GEMMs and an FP8 KV cache: the ModelOpt FP8
checkpoints quantise the KV cache too, and the 8B's measured 22.7k tokens/s at 128/2048 on one H100 exceeds what a
16-bit cache could stream (every decode step reads each sequence's cache: 3.35 TB/s / (1,152 positions · 128 KiB)
≈ 22k sequences·steps/s before any weights).

The ``serving-ttft`` and ``serving-tpot`` groups: per-request latency (``shardplan/data/serving_latency_runs.json``)
from GenAI-Perf runs against NVIDIA NIM (TensorRT-LLM backend) of Llama 3 8B and 70B Instruct (the Llama 3.1
architectures) on A100-SXM4-80GB and H100-SXM at TP 1, 2, 4 and 8, 16-bit and FP8, six input/output lengths, at
concurrency 1: one request in flight, so TTFT is one prompt's prefill and TPOT (GenAI-Perf's inter-token
latency, ``(latency − TTFT)/(output − 1)``) a batch-1 decode step. The prediction evaluates exactly that layout
(``estimate_inference``, static mode, batch 1, ``--engine trtllm`` with trtllm-build's default token budget
``max_num_tokens`` 8192 and ``max_batch_size`` 256; the KV cache in 16 bits, trtllm-build's default — the dataset
does not say). Concurrency above 1 is left out: GenAI-Perf's closed loop with fixed lengths sends requests in
synchronised waves, which is neither an engine's steady state nor one static batch.
"""

from __future__ import annotations

from functools import cache

from shardplan.models.spec import ModelSpec
from shardplan.validation.runs import Case, load_records


def bench_settings(model: ModelSpec, gpu_memory_bytes: float, tp: int, pp: int, isl: int, osl: int
                   ) -> tuple[int, int]:
    """trtllm-bench's ``(max_batch_size, max_num_tokens)`` for this run (``engines.trtllm_bench_settings``): FP8
    weights and KV cache (1 byte each), KV heads at least one per TP rank."""
    from shardplan.costmodel.serving.engines import trtllm_bench_settings

    kv = 2 * model.num_attention_layers * max(tp, model.kv_heads) * model.head_size
    return trtllm_bench_settings(gpu_memory_bytes=gpu_memory_bytes, gpus=tp * pp, pp=pp,
                                 weight_bytes=float(model.total_params), kv_bytes_per_token=kv, input_len=isl,
                                 output_len=osl)


def serving_cases() -> list[Case]:
    from shardplan.costmodel.serving.cost import InferWorkload
    from shardplan.costmodel.serving.engines import engine_defaults
    from shardplan.hardware import get_system
    from shardplan.models import get_model
    from shardplan.planner.serving.request import InferRequest
    from shardplan.planner.serving.solve import plan_inference

    out = []
    for r in load_records("serving_runs"):

        def predict(r: dict = r) -> float:
            system, tp = get_system(r["hardware"]["system"]), int(r["parallel"]["tp"])
            d = engine_defaults(r["engine"], system.gpu)
            w, model, pp = r["workload"], get_model(r["model"]["name"]), int(r["parallel"]["pp"])
            seqs, tokens = bench_settings(model, system.gpu.memory_bytes, tp, pp, w["input_len"], w["output_len"])
            work = InferWorkload(prompt_len=w["input_len"], gen_len=w["output_len"], dtype=w["dtype"], kv_dtype="fp8",
                                 engine=r["engine"], max_num_batched_tokens=tokens, max_num_seqs=seqs,
                                 block_size=d.block_size)
            plan = plan_inference(InferRequest(model=model, system=system, num_gpus=tp, workload=work, tp=tp, pp=pp))
            if plan.metrics is None:
                raise ValueError(plan.reason or "no plan")
            return plan.metrics.tokens_per_s

        out.append(Case("serving", r["id"].removeprefix("trtllm-"), "tokens_per_s",
                        float(r["metrics"]["output_tokens_per_s"]), predict))
    return out


# trtllm-build defaults (tensorrt_llm/commands/build.py): max_num_tokens 8192, max_batch_size 256.
TRTLLM_BUILD_MAX_NUM_TOKENS = 8192
TRTLLM_BUILD_MAX_BATCH_SIZE = 256


@cache
def _latency(record_id: str) -> tuple[float, float]:
    """(TTFT, TPOT) in seconds of one latency record's layout, evaluated by the cost model."""
    from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
    from shardplan.costmodel.serving.engines import engine_defaults
    from shardplan.costmodel.serving.report import estimate_inference
    from shardplan.hardware import get_system
    from shardplan.models import get_model

    r = next(x for x in load_records("serving_latency_runs") if x["id"] == record_id)
    system, tp, w = get_system(r["hardware"]["system"]), int(r["parallel"]["tp"]), r["workload"]
    work = InferWorkload(prompt_len=w["input_len"], gen_len=w["output_len"], dtype=w["dtype"], engine=r["engine"],
                         mode="static", max_num_batched_tokens=TRTLLM_BUILD_MAX_NUM_TOKENS,
                         max_num_seqs=TRTLLM_BUILD_MAX_BATCH_SIZE,
                         block_size=engine_defaults(r["engine"], system.gpu).block_size)
    layout = InferLayout(tp=tp, pp=int(r["parallel"]["pp"]), replicas=1, batch=int(w["concurrency"]))
    rep = estimate_inference(get_model(r["model"]["name"]), system, tp * layout.pp, work, layout)
    if rep.status == "infeasible":
        raise ValueError(rep.reason or "the published layout does not fit")
    return rep.metrics.ttft_s, rep.metrics.tpot_s


def latency_cases(quantity: str) -> list[Case]:
    """One case per latency record: ``ttft_s`` (group serving-ttft) or ``tpot_s`` (serving-tpot)."""
    group, key, col = {"ttft_s": ("serving-ttft", "ttft_ms", 0), "tpot_s": ("serving-tpot", "itl_ms", 1)}[quantity]
    return [Case(group, r["id"].removeprefix("nim-"), quantity, float(r["metrics"][key]) / 1e3,
                 lambda rid=r["id"]: _latency(rid)[col]) for r in load_records("serving_latency_runs")]
