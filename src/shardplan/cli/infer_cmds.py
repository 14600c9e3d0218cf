"""`shardplan infer` and `shardplan estimate infer`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from shardplan.cli._app import app, estimate_app
from shardplan.cli.common import resolve_inputs
from shardplan.cli.launch import (
    OutputOpt,
    ParetoPlotOpt,
    ServeExportOpt,
    check_outputs,
    deliver,
    pareto_plot,
    vllm_argv,
)
from shardplan.cli.options import GpusOpt, HardwareOpt, JsonOpt, ModelOpt, TimeLimitOpt
from shardplan.planner.serving.knobs import InferObjective

PromptLen = Annotated[int, typer.Option("--prompt-len", "-p", min=1, help="Prompt tokens per sequence.")]
GenLen = Annotated[int, typer.Option("--gen-len", "-n", min=1, help="Generated tokens per sequence.")]
Batch = Annotated[int | None, typer.Option("--batch", "-b", min=1, help="Concurrent sequences per replica.")]
MaxBatch = Annotated[bool, typer.Option("--max-batch", help="Run the largest batch whose KV cache fits.")]
MaxTtft = Annotated[float | None, typer.Option("--max-ttft-ms", min=0.001,
                                               help="Limit on time to first token (prefill of the batch), ms.")]
MaxTpot = Annotated[float | None, typer.Option("--max-tpot-ms", min=0.001,
                                               help="Limit on time per output token (one decode step), ms.")]
Tp = Annotated[int | None, typer.Option("--tp", min=1, help="Tensor-parallel degree.")]
Pp = Annotated[int | None, typer.Option("--pp", min=1, help="Pipeline-parallel stages.")]
Ep = Annotated[int | None, typer.Option("--ep", min=1, help="Expert-parallel degree (MoE; spans replicas).")]
Dtype = Annotated[str, typer.Option("--dtype", help="Compute datatype: bf16, fp16, or fp8 (fp8 weights, fp8 GEMMs).")]
WDtype = Annotated[str | None, typer.Option(
    "--weight-dtype", help="Stored weights: bf16, fp16, fp8, int8, int4 (int8/int4 weight-only; default: --dtype, "
    "fp8 for fp8 checkpoints).")]
KvDtype = Annotated[str | None, typer.Option("--kv-dtype", help="KV-cache datatype: bf16, fp16, fp8.")]
BlockSize = Annotated[int, typer.Option("--block-size", min=1, help="Tokens per paged KV-cache block.")]
Util = Annotated[float, typer.Option("--gpu-memory-utilization", min=0.01, max=1.0,
                                     help="Share of GPU memory the engine may use (vLLM default).")]
MaxTokens = Annotated[int, typer.Option(
    "--max-num-batched-tokens", min=1, help="Tokens per step: prefill chunk size and the profile run's size "
    "(vLLM V1 server default with chunked prefill).")]
MaxSeqs = Annotated[int, typer.Option("--max-num-seqs", min=1, help="Sequences in vLLM's profile run (sampler "
                                                                   "workspace).")]
NonTorch = Annotated[str | None, typer.Option(
    "--non-torch-memory", help="Non-PyTorch memory the engine measures per GPU, e.g. 0.5GiB (default 0.15 GiB); "
    "add CUDA-graph memory here for vLLM ≥ 0.21.")]


def _workload(prompt_len: int, gen_len: int, dtype: str, weight_dtype: str | None, kv_dtype: str | None,
              block_size: int, util: float, max_tokens: int, max_seqs: int, non_torch: str | None) -> Any:
    from pydantic import ValidationError

    from shardplan.costmodel.serving.cost import InferWorkload
    from shardplan.errors import ShardplanError
    from shardplan.units import parse_size

    extra = {"non_torch_bytes": parse_size(non_torch, field="non-torch-memory")} if non_torch is not None else {}
    try:
        return InferWorkload(prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, weight_dtype=weight_dtype,
                             kv_dtype=kv_dtype, block_size=block_size, gpu_memory_utilization=util,
                             max_num_batched_tokens=max_tokens, max_num_seqs=max_seqs, **extra)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]).replace("_", "-") if err["loc"] else "workload"
        raise ShardplanError(err["msg"].removeprefix("Value error, "), field=field) from None


def _ms(x: float | None) -> float | None:
    return None if x is None else x / 1e3


@estimate_app.command("infer")
def estimate_infer(
    model: ModelOpt, hardware: HardwareOpt, prompt_len: PromptLen, gen_len: GenLen, batch: Batch = None,
    tp: Tp = 1, pp: Pp = 1, ep: Ep = 1, gpus: GpusOpt = None, max_batch: MaxBatch = False,
    max_ttft_ms: MaxTtft = None, max_tpot_ms: MaxTpot = None, dtype: Dtype = "bf16", weight_dtype: WDtype = None,
    kv_dtype: KvDtype = None, block_size: BlockSize = 16, gpu_memory_utilization: Util = 0.9,
    max_num_batched_tokens: MaxTokens = 2048, max_num_seqs: MaxSeqs = 256, non_torch_memory: NonTorch = None,
    as_json: JsonOpt = False, export: ServeExportOpt = None, output: OutputOpt = None,
) -> None:
    """Per-layer prefill and decode costs, TTFT/TPOT/throughput and memory of one pinned serving layout."""
    from shardplan.cli.render_infer import render_estimate
    from shardplan.costmodel.serving.cost import InferLayout
    from shardplan.costmodel.serving.report import estimate_inference
    from shardplan.errors import ShardplanError

    spec, system, n = resolve_inputs(model, hardware, gpus)
    tp, pp = tp or 1, pp or 1
    if batch is None and not max_batch:
        raise ShardplanError("give --batch B (sequences per replica) or --max-batch", field="batch")
    if batch is not None and max_batch:
        raise ShardplanError("give --batch B or --max-batch, not both", field="batch")
    if n % (tp * pp):
        raise ShardplanError(f"tp·pp ({tp}·{pp}) must divide --gpus ({n}): GPUs = replicas·tp·pp", field="tp")
    work = _workload(prompt_len, gen_len, dtype, weight_dtype, kv_dtype, block_size, gpu_memory_utilization,
                     max_num_batched_tokens, max_num_seqs, non_torch_memory)
    layout = InferLayout(tp=tp, pp=pp, ep=ep or 1, replicas=n // (tp * pp), batch=batch or 1)
    check_outputs(export, output, as_json)
    report = estimate_inference(spec, system, n, work, layout, max_batch=max_batch, max_ttft_s=_ms(max_ttft_ms),
                                max_tpot_s=_ms(max_tpot_ms))
    argv, notes = vllm_argv(report, spec=spec, work=work) if export else (None, [])
    deliver(report, lambda con: render_estimate(con, report), as_json=as_json, argv=argv, output=output,
            notes=notes)


@app.command("infer")
def infer(
    model: ModelOpt, hardware: HardwareOpt, prompt_len: PromptLen, gen_len: GenLen, gpus: GpusOpt = None,
    batch: Batch = None, max_batch: MaxBatch = False, max_ttft_ms: MaxTtft = None, max_tpot_ms: MaxTpot = None,
    objective: Annotated[InferObjective, typer.Option(
        "--objective", help="throughput: most output tokens/s over all GPUs; latency: fastest single request.")
    ] = InferObjective.THROUGHPUT,
    tp: Tp = None, pp: Pp = None, ep: Ep = None,
    pareto: Annotated[bool, typer.Option("--pareto", help="List the throughput vs TPOT frontier.")] = False,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50, help="Best K distinct plans.")] = 1,
    time_limit: TimeLimitOpt = 10.0,
    cross_node_tp: Annotated[bool, typer.Option("--allow-cross-node-tp", help="Let TP span nodes.")] = False,
    dtype: Dtype = "bf16", weight_dtype: WDtype = None, kv_dtype: KvDtype = None, block_size: BlockSize = 16,
    gpu_memory_utilization: Util = 0.9, max_num_batched_tokens: MaxTokens = 2048, max_num_seqs: MaxSeqs = 256,
    non_torch_memory: NonTorch = None, as_json: JsonOpt = False, export: ServeExportOpt = None,
    output: OutputOpt = None, plot: ParetoPlotOpt = None,
) -> None:
    """Choose how to serve a model (TP, PP, EP, replicas, batch) with CP-SAT over the cost model."""
    from shardplan.cli.render_infer import render_plan
    from shardplan.planner.serving.solve import InferRequest, plan_inference

    spec, system, n = resolve_inputs(model, hardware, gpus)
    work = _workload(prompt_len, gen_len, dtype, weight_dtype, kv_dtype, block_size, gpu_memory_utilization,
                     max_num_batched_tokens, max_num_seqs, non_torch_memory)
    req = InferRequest(model=spec, system=system, num_gpus=n, workload=work, batch=batch, max_batch=max_batch,
                       max_ttft_s=_ms(max_ttft_ms), max_tpot_s=_ms(max_tpot_ms), objective=objective, tp=tp, pp=pp,
                       ep=ep, cross_node_tp=cross_node_tp, pareto=pareto, top_k=top_k, time_limit_s=time_limit)
    check_outputs(export, output, as_json, plot=plot, pareto=pareto)
    plan = plan_inference(req)
    argv, notes = None, []
    if export and plan.plan is None:
        notes.append("nothing exported: no serving layout fits")
    elif export:
        argv, notes = vllm_argv(plan, spec=spec, work=work)
    written = pareto_plot(plan, plot, max_tpot_ms=max_tpot_ms) if plot is not None and plan.pareto else None
    if plot is not None and written is None:
        notes.append("nothing plotted: no point on the frontier")
    deliver(plan, lambda con: render_plan(con, plan), as_json=as_json, argv=argv, output=output, notes=notes,
            plot_written=written)
