"""`shardplan offload` and `shardplan estimate offload`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from shardplan.cli._app import app, estimate_app
from shardplan.cli.common import parse_triplet
from shardplan.cli.launch import (
    FlexgenModule,
    FlexgenModuleOpt,
    OffloadExportOpt,
    OutputOpt,
    check_outputs,
    deliver,
    flexgen_argv,
    flexgen_export,
)
from shardplan.cli.options import (
    MAX_SMALL,
    GenLen,
    HardwareOpt,
    JsonOpt,
    ModelOpt,
    PromptLen,
    TimeLimitOpt,
)
from shardplan.costmodel.offload.knobs import OffloadObjective

CpuMem = Annotated[str | None, typer.Option(
    "--cpu-mem", help="Host memory the run may use, e.g. 200GiB (default: DRAM less 5% for the OS).")]
DiskOpt = Annotated[str | None, typer.Option("--disk", help="Disk space the run may use (default: the machine's).")]
GpuMem = Annotated[str | None, typer.Option(
    "--gpu-mem", help="GPU memory the run may use (default: device memory less 5% for CUDA and the allocator).")]
Triplet = "percent on GPU,CPU,disk summing to 100, e.g. 20,80,0"


def _inputs(model: str, hardware: str, cpu_mem: str | None, disk: str | None, gpu_mem: str | None,
            tokens: int) -> tuple[Any, ...]:
    """ModelSpec, SystemSpec and tier capacities (explicit sizes are taken as given)."""
    from shardplan.cli.common import warn_model
    from shardplan.cli.notes import context_note, hardware_note
    from shardplan.costmodel.offload.policy import default_capacities
    from shardplan.hardware import resolve_system
    from shardplan.models import resolve_model
    from shardplan.units import parse_size

    spec = resolve_model(model)
    warn_model(spec, "offload")
    system = resolve_system(hardware)
    hardware_note(hardware)
    context_note(spec, tokens)
    caps = default_capacities(
        system, cpu_mem=parse_size(cpu_mem, field="cpu-mem") if cpu_mem is not None else None,
        disk=parse_size(disk, field="disk") if disk is not None else None,
        gpu_mem=parse_size(gpu_mem, field="gpu-mem") if gpu_mem is not None else None)
    return spec, system, caps


def _workload(prompt_len: int, gen_len: int) -> Any:
    from shardplan.costmodel.offload.policy import OffloadWorkload

    return OffloadWorkload(prompt_len=prompt_len, gen_len=gen_len)


@estimate_app.command("offload")
def estimate_offload_cmd(
    model: ModelOpt, hardware: HardwareOpt, prompt_len: PromptLen, gen_len: GenLen,
    gpu_batch: Annotated[int, typer.Option("--gpu-batch", min=1, max=MAX_SMALL, help="Sequences per GPU batch.")],
    num_gpu_batches: Annotated[int, typer.Option(
        "--num-gpu-batches", min=1, max=MAX_SMALL, help="GPU batches per block.")],
    weights: Annotated[str, typer.Option("--weights", help=f"Weights: {Triplet}.")],
    kv_cache: Annotated[str, typer.Option("--kv-cache", help=f"KV cache: {Triplet}.")],
    activations: Annotated[str, typer.Option("--activations", help=f"Hidden states: {Triplet}.")],
    cpu_attention: Annotated[bool, typer.Option(
        "--cpu-attention", help="Decode attention over the CPU/disk KV cache runs on the CPU.")] = False,
    compress_weights: Annotated[bool, typer.Option(
        "--compress-weights", help="4-bit group-wise weights (FlexGen --compress-weight).")] = False,
    compress_cache: Annotated[bool, typer.Option(
        "--compress-cache", help="4-bit group-wise KV cache (FlexGen --compress-cache).")] = False,
    compression: Annotated[bool, typer.Option("--compression", help="Both of the above.")] = False,
    pin_weights: Annotated[bool, typer.Option(
        "--pin-weights/--no-pin-weights", help="CPU weights in pinned memory (FlexGen --pin-weight).")] = True,
    cpu_mem: CpuMem = None, disk: DiskOpt = None, gpu_mem: GpuMem = None, as_json: JsonOpt = False,
    export: OffloadExportOpt = None, output: OutputOpt = None, flexgen_module: FlexgenModuleOpt = FlexgenModule.FLEXGEN,
) -> None:
    """Throughput, phase times, bottlenecks and memory per tier of one pinned offload policy.

    Percentages are byte shares of each tensor class (a runtime that splits tensors). FlexGen's --percent
    places whole tensors by cumulative size, so its '20' can put fewer bytes on the GPU than 20%.
    """
    from shardplan.cli.render_offload import render_estimate
    from shardplan.costmodel.offload.evaluate import estimate_offload
    from shardplan.costmodel.offload.policy import OffloadPolicy, Placement

    split = {name: Placement.of(*parse_triplet(text, field=name))
             for name, text in (("weights", weights), ("kv-cache", kv_cache), ("activations", activations))}
    spec, system, caps = _inputs(model, hardware, cpu_mem, disk, gpu_mem, prompt_len + gen_len)
    policy = OffloadPolicy(
        gpu_batch_size=gpu_batch, num_gpu_batches=num_gpu_batches, weights=split["weights"],
        kv_cache=split["kv-cache"], activations=split["activations"], cpu_attention=cpu_attention,
        compress_weights=compress_weights or compression, compress_kv_cache=compress_cache or compression,
        pin_weights=pin_weights)
    check_outputs(export, output, as_json)
    if export:
        from shardplan.cli.export.flexgen import whole_tier
        from shardplan.errors import ShardplanError

        act = split["activations"]
        if not whole_tier((act.gpu, act.cpu, act.disk)):
            raise ShardplanError("FlexGen keeps the activations wholly on one tier: give --activations 100,0,0, "
                                 "0,100,0 or 0,0,100 with --export flexgen", field="activations")
    report = estimate_offload(spec, system, _workload(prompt_len, gen_len), policy, caps)
    argv, note = None, None
    if export:
        pair, note = flexgen_export(report, spec=spec, system=system, workload=_workload(prompt_len, gen_len),
                                    caps=caps)
        argv = flexgen_argv(report, spec=spec, prompt_len=prompt_len, gen_len=gen_len, module=str(flexgen_module),
                            weight_percent=pair)
    deliver(report, lambda con: render_estimate(con, report), as_json=as_json, argv=argv, output=output,
            notes=[note] if note else [])


@app.command("offload")
def offload_cmd(
    model: ModelOpt, hardware: HardwareOpt, prompt_len: PromptLen, gen_len: GenLen,
    cpu_mem: CpuMem = None, disk: DiskOpt = None, gpu_mem: GpuMem = None,
    objective: Annotated[OffloadObjective, typer.Option(
        "--objective", help="throughput: tokens/s of the block; latency: time of one request.")
    ] = OffloadObjective.THROUGHPUT,
    allow_compression: Annotated[bool, typer.Option(
        "--allow-compression", help="Also consider 4-bit group-wise weights and/or KV cache.")] = False,
    gpu_batch: Annotated[int | None, typer.Option(
        "--gpu-batch", min=1, max=MAX_SMALL, help="Pin the GPU batch size.")] = None,
    num_gpu_batches: Annotated[int | None, typer.Option(
        "--num-gpu-batches", min=1, max=MAX_SMALL, help="Pin the number of GPU batches.")] = None,
    cpu_attention: Annotated[bool | None, typer.Option(
        "--cpu-attention/--no-cpu-attention", help="Pin CPU attention on or off (default: choose).")] = None,
    time_limit: TimeLimitOpt = 10.0, as_json: JsonOpt = False, export: OffloadExportOpt = None,
    output: OutputOpt = None, flexgen_module: FlexgenModuleOpt = FlexgenModule.FLEXGEN,
) -> None:
    """Choose where weights, KV cache and activations live (CP-SAT over the cost model), and why."""
    from shardplan.cli.render_offload import render_plan
    from shardplan.planner.offload.solve import GPU_BATCHES, NUM_GPU_BATCHES, OffloadRequest, plan_offload

    spec, system, caps = _inputs(model, hardware, cpu_mem, disk, gpu_mem, prompt_len + gen_len)
    req = OffloadRequest(
        model=spec, system=system, workload=_workload(prompt_len, gen_len), capacities=caps, objective=objective,
        allow_compression=allow_compression,
        gpu_batch_sizes=(gpu_batch,) if gpu_batch else GPU_BATCHES,
        num_gpu_batches=(num_gpu_batches,) if num_gpu_batches else NUM_GPU_BATCHES,
        cpu_attention=cpu_attention, time_limit_s=time_limit, whole_activations=export is not None)
    check_outputs(export, output, as_json)
    plan = plan_offload(req)
    argv, notes = None, []
    if export and plan.plan is None:
        notes.append("nothing exported: no placement fits")
    elif export:
        pair, note = flexgen_export(plan, spec=spec, system=system, workload=req.workload, caps=caps)
        argv = flexgen_argv(plan, spec=spec, prompt_len=prompt_len, gen_len=gen_len, module=str(flexgen_module),
                            weight_percent=pair)
        notes += [note] if note else []
    deliver(plan, lambda con: render_plan(con, plan), as_json=as_json, argv=argv, output=output, notes=notes)
