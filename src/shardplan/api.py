"""The Python API for notebooks and scripts: the same answers the CLI prints, as pydantic objects.

Every function takes a model and a machine as a catalog name (``"llama-3.1-70b"``, ``"dgx-h100"``), a file
(Hugging Face ``config.json``, system YAML/JSON), or an already built ``ModelSpec``/``SystemSpec``, and returns
the object the CLI renders (``.model_dump()`` is the ``--json`` output). Bad input raises
``shardplan.errors.ShardplanError`` (a ``ValueError``) naming the field.

    >>> import shardplan
    >>> plan = shardplan.plan_training("llama-3.1-8b", "dgx-h100", gpus=8, global_batch=64, seq_len=4096)
    >>> plan.plan.tp, plan.metrics.mfu  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardplan.errors import ShardplanError, build
from shardplan.sweep.notebook import sweep_inference, sweep_training

if TYPE_CHECKING:
    from shardplan.costmodel.training.report import TrainReport
    from shardplan.hardware.spec import SystemSpec
    from shardplan.models.spec import ModelSpec
    from shardplan.planner.training.schema import TrainPlan

__all__ = ["calibrate", "estimate_inference", "estimate_offload", "estimate_training", "export_training",
           "plan_inference",
           "plan_offload", "plan_training", "sweep_inference", "sweep_training"]


def _inputs(model: str | ModelSpec, hardware: str | SystemSpec, gpus: int | None) -> tuple[Any, Any, int]:
    from shardplan.hardware import resolve_system
    from shardplan.hardware.domains import job_system
    from shardplan.models import resolve_model

    spec = resolve_model(model) if isinstance(model, str) else model
    system = resolve_system(hardware) if isinstance(hardware, str) else hardware
    n = gpus if gpus is not None else system.gpus_per_node
    if n < 1:
        raise ShardplanError(f"must be ≥ 1 (got {n})", field="gpus")
    return spec, job_system(system, n), n


_RESERVED = {"model", "system", "num_gpus", "workload", "capacities", "fixed_global_batch", "max_global_batch",
             "prompt_len", "gen_len", "seq_len", "global_batch"}


def _split(options: dict[str, Any], *models: type) -> list[dict[str, Any]]:
    """Share keyword ``options`` out to the pydantic models whose fields they name; unknown names are errors."""
    parts: list[dict[str, Any]] = [{} for _ in models]
    for key, value in options.items():
        for part, cls in zip(parts, models, strict=True):
            if key in cls.model_fields and key not in _RESERVED:
                part[key] = value
                break
        else:
            known = sorted({f for cls in models for f in cls.model_fields} - _RESERVED)
            raise ShardplanError(f"unknown option '{key}'; known: {', '.join(known)}", field=key)
    return parts


def _workload(seq_len: int, global_batch: int, extra: dict[str, Any]) -> Any:
    from shardplan.costmodel.training.layout import TrainWorkload

    return build(TrainWorkload, seq_len=seq_len, global_batch=global_batch, **extra)


_TRAIN_PIN_ALIASES = {"zero": "zero_stage", "microbatch_size": "microbatch"}


def plan_training(model: str | ModelSpec, hardware: str | SystemSpec, *, seq_len: int, gpus: int | None = None,
                  global_batch: int | None = None, max_global_batch: int | None = None, dtype: str = "bf16",
                  grad_dtype: str = "fp32", attention: str | None = None, **pins: Any) -> TrainPlan:
    """The fastest training layout for ``gpus`` GPUs (default: one node), as ``shardplan train`` prints it.

    ``pins`` fix any layout choice and the planner picks the rest: ``tp pp dp ep cp microbatch interleave
    recompute ("none" | "selective" | "full") recompute_layers sequence_parallel zero_stage (or zero)``; solver
    and space options are ``offload ("auto" | "on" | "off") max_cp cross_node_tp top_k time_limit_s``. Give
    ``global_batch``, or ``max_global_batch`` to let the planner choose the batch.

    >>> plan = plan_training("llama-3.1-70b", "dgx-h100", gpus=64, global_batch=256, seq_len=8192)
    >>> (plan.plan.tp, plan.plan.pp, plan.plan.dp, plan.plan.cp), round(plan.metrics.mfu, 2)  # doctest: +SKIP
    ((4, 1, 8, 2), 0.64)
    """
    from shardplan.planner.training.solve import TrainRequest
    from shardplan.planner.training.solve import plan_training as _plan

    if global_batch is None and max_global_batch is None:
        raise ShardplanError("give global_batch, or max_global_batch to let the planner choose", field="global_batch")
    spec, system, n = _inputs(model, hardware, gpus)
    pins = {_TRAIN_PIN_ALIASES.get(k, k): v for k, v in pins.items()}
    req_opts, = _split(pins, TrainRequest)
    work = _workload(seq_len, global_batch or max_global_batch or 1,
                     {"dtype": dtype, "grad_dtype": grad_dtype, "attention": attention})
    req = build(TrainRequest, model=spec, system=system, num_gpus=n, workload=work,
                 max_global_batch=max_global_batch, fixed_global_batch=global_batch is not None, **req_opts)
    return _plan(req)


def estimate_training(model: str | ModelSpec, hardware: str | SystemSpec, *, global_batch: int, seq_len: int,
                      gpus: int | None = None, tp: int = 1, pp: int = 1, dp: int | None = None, ep: int = 1,
                      cp: int = 1, microbatch: int = 1, interleave: int = 1, recompute: str = "none",
                      recompute_layers: int | None = None, sequence_parallel: bool = False, zero_stage: int = 0,
                      offload_optimizer: float = 0.0, offload_weights: float = 0.0, offload_activations: float = 0.0,
                      dtype: str = "bf16", grad_dtype: str = "fp32", attention: str | None = None,
                      stage_layers: list[int] | None = None,
                      stage_recompute_layers: list[int] | None = None,
                      recompute_modules: list[str] | None = None) -> TrainReport:
    """Time and memory of one pinned training layout, as ``shardplan estimate train`` prints it.

    ``dp`` defaults to gpus / (tp·pp·cp); offload fractions are 0–1 of each class kept on the CPU;
    ``stage_layers`` pins the layers per pipeline rank (``--stage-layers``), ``stage_recompute_layers`` the
    fully recomputed layers per rank under ``recompute="full"``, ``recompute_modules`` Megatron's selective
    module set under ``recompute="selective"`` (``--recompute-modules``; default core_attn). A layout
    that does not fit is a result with ``status == "infeasible"``, a ``reason`` and ``suggestions``.

    >>> r = estimate_training("gpt3-175b", "dgx-a100-80gb", gpus=64, global_batch=64, seq_len=2048, tp=8, pp=8,
    ...                       interleave=3, recompute="selective", sequence_parallel=True)
    >>> round(r.metrics.step_time_s, 1), r.status  # doctest: +SKIP
    (13.4, 'feasible')
    """
    from shardplan.costmodel.training.evaluate import estimate_training as _estimate
    from shardplan.costmodel.training.knobs import Recompute
    from shardplan.costmodel.training.layout import TrainLayout

    spec, system, n = _inputs(model, hardware, gpus)
    if dp is None:
        if n % (tp * pp * cp):
            raise ShardplanError(f"gpus ({n}) must be divisible by tp·pp·cp ({tp * pp * cp})", field="gpus")
        dp = n // (tp * pp * cp)
    try:
        rc = Recompute(recompute)
    except ValueError:
        raise ShardplanError(f"'{recompute}' is not one of none, selective, full", field="recompute") from None
    layout = TrainLayout(tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, microbatch=microbatch, interleave=interleave,
                         recompute=rc, recompute_layers=recompute_layers, sequence_parallel=sequence_parallel,
                         zero_stage=zero_stage, offload_optimizer=offload_optimizer,
                         offload_weights=offload_weights, offload_activations=offload_activations,
                         recompute_modules=None if recompute_modules is None else tuple(recompute_modules))
    work = _workload(seq_len, global_batch, {"dtype": dtype, "grad_dtype": grad_dtype, "attention": attention})
    if stage_layers is not None:
        from shardplan.costmodel.training.stage_report import estimate_split

        return estimate_split(spec, system, n, work, layout, list(stage_layers),
                              None if stage_recompute_layers is None else list(stage_recompute_layers))
    if stage_recompute_layers is not None:
        raise ShardplanError("needs stage_layers", field="stage_recompute_layers")
    return _estimate(spec, system, n, work, layout)


def export_training(result: TrainPlan | TrainReport, fmt: str, *, model: str | ModelSpec | None = None,
                    hardware: str | SystemSpec | None = None, dtype: str = "bf16", grad_dtype: str = "fp32",
                    attention: str | None = None) -> str:
    """The launch file for a training result: ``fmt`` is megatron (arguments), deepspeed (JSON) or torchtitan
    (TOML). ``model``/``hardware`` default to the names in ``result``; pass the same ``dtype``/``attention``
    as for planning.

    >>> plan = plan_training("llama-3.1-70b", "dgx-h100", gpus=64, global_batch=256, seq_len=8192)
    >>> print(export_training(plan, "megatron"))  # doctest: +SKIP
    # Megatron-LM arguments for llama-3.1-70b on 64 GPUs (dgx-h100), written by shardplan.
    ...
    """
    from shardplan.cli.export import export_train, train_target

    spec, system, n = _inputs(model or result.model, hardware or result.hardware, result.num_gpus)
    if result.plan is None:
        raise ShardplanError("nothing to export: no layout fits", field="export")
    work = _workload(result.seq_len, result.plan.global_batch,
                     {"dtype": dtype, "grad_dtype": grad_dtype, "attention": attention})
    target = train_target(result.plan, model=spec, system=system, num_gpus=n, workload=work)
    return export_train(fmt, target).text


def plan_inference(model: str | ModelSpec, hardware: str | SystemSpec, *, prompt_len: int, gen_len: int,
                   gpus: int | None = None, **options: Any) -> Any:
    """The serving layout (TP, PP, EP, replicas, batch) for ``gpus`` GPUs, as ``shardplan infer`` prints it.

    ``options`` are request fields (``batch max_batch max_ttft_s max_tpot_s objective tp pp ep pareto top_k
    time_limit_s``) or workload fields (``dtype weight_dtype kv_dtype block_size gpu_memory_utilization …``).

    >>> p = plan_inference("llama-3.1-70b", "dgx-h100", gpus=8, prompt_len=1024, gen_len=256, max_tpot_s=0.05)
    >>> p.plan.tp, p.plan.batch_size, p.metrics.tokens_per_s  # doctest: +SKIP
    """
    from shardplan.costmodel.serving.cost import InferWorkload
    from shardplan.costmodel.serving.engines import with_engine_defaults
    from shardplan.planner.serving.solve import InferRequest
    from shardplan.planner.serving.solve import plan_inference as _plan

    spec, system, n = _inputs(model, hardware, gpus)
    req_opts, work_opts = _split(options, InferRequest, InferWorkload)
    work = build(InferWorkload, **with_engine_defaults(dict(prompt_len=prompt_len, gen_len=gen_len, **work_opts),
                                                       system.gpu))
    return _plan(build(InferRequest, model=spec, system=system, num_gpus=n, workload=work, **req_opts))


def estimate_inference(model: str | ModelSpec, hardware: str | SystemSpec, *, prompt_len: int, gen_len: int,
                       gpus: int | None = None, tp: int = 1, pp: int = 1, ep: int = 1, batch: int = 1,
                       max_batch: bool = False, max_ttft_s: float | None = None, max_tpot_s: float | None = None,
                       **workload: Any) -> Any:
    """Time and memory of one serving layout (replicas = gpus / (tp·pp)), as ``shardplan estimate infer``.

    >>> r = estimate_inference("llama-3.1-8b", "dgx-h100", gpus=1, prompt_len=512, gen_len=128, batch=32)
    >>> r.metrics.tpot_s, r.memory.kv_cache_tokens  # doctest: +SKIP
    """
    from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
    from shardplan.costmodel.serving.engines import with_engine_defaults
    from shardplan.costmodel.serving.report import estimate_inference as _estimate

    spec, system, n = _inputs(model, hardware, gpus)
    if n % (tp * pp):
        raise ShardplanError(f"gpus ({n}) must be divisible by tp·pp ({tp * pp})", field="gpus")
    work = build(InferWorkload, **with_engine_defaults(dict(prompt_len=prompt_len, gen_len=gen_len, **workload),
                                                       system.gpu))
    layout = InferLayout(tp=tp, pp=pp, ep=ep, replicas=n // (tp * pp), batch=batch)
    return _estimate(spec, system, n, work, layout, max_batch=max_batch, max_ttft_s=max_ttft_s,
                     max_tpot_s=max_tpot_s)


def _capacities(system: Any, gpu_mem: Any, cpu_mem: Any, disk: Any) -> Any:
    from shardplan.costmodel.offload.policy import default_capacities
    from shardplan.units import parse_size

    def size(v: Any, field: str) -> float | None:
        return None if v is None else float(parse_size(v, field=field))

    return default_capacities(system, gpu_mem=size(gpu_mem, "gpu_mem"), cpu_mem=size(cpu_mem, "cpu_mem"),
                              disk=size(disk, "disk"))


def plan_offload(model: str | ModelSpec, hardware: str | SystemSpec, *, prompt_len: int, gen_len: int,
                 cpu_mem: str | float | None = None, disk: str | float | None = None,
                 gpu_mem: str | float | None = None, **options: Any) -> Any:
    """Where weights, KV cache and activations live on one GPU, as ``shardplan offload`` prints it.

    Sizes accept units (``"200GiB"``). ``options`` are request fields (``objective allow_compression
    cpu_attention percent_step time_limit_s …``) or workload fields (``dtype decode_segments``).

    >>> p = plan_offload("opt-30b", "dgx-a100-40gb", prompt_len=512, gen_len=32, cpu_mem="200GiB")
    >>> p.plan.weights, p.metrics.tokens_per_s  # doctest: +SKIP
    """
    from shardplan.costmodel.offload.policy import OffloadWorkload
    from shardplan.planner.offload.solve import OffloadRequest
    from shardplan.planner.offload.solve import plan_offload as _plan

    spec, system, _ = _inputs(model, hardware, 1)
    req_opts, work_opts = _split(options, OffloadRequest, OffloadWorkload)
    work = build(OffloadWorkload, prompt_len=prompt_len, gen_len=gen_len, **work_opts)
    caps = _capacities(system, gpu_mem, cpu_mem, disk)
    return _plan(build(OffloadRequest, model=spec, system=system, workload=work, capacities=caps, **req_opts))


def estimate_offload(model: str | ModelSpec, hardware: str | SystemSpec, *, prompt_len: int, gen_len: int,
                     gpu_batch_size: int, num_gpu_batches: int, weights: tuple[float, float, float],
                     kv_cache: tuple[float, float, float], activations: tuple[float, float, float] = (1.0, 0.0, 0.0),
                     cpu_mem: str | float | None = None, disk: str | float | None = None,
                     gpu_mem: str | float | None = None, **options: Any) -> Any:
    """Cost of one offload policy; placements are (GPU, CPU, disk) fractions summing to 1.

    ``options`` are policy switches (``cpu_attention compress_weights compress_kv_cache pin_weights``) or
    workload fields (``dtype decode_segments``).

    >>> r = estimate_offload("opt-30b", "dgx-a100-40gb", prompt_len=512, gen_len=32, gpu_batch_size=48,
    ...                      num_gpu_batches=3, weights=(0.2, 0.8, 0.0), kv_cache=(0.0, 1.0, 0.0))
    >>> r.metrics.tokens_per_s  # doctest: +SKIP
    """
    from shardplan.costmodel.offload.evaluate import estimate_offload as _estimate
    from shardplan.costmodel.offload.policy import OffloadPolicy, OffloadWorkload, Placement

    spec, system, _ = _inputs(model, hardware, 1)
    policy_opts, work_opts = _split(options, OffloadPolicy, OffloadWorkload)
    work = build(OffloadWorkload, prompt_len=prompt_len, gen_len=gen_len, **work_opts)
    place = {name: build(Placement, gpu=v[0], cpu=v[1], disk=v[2]) for name, v in
             (("weights", weights), ("kv_cache", kv_cache), ("activations", activations))}
    policy = build(OffloadPolicy, gpu_batch_size=gpu_batch_size, num_gpu_batches=num_gpu_batches, **place,
                    **policy_opts)
    return _estimate(spec, system, work, policy, _capacities(system, gpu_mem, cpu_mem, disk))


def calibrate(hardware: str | SystemSpec, runs: str | list[dict[str, Any]], *, output: str | None = None) -> Any:
    """Fit a system's calibration block to measured runs, as ``shardplan calibrate --json`` prints it.

    ``runs`` is a YAML/JSON runs file or the list under its ``runs:`` key; with ``output`` the calibrated
    system file is written there (then usable as ``hardware`` everywhere).

    >>> fit = calibrate("dgx-h100", "examples/calibration/runs.yaml")
    >>> fit.fitted, fit.calibration.gemm_scale  # doctest: +SKIP
    """
    from shardplan.calibration import calibrate as _calibrate

    return _calibrate(hardware, runs, output=output)
