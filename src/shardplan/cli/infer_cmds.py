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
from shardplan.cli.options import (
    MAX_GPUS,
    MAX_RATE,
    MAX_SEQS,
    MAX_SLO_MS,
    MAX_SMALL,
    MAX_TOKENS,
    GenLen,
    GpusOpt,
    HardwareOpt,
    JsonOpt,
    ModelOpt,
    PromptLen,
    TimeLimitOpt,
    finite,
)
from shardplan.planner.serving.knobs import InferObjective

Batch = Annotated[int | None, typer.Option(
    "--batch", "-b", min=1, max=MAX_SEQS, help="Concurrent sequences per replica.")]
MaxBatch = Annotated[bool, typer.Option("--max-batch", help="Run the largest batch whose KV cache fits.")]
MaxTtft = Annotated[float | None, typer.Option(
    "--max-ttft-ms", min=0.001, max=MAX_SLO_MS, callback=finite, help="Limit on a request's mean time to first "
    "token (Poisson arrivals at --request-rate; at saturation from admission), ms. --mode static: prefill of the "
    "whole batch.")]
MaxTpot = Annotated[float | None, typer.Option(
    "--max-tpot-ms", min=0.001, max=MAX_SLO_MS, callback=finite, help="Limit on the mean time per output token "
    "(a decode step shared with prefill chunks), ms.")]
Mode = Annotated[str, typer.Option(
    "--mode", help="continuous: an engine's steady state (chunked prefill mixed with decodes, --batch = sequences "
    "in flight); static: one batch arriving together.")]
Engine = Annotated[str, typer.Option("--engine", help="Serving engine whose defaults and memory rules apply: "
                                                      "vllm, sglang, trtllm.")]
Rate = Annotated[float | None, typer.Option(
    "--request-rate", min=1e-9, max=MAX_RATE, callback=finite, help="Offered load, requests/s over all replicas "
    "(Poisson arrivals); default: saturation. With a rate the planner minimises latency among layouts that keep "
    "up.")]
Tp = Annotated[int | None, typer.Option("--tp", min=1, max=MAX_GPUS, help="Tensor-parallel degree.")]
Pp = Annotated[int | None, typer.Option("--pp", min=1, max=MAX_GPUS, help="Pipeline-parallel stages.")]
Ep = Annotated[int | None, typer.Option(
    "--ep", min=1, max=MAX_GPUS, help="Expert-parallel degree (MoE; spans replicas).")]
Dtype = Annotated[str, typer.Option("--dtype", help="Compute datatype: bf16, fp16, or fp8 (fp8 weights, fp8 GEMMs).")]
WDtype = Annotated[str | None, typer.Option(
    "--weight-dtype", help="Stored weights: bf16, fp16, fp8, int8, int4 (int8/int4 weight-only), mxfp4, nvfp4 "
    "(block-scaled fp4: fp4 GEMMs where the GPU has an fp4 peak); default: --dtype, fp8 for fp8 checkpoints, "
    "MXFP4 experts for MXFP4 checkpoints.")]
KvDtype = Annotated[str | None, typer.Option("--kv-dtype", help="KV-cache datatype: bf16, fp16, fp8.")]
BlockSize = Annotated[int | None, typer.Option(
    "--block-size", min=1, max=MAX_SMALL, help="Tokens per paged KV-cache block (default: the engine's).")]
Util = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization", min=0.01, max=1.0, callback=finite, help="Share of GPU memory the engine budgets "
    "(vLLM gpu_memory_utilization, TRT-LLM free_gpu_memory_fraction, SGLang mem_fraction_static; default: the "
    "engine's).")]
MaxTokens = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", min=1, max=MAX_TOKENS, help="Token budget of one step: prefill chunk size and the "
    "profile run's size (default: the engine's on this GPU, e.g. vLLM 8192 on H100/H200, 2048 on A100).")]
MaxSeqs = Annotated[int | None, typer.Option(
    "--max-num-seqs", min=1, max=MAX_SEQS, help="The engine's cap on sequences in flight (continuous mode: the "
    "largest batch the planner may pick) and the rows of its profile run's sampler (default: the engine's).")]
NonTorch = Annotated[str | None, typer.Option(
    "--non-torch-memory", help="Non-PyTorch memory the engine measures per GPU, e.g. 0.5GiB (default 0.15 GiB); "
    "add CUDA-graph memory here for vLLM ≥ 0.21.")]


def _workload(system: Any, prompt_len: int, gen_len: int, dtype: str, weight_dtype: str | None,
              kv_dtype: str | None, block_size: int | None, util: float | None, max_tokens: int | None,
              max_seqs: int | None, non_torch: str | None, *, engine: str = "vllm", mode: str = "continuous",
              rate: float | None = None) -> Any:
    from pydantic import ValidationError

    from shardplan.costmodel.serving.cost import InferWorkload
    from shardplan.costmodel.serving.engines import ENGINES, with_engine_defaults
    from shardplan.errors import ShardplanError
    from shardplan.units import parse_size

    if engine not in ENGINES:
        raise ShardplanError(f"'{engine}' is not an engine shardplan models (use {', '.join(ENGINES)})",
                             field="engine")
    if mode not in ("continuous", "static"):
        raise ShardplanError(f"'{mode}' is not a serving mode (use continuous or static)", field="mode")
    if rate is not None and mode != "continuous":
        raise ShardplanError("an offered load needs --mode continuous (a static batch arrives all at once)",
                             field="request-rate")
    extra: dict[str, Any] = {"non_torch_bytes": parse_size(non_torch, field="non-torch-memory")} \
        if non_torch is not None else {}
    if engine == "sglang" and util is not None:
        extra["mem_fraction_static"] = util
    elif util is not None:
        extra["gpu_memory_utilization"] = util
    try:
        return InferWorkload(**with_engine_defaults(dict(
            prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
            block_size=block_size, engine=engine, mode=mode, request_rate=rate, max_num_batched_tokens=max_tokens,
            max_num_seqs=max_seqs, **extra), system.gpu))
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]).replace("_", "-") if err["loc"] else "workload"
        raise ShardplanError(err["msg"].removeprefix("Value error, "), field=field) from None


def _statistic(value: str) -> str:
    from shardplan.errors import ShardplanError

    if value not in ("mean", "p90"):
        raise ShardplanError(f"'{value}' is not a statistic shardplan bounds (use mean or p90)", field="slo-statistic")
    return value


def _ms(x: float | None) -> float | None:
    return None if x is None else x / 1e3


@estimate_app.command("infer")
def estimate_infer(
    model: ModelOpt, hardware: HardwareOpt, prompt_len: PromptLen, gen_len: GenLen, batch: Batch = None,
    tp: Tp = 1, pp: Pp = 1, ep: Ep = 1, gpus: GpusOpt = None, max_batch: MaxBatch = False,
    max_ttft_ms: MaxTtft = None, max_tpot_ms: MaxTpot = None, dtype: Dtype = "bf16", weight_dtype: WDtype = None,
    kv_dtype: KvDtype = None, block_size: BlockSize = None, gpu_memory_utilization: Util = None,
    max_num_batched_tokens: MaxTokens = None, max_num_seqs: MaxSeqs = None, non_torch_memory: NonTorch = None,
    engine: Engine = "vllm", mode: Mode = "continuous", request_rate: Rate = None,
    as_json: JsonOpt = False, export: ServeExportOpt = None, output: OutputOpt = None,
) -> None:
    """Per-layer prefill and decode costs, TTFT/TPOT/throughput and memory of one pinned serving layout."""
    from shardplan.cli.render_infer import render_estimate
    from shardplan.costmodel.serving.cost import InferLayout
    from shardplan.costmodel.serving.report import estimate_inference
    from shardplan.errors import ShardplanError

    spec, system, n = resolve_inputs(model, hardware, gpus, prompt_len + gen_len)
    tp, pp = tp or 1, pp or 1
    if batch is None and not max_batch:
        raise ShardplanError("give --batch B (sequences per replica) or --max-batch", field="batch")
    if batch is not None and max_batch:
        raise ShardplanError("give --batch B or --max-batch, not both", field="batch")
    if n % (tp * pp):
        raise ShardplanError(f"tp·pp ({tp}·{pp}) must divide --gpus ({n}): GPUs = replicas·tp·pp", field="tp")
    work = _workload(system, prompt_len, gen_len, dtype, weight_dtype, kv_dtype, block_size, gpu_memory_utilization,
                     max_num_batched_tokens, max_num_seqs, non_torch_memory, engine=engine, mode=mode,
                     rate=request_rate)
    layout = InferLayout(tp=tp, pp=pp, ep=ep or 1, replicas=n // (tp * pp), batch=batch or 1)
    check_outputs(export, output, as_json)
    report = estimate_inference(spec, system, n, work, layout, max_batch=max_batch, max_ttft_s=_ms(max_ttft_ms),
                                max_tpot_s=_ms(max_tpot_ms))
    argv, notes = vllm_argv(report, spec=spec, work=work, system=system) if export else (None, [])
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
    dtype: Dtype = "bf16", weight_dtype: WDtype = None, kv_dtype: KvDtype = None, block_size: BlockSize = None,
    gpu_memory_utilization: Util = None, max_num_batched_tokens: MaxTokens = None, max_num_seqs: MaxSeqs = None,
    non_torch_memory: NonTorch = None, engine: Engine = "vllm", mode: Mode = "continuous", request_rate: Rate = None,
    as_json: JsonOpt = False, export: ServeExportOpt = None,
    output: OutputOpt = None, plot: ParetoPlotOpt = None,
    slo_statistic: Annotated[str, typer.Option(
        "--slo-statistic", help="What --max-ttft-ms bounds: mean (default) or p90 (M/D/1 wait under --request-rate)."
    )] = "mean",
    disaggregate: Annotated[bool, typer.Option(
        "--disaggregate", help="Separate prefill and decode workers (each its own TP/PP/batch, KV cache shipped "
        "between them), chosen for goodput per GPU; printed beside the best aggregated plan.")] = False,
) -> None:
    """Choose how to serve a model (TP, PP, EP, replicas, batch) with CP-SAT over the cost model."""
    from shardplan.cli.render_infer import render_plan
    from shardplan.planner.serving.solve import InferRequest, plan_inference

    spec, system, n = resolve_inputs(model, hardware, gpus, prompt_len + gen_len)
    work = _workload(system, prompt_len, gen_len, dtype, weight_dtype, kv_dtype, block_size, gpu_memory_utilization,
                     max_num_batched_tokens, max_num_seqs, non_torch_memory, engine=engine, mode=mode,
                     rate=request_rate)
    req = InferRequest(model=spec, system=system, num_gpus=n, workload=work, batch=batch, max_batch=max_batch,
                       max_ttft_s=_ms(max_ttft_ms), max_tpot_s=_ms(max_tpot_ms), objective=objective, tp=tp, pp=pp,
                       ep=ep, cross_node_tp=cross_node_tp, pareto=pareto, top_k=top_k, time_limit_s=time_limit,
                       slo_statistic=_statistic(slo_statistic))
    check_outputs(export, output, as_json, plot=plot, pareto=pareto)
    if disaggregate:
        _disaggregated(req, as_json=as_json, export=export, output=output, pareto=pareto)
        return
    plan = plan_inference(req)
    argv, notes = None, []
    if export and plan.plan is None:
        notes.append("nothing exported: no serving layout fits")
    elif export:
        argv, notes = vllm_argv(plan, spec=spec, work=work, system=system)
    written = pareto_plot(plan, plot, max_tpot_ms=max_tpot_ms) if plot is not None and plan.pareto else None
    if plot is not None and written is None:
        notes.append("nothing plotted: no point on the frontier")
    deliver(plan, lambda con: render_plan(con, plan), as_json=as_json, argv=argv, output=output, notes=notes,
            plot_written=written)


def _disaggregated(req: Any, *, as_json: bool, export: Any, output: Any, pareto: bool) -> None:
    from shardplan.cli.launch import deliver, disagg_vllm_argvs
    from shardplan.cli.render_infer import render_disagg
    from shardplan.errors import ShardplanError
    from shardplan.planner.serving.disagg import plan_disaggregated

    if pareto:
        raise ShardplanError("is not available with --disaggregate", field="pareto")
    if req.tp or req.pp or req.ep or req.batch or req.max_batch:
        raise ShardplanError("pins are not available with --disaggregate (each worker kind picks its own)",
                             field="disaggregate")
    result = plan_disaggregated(req)
    commands, notes = None, []
    if export and result.plan is None:
        notes.append("nothing exported: no disaggregated plan meets the limits")
    elif export:
        commands, notes = disagg_vllm_argvs(result, spec=req.model, work=req.workload, system=req.system)
    deliver(result, lambda con: render_disagg(con, result), as_json=as_json, argv=None, output=output, notes=notes,
            commands=commands)
