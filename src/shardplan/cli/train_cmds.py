"""`shardplan estimate train` and `shardplan train`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli._app import app, estimate_app
from shardplan.cli.common import parse_fraction, resolve_inputs
from shardplan.cli.export import TrainFormat
from shardplan.cli.options import MAX_BATCH, MAX_GPUS, GpusOpt, HardwareOpt, JsonOpt, ModelOpt, TimeLimitOpt
from shardplan.cli.output import console, emit
from shardplan.cli.train_options import (
    Attention,
    Cp,
    CpCommOpt,
    Dp,
    Dtype,
    Ep,
    Etp,
    ExportOpt,
    FrameworkOpt,
    GlobalBatch,
    GradDtype,
    GradReduceDtype,
    HeadroomOpt,
    Inter,
    LocalBatch,
    Micro,
    MtpLayers,
    OffA,
    OffOpt,
    OffW,
    Optimizer,
    OutputOpt,
    PlotKindOpt,
    PlotOpt,
    Pp,
    Rc,
    RcLayers,
    RcModulesOpt,
    SeqLen,
    Sp,
    StageLayersOpt,
    StageRcOpt,
    Tp,
    UniformOpt,
    Zero,
    check_cp_comm,
    parse_headroom,
    with_cp_comm,
)
from shardplan.costmodel.training.knobs import Recompute
from shardplan.planner.training.knobs import OffloadPolicy


def _launcher(export: Any, framework: Any) -> str | None:
    """What runs the plan, for the checks that depend on it: the export target if it fixes the launcher (Megatron-LM,
    DeepSpeed), else --framework."""
    return str(export) if export in ("megatron", "deepspeed") else None if framework is None else str(framework)


def _pytorch_cp(framework: Any, export: Any) -> bool:
    """Context parallelism runs as PyTorch's context_parallel: torchtitan or AutoModel plans, a torchtitan export."""
    from shardplan.costmodel.training.frameworks import PYTORCH_CP

    return any(str(x) in PYTORCH_CP for x in (framework, export) if x is not None)


def _workload(seq_len: int, global_batch: int, dtype: str, grad_dtype: str, attention: str | None,
              optimizer: str = "adam", headroom: dict[str, Any] | None = None,
              grad_reduce_dtype: str | None = None, local_batch: int | None = None,
              framework: str | None = None, mtp_layers: int = 0) -> Any:
    from pydantic import ValidationError

    from shardplan.costmodel.training.layout import TrainWorkload
    from shardplan.errors import ShardplanError

    if local_batch is not None and framework in ("megatron", "deepspeed"):
        raise ShardplanError(f"{framework} runs every microbatch of a step in one pipeline schedule: drop "
                             "--local-batch", field="local-batch")
    try:
        return TrainWorkload(seq_len=seq_len, global_batch=global_batch, dtype=dtype, grad_dtype=grad_dtype,
                             grad_reduce_dtype=grad_reduce_dtype, attention=attention, optimizer=optimizer,
                             local_batch=local_batch, mtp_layers=mtp_layers, **(headroom or {}))
    except ValidationError as e:
        err = e.errors()[0]
        raise ShardplanError(err["msg"].removeprefix("Value error, "), field=str(err["loc"][0]) if err["loc"]
                             else "workload") from None


def _check_outputs(export: TrainFormat | None, output: Path | None, plots: list[str] | None,
                   as_json: bool, plot_kind: str | None = None) -> list[tuple[str, Path]]:
    """Validate --export/--output/--plot before any work; returns the (kind, file) plots to write."""
    from shardplan.cli.common import check_writable
    from shardplan.cli.plots import parse_train_plot, require_matplotlib
    from shardplan.errors import ShardplanError

    if output is not None and export is None:
        raise ShardplanError("names the file for --export: add --export megatron|deepspeed|torchtitan", field="output")
    if export is not None and output is None and as_json:
        raise ShardplanError("with --json, --export needs --output FILE (stdout holds the JSON)", field="export")
    if output is not None:
        check_writable(output, field="output")
    specs = [parse_train_plot(p, str(plot_kind) if plot_kind else None) for p in plots or []]
    if specs:
        require_matplotlib()
    return specs


def _deliver(result: Any, *, spec: Any, system: Any, n: int, work: Any, as_json: bool, render: Any,
             export: TrainFormat | None, output: Path | None, plots: list[tuple[str, Path]]) -> None:
    """Write the export and plots, then print the JSON, the export (no --output) or the tables; stderr says
    which files were written and what the target framework cannot express exactly."""
    from shardplan.cli.common import write_output
    from shardplan.cli.export import export_train, train_target
    from shardplan.cli.plots import train_plots

    messages: list[str] = []
    exported = None
    if export is not None and result.plan is None:
        messages.append(f"nothing exported to {export}: no layout fits")
    elif export is not None:
        w = work.model_copy(update={"global_batch": result.plan.global_batch})
        target = train_target(result.plan, model=spec, system=system, num_gpus=n, workload=w)
        exp = export_train(export, target, file_name=output.name if output else None)
        if result.status == "infeasible":
            messages.append("note: this layout does not fit in GPU memory (see the estimate)")
        messages += [f"note: {note}" for note in exp.notes]
        if output is not None:
            write_output(output, exp.text)
            messages.append(f"wrote {output} ({export})")
        else:
            exported = exp.text
    if plots and result.plan is None:
        messages.append("nothing plotted: no layout fits")
    elif plots:
        messages += train_plots(plots, result)
    if as_json:
        emit(result.model_dump(mode="json"), render, as_json=True)
        return
    if exported is not None:
        sys.stdout.write(exported)
    else:
        render(console())
    for line in messages:
        print(f"shardplan: {line}", file=sys.stderr)


def _int_list(text: str, field: str) -> list[int]:
    from shardplan.errors import ShardplanError

    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise ShardplanError(f"expects comma-separated integers, e.g. 7,8,8,7 (got {text!r})", field=field) from None
    if not values or min(values) < 0:
        raise ShardplanError(f"expects comma-separated integers ≥ 0, e.g. 7,8,8,7 (got {text!r})", field=field)
    return values


@estimate_app.command("train")
def estimate_train(
    model: ModelOpt, hardware: HardwareOpt, global_batch: GlobalBatch, seq_len: SeqLen, tp: Tp = 1,
    pp: Pp = 1, gpus: GpusOpt = None, dp: Dp = None, ep: Ep = 1, etp: Etp = None, cp: Cp = 1, microbatch: Micro = 1,
    interleave: Inter = 1, recompute: Rc = Recompute.NONE, recompute_layers: RcLayers = None,
    sequence_parallel: Sp = False, zero: Zero = 0, offload_optimizer: OffOpt = None, offload_weights: OffW = None,
    offload_activations: OffA = None, dtype: Dtype = "bf16", grad_dtype: GradDtype = "fp32",
    grad_reduce_dtype: GradReduceDtype = None, optimizer: Optimizer = "adam", memory_headroom: HeadroomOpt = None,
    attention: Attention = None, as_json: JsonOpt = False, export: ExportOpt = None, output: OutputOpt = None,
    plot: PlotOpt = None, plot_kind: PlotKindOpt = None, stage_layers: StageLayersOpt = None,
    stage_recompute_layers: StageRcOpt = None, recompute_modules: RcModulesOpt = None, framework: FrameworkOpt = None,
    local_batch: LocalBatch = None, mtp_layers: MtpLayers = 0, cp_comm_type: CpCommOpt = None,
) -> None:
    """Per-layer and per-stage time and memory of one pinned training layout.

    MFU = model FLOPs / (step time · GPUs · the dtype's dense peak), model FLOPs = 6 per active weight per token +
    12·L·s·a·d per token for attention over the full s×s matrix (causal masking not discounted, as PaLM,
    torchtitan and Megatron-LM before 2025-03 count; later Megatron-LM halves it) + 6·V·h for the LM head, no
    recompute. HFU adds the forward work that recompute reruns, counted the same way, so HFU ≥ MFU. A plan fits
    when its peak memory per GPU ≤ GPU memory less --memory-headroom.
    """
    from shardplan.cli.render_train import render_estimate
    from shardplan.costmodel.training.cp_rules import check_cp_runs
    from shardplan.costmodel.training.evaluate import estimate_training
    from shardplan.costmodel.training.frameworks import framework_system
    from shardplan.costmodel.training.layout import TrainLayout
    from shardplan.errors import ShardplanError

    plots = _check_outputs(export, output, plot, as_json, plot_kind)
    spec, system, n = resolve_inputs(model, hardware, gpus, seq_len)
    system = framework_system(with_cp_comm(system, cp_comm_type), str(framework) if framework else None, spec,
                              pytorch_cp=_pytorch_cp(framework, export))
    check_cp_comm(system, framework, export)
    tp, pp, cp = tp or 1, pp or 1, cp or 1
    check_cp_runs(spec, cp, system.software.cp_comm_type, pytorch=_pytorch_cp(framework, export))
    if dp is None:
        if n % (tp * pp * cp):
            raise ShardplanError(f"--gpus ({n}) must be divisible by tp·pp·cp ({tp * pp * cp})", field="gpus")
        dp = n // (tp * pp * cp)
    layout = TrainLayout(
        tp=tp, pp=pp, dp=dp, ep=ep or 1, etp=etp, cp=cp, microbatch=microbatch or 1, interleave=interleave or 1,
        recompute=recompute or Recompute.NONE, recompute_layers=recompute_layers,
        sequence_parallel=bool(sequence_parallel), zero_stage=zero or 0,
        offload_optimizer=parse_fraction(offload_optimizer, field="offload-optimizer"),
        offload_weights=parse_fraction(offload_weights, field="offload-weights"),
        offload_activations=parse_fraction(offload_activations, field="offload-activations"),
        recompute_modules=_modules(recompute_modules),
    )
    if framework is not None:  # the same check as train's pins: a layout the framework cannot run is bad input
        from shardplan.costmodel.training.frameworks import caps_for

        caps = caps_for(str(framework), spec)
        caps.check(tp=tp, pp=pp, interleave=layout.interleave, cp=cp, ep=layout.ep, zero=layout.zero_stage,
                   recompute=layout.recompute)
        caps.check_recompute(layout.recompute_modules, layout.recompute_layers)
        if caps.selective_policy and layout.recompute == Recompute.SELECTIVE:  # its policy, as the planner runs it
            layout = dataclasses.replace(layout, recompute_modules=(caps.selective_policy,))
    work = _workload(seq_len, global_batch, dtype, grad_dtype, attention, optimizer,
                     parse_headroom(memory_headroom, system.gpu.memory_bytes), grad_reduce_dtype, local_batch,
                     _launcher(export, framework), mtp_layers)
    if stage_layers is None:
        if stage_recompute_layers is not None:
            raise ShardplanError("needs --stage-layers", field="stage-recompute-layers")
        report = estimate_training(spec, system, n, work, layout)
    else:
        from shardplan.costmodel.training.stage_report import estimate_split

        report = estimate_split(spec, system, n, work, layout, _int_list(stage_layers, "stage-layers"),
                                None if stage_recompute_layers is None
                                else _int_list(stage_recompute_layers, "stage-recompute-layers"))
    _deliver(report, spec=spec, system=system, n=n, work=work, as_json=as_json,
             render=lambda con: render_estimate(con, report), export=export, output=output, plots=plots)



def _modules(text: str | None) -> tuple[str, ...] | None:
    """``--recompute-modules a,b`` as a tuple of names (None when not given)."""
    return None if text is None else tuple(m.strip() for m in text.split(",") if m.strip())


@app.command("train")
def train(
    model: ModelOpt, hardware: HardwareOpt, seq_len: SeqLen, global_batch: Annotated[
        int | None, typer.Option(
            "--global-batch", "-b", min=1, max=MAX_BATCH, help="Sequences per optimizer step.")] = None,
    gpus: GpusOpt = None,
    max_global_batch: Annotated[int | None, typer.Option(
        "--max-global-batch", min=1, max=MAX_BATCH,
        help="Choose the batch (≤ this) with the highest throughput.")] = None,
    tp: Tp = None, pp: Pp = None, dp: Dp = None, ep: Ep = None, etp: Etp = None, cp: Cp = None,
    microbatch: Micro = None, interleave: Inter = None, recompute: Rc = None, recompute_layers: RcLayers = None,
    recompute_modules: RcModulesOpt = None, sequence_parallel: Sp = None, zero: Zero = None,
    offload: Annotated[OffloadPolicy, typer.Option(
        "--offload", help="CPU offload of optimizer/weights/activations: auto (only if nothing fits), on, off.")
    ] = OffloadPolicy.AUTO,
    max_cp: Annotated[int, typer.Option(
        "--max-cp", min=1, max=MAX_GPUS, help="Largest context-parallel degree to consider.")] = 8,
    cross_node_tp: Annotated[bool, typer.Option(
        "--allow-cross-node-tp", help="Let TP span nodes (CP always may).")] = False,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50, help="Best K distinct layouts.")] = 1,
    time_limit: TimeLimitOpt = 30.0, dtype: Dtype = "bf16", grad_dtype: GradDtype = "fp32",
    grad_reduce_dtype: GradReduceDtype = None, optimizer: Optimizer = "adam", memory_headroom: HeadroomOpt = None,
    attention: Attention = None, as_json: JsonOpt = False, export: ExportOpt = None, output: OutputOpt = None,
    plot: PlotOpt = None, plot_kind: PlotKindOpt = None, uniform_stages: UniformOpt = False,
    framework: FrameworkOpt = None, local_batch: LocalBatch = None, mtp_layers: MtpLayers = 0,
    cp_comm_type: CpCommOpt = None,
) -> None:
    """Choose the fastest training layout (CP-SAT over the cost model), with the reasons.

    MFU = model FLOPs / (step time · GPUs · the dtype's dense peak), model FLOPs = 6 per active weight per token +
    12·L·s·a·d per token for attention over the full s×s matrix (causal masking not discounted, as PaLM,
    torchtitan and Megatron-LM before 2025-03 count; later Megatron-LM halves it) + 6·V·h for the LM head, no
    recompute. HFU adds the forward work that recompute reruns, counted the same way, so HFU ≥ MFU. A plan fits
    when its peak memory per GPU ≤ GPU memory less --memory-headroom.

    Besides the ±x% band, a layout the planner chose carries "at the optimum": where the expert-tuned runs of the
    published jobs it was checked on measured against its own free choice (central 85%, this GPU generation and
    model class; metrics.optimum_band_pct). An optimiser picks what the model is most optimistic about, so expect
    the low side.
    """
    from shardplan.cli.progress import solving
    from shardplan.cli.render_train import render_plan
    from shardplan.costmodel.training.frameworks import framework_system
    from shardplan.errors import ShardplanError
    from shardplan.planner.training.solve import TrainRequest, plan_training

    plots = _check_outputs(export, output, plot, as_json, plot_kind)
    spec, system, n = resolve_inputs(model, hardware, gpus, seq_len)
    system = framework_system(with_cp_comm(system, cp_comm_type), str(framework) if framework else None, spec,
                              pytorch_cp=_pytorch_cp(framework, export))
    check_cp_comm(system, framework, export)
    if global_batch is not None and max_global_batch is not None:
        raise ShardplanError("give either --global-batch B (fixed) or --max-global-batch B (the planner chooses the "
                             "batch), not both", field="max-global-batch")
    if global_batch is None and max_global_batch is None:
        raise ShardplanError("give --global-batch B, or --max-global-batch B to let the planner choose",
                             field="global-batch")
    work = _workload(seq_len, global_batch or max_global_batch or 1, dtype, grad_dtype, attention, optimizer,
                     parse_headroom(memory_headroom, system.gpu.memory_bytes), grad_reduce_dtype, local_batch,
                     _launcher(export, framework), mtp_layers)
    req = TrainRequest(
        model=spec, system=system, num_gpus=n, workload=work, max_global_batch=max_global_batch,
        fixed_global_batch=global_batch is not None, tp=tp, pp=pp, dp=dp, ep=ep, etp=etp, cp=cp,
        microbatch=microbatch, interleave=interleave, recompute=recompute, recompute_layers=recompute_layers,
        sequence_parallel=sequence_parallel, zero_stage=zero,
        offload=offload, max_cp=max_cp, cross_node_tp=cross_node_tp, top_k=top_k,
        time_limit_s=time_limit, uniform_stages=uniform_stages,
        single_recompute_count=export is not None,  # Megatron and torchtitan take one recompute count
        zero3_with_pp=export is None or export == "torchtitan",  # only torchtitan runs FSDP under PP
        zero3_with_ep=export != "deepspeed",  # deepspeed.moe.layer.MoE refuses ZeRO-3 (exporter's check)
        module_sets=export is None or export == "megatron",  # --recompute-modules is Megatron's
        recompute_modules=_modules(recompute_modules), framework=str(framework) if framework else None,
        pytorch_cp=_pytorch_cp(framework, export),
    )
    if framework and export in (TrainFormat.MEGATRON, TrainFormat.TORCHTITAN) and str(export) != str(framework):
        raise ShardplanError(f"--export {export} writes a {export} launch, but --framework {framework} plans for "
                             f"{framework}: give one, or the same for both", field="framework")
    with solving(f"planning {spec.name} on {n} GPUs…", enabled=not as_json):
        plan = plan_training(req)
    _deliver(plan, spec=spec, system=system, n=n, work=work, as_json=as_json,
             render=lambda con: render_plan(con, plan), export=export, output=output, plots=plots)
