"""``--export``/``--output``/``--plot`` for serving (vLLM, Pareto plot) and offload (FlexGen) plans."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli.output import console, emit
from shardplan.errors import ShardplanError


class ServeFormat(StrEnum):
    """Where a serving plan can be exported."""

    VLLM = "vllm"
    """``vllm serve`` flags for one replica (``--data-parallel-size`` for several)."""


class OffloadFormat(StrEnum):
    """Where an offload plan can be exported."""

    FLEXGEN = "flexgen"
    """FlexGen ``flex_opt`` flags (``--percent``, batch sizes, CPU attention, compression)."""


ServeExportOpt = Annotated[ServeFormat | None, typer.Option(
    "--export", help="Print the plan as launch flags instead of the tables: vllm; with --output, write a file.")]
OffloadExportOpt = Annotated[OffloadFormat | None, typer.Option(
    "--export", help="Print the plan as launch flags instead of the tables: flexgen (the planner then keeps the "
    "activations wholly on one tier, as FlexGen requires; FlexGen places whole weight tensors, and a note prices the "
    "placement it will make where that differs from the plan); with --output, write a file.")]


class FlexgenModule(StrEnum):
    """Which FlexGen distribution runs the export."""

    FLEXGEN = "flexgen"
    """PyPI ``flexgen``: ``python3 -m flexgen.flex_opt``."""
    FLEXLLMGEN = "flexllmgen"
    """FMInference/FlexLLMGen: ``python3 -m flexllmgen.flex_opt``."""


FlexgenModuleOpt = Annotated[FlexgenModule, typer.Option(
    "--flexgen-module", help="With --export flexgen: flexgen (PyPI package, flexgen.flex_opt) or flexllmgen "
    "(FlexLLMGen repository, flexllmgen.flex_opt).")]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="File for --export (default: stdout).")]
ParetoPlotOpt = Annotated[Path | None, typer.Option(
    "--plot", metavar="FILE", help="With --pareto: throughput vs TPOT plot (.png, .svg, .pdf, .jpg; PNG without a "
    "suffix; needs matplotlib).")]


def check_outputs(export: StrEnum | None, output: Path | None, as_json: bool, *, plot: Path | None = None,
                  pareto: bool = False) -> None:
    """Validate the output options before any solving."""
    if output is not None and export is None:
        raise ShardplanError("names the file for --export: add --export", field="output")
    if export is not None and output is None and as_json:
        raise ShardplanError("with --json, --export needs --output FILE (stdout holds the JSON)", field="export")
    if output is not None:
        from shardplan.cli.common import check_writable

        check_writable(output, field="output")
    if plot is not None:
        from shardplan.cli.plots import check_path, require_matplotlib

        if not pareto:
            raise ShardplanError("draws the throughput–TPOT frontier: add --pareto", field="plot")
        check_path(plot)
        require_matplotlib()


def hf_repo(spec: Any) -> str:
    """The Hugging Face repository a catalog model was read from, else its name (a path stays a path)."""
    m = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)", spec.source or "")
    return m.group(1) if m else spec.name


def deliver(result: Any, render: Callable[[Any], None], *, as_json: bool, argv: list[str] | None,
            output: Path | None, notes: list[str], plot_written: Path | None = None,
            commands: list[list[str]] | None = None) -> None:
    """Print the JSON, the export (no --output) or the tables; write the export file; notes to stderr.
    ``commands``: several launch commands (a disaggregated plan's instances), one after another."""
    from shardplan.cli.export import shell_join

    messages = [f"note: {n}" for n in notes]
    text = shell_join(argv) + "\n" if argv is not None else None
    if commands:
        text = "\n\n".join(shell_join(c) for c in commands) + "\n"
    if text is not None and output is not None:
        from shardplan.cli.common import write_output

        write_output(output, text)
        messages.append(f"wrote {output}")
        text = None
    if plot_written is not None:
        messages.append(f"wrote {plot_written}")
    if as_json:
        emit(result.model_dump(mode="json"), render, as_json=True)
    elif text is not None:
        sys.stdout.write(text)
    else:
        render(console())
    for line in messages:
        print(f"shardplan: {line}", file=sys.stderr)


def vllm_argv(plan: Any, *, spec: Any, work: Any, system: Any, kv_transfer_config: str | None = None
              ) -> tuple[list[str], list[str]]:
    """``vllm serve`` argv of a serving plan, and notes on what vLLM needs beyond flags.

    Expert parallelism: vLLM's ``--enable-expert-parallel`` spreads whole experts over every TP×DP rank of one
    deployment (vllm/config/parallel.py at the flags' commit). The plan's EP group is ``ep`` replicas, so one
    deployment is ``--data-parallel-size ep`` and ``replicas/ep`` deployments serve side by side.
    """
    from shardplan.cli.export import vllm_args

    p = plan.plan
    notes: list[str] = []
    weight = getattr(work, "weight_dtype", None) or "bf16"
    quant = "fp8" if weight == "fp8" else None
    if weight in ("int8", "int4"):
        notes.append(f"{weight} weights need a pre-quantized checkpoint (AWQ/GPTQ); vLLM reads the method from it")
    if getattr(work, "engine", "vllm") != "vllm":
        notes.append(f"the plan was priced with {work.engine}'s memory rules; vLLM budgets its KV cache differently "
                     "(re-plan with --engine vllm before launching vLLM)")
    dp = p.ep if p.ep > 1 else p.replicas
    deployments = p.replicas // dp
    if p.ep > 1:
        notes.append(f"expert parallelism: vLLM spreads whole experts over TP×DP = {p.tp * p.ep} GPUs "
                     f"({spec.moe.num_experts / (p.tp * p.ep):g} experts each); the plan's EP={p.ep} splits "
                     f"{spec.moe.num_experts // p.ep} experts per EP rank over TP={p.tp}: the same expert bytes "
                     "per GPU")
    if deployments > 1:
        notes.append(f"run {deployments} such deployments (each {p.tp * p.pp * dp} GPUs) behind a load balancer: "
                     f"the plan's {p.replicas} replicas in EP groups of {p.ep}" if p.ep > 1 else "")
    per_deploy = p.tp * p.pp * dp
    node = system.gpus_per_tray or system.gpus_per_node  # GPUs per host (an NVL72 tray: 4)
    backend = None
    if p.tp * p.pp > node:
        backend = "ray"
        notes.append(f"TP·PP = {p.tp * p.pp} GPUs span {-(-p.tp * p.pp // node)} nodes: start a Ray cluster first "
                     "(`ray start --head` on one node, `ray start --address=HEAD:6379` on the others) and run this "
                     "command on the head node")
    elif per_deploy > node:
        local = node // (p.tp * p.pp)
        notes.append(f"one deployment spans {-(-per_deploy // node)} nodes: on the head node add "
                     f"--data-parallel-size-local {local} --data-parallel-address HEAD_IP --data-parallel-rpc-port "
                     f"13345; on node i add --headless --data-parallel-size-local {local} --data-parallel-start-rank "
                     f"{local}·i and the same address and port")
    argv = vllm_args(model=hf_repo(spec), tp=p.tp, pp=p.pp, max_num_seqs=p.batch_size,
                     max_model_len=work.prompt_len + work.gen_len,
                     gpu_memory_utilization=work.gpu_memory_utilization,
                     kv_cache_dtype=getattr(work, "kv_dtype", None) or "auto", dtype=work.dtype, quantization=quant,
                     enable_expert_parallel=p.ep > 1, block_size=work.block_size, data_parallel_size=dp,
                     max_num_batched_tokens=work.max_num_batched_tokens, distributed_executor_backend=backend,
                     kv_transfer_config=kv_transfer_config)
    return argv, [n for n in notes if n]


def disagg_vllm_argvs(res: Any, *, spec: Any, work: Any, system: Any) -> tuple[list[list[str]], list[str]]:
    """``vllm serve`` commands of a disaggregated plan: one prefill and one decode instance (each worker is one
    deployment: ``--data-parallel-size ep --enable-expert-parallel`` where ep > 1), with the NixlConnector, and
    notes on how many of each to start and how to route requests."""
    from types import SimpleNamespace

    from shardplan.cli.export.vllm import KV_TRANSFER_NIXL

    cmds: list[list[str]] = []
    notes: list[str] = []
    for kind in ("prefill", "decode"):
        w = getattr(res.plan, kind)
        plan = SimpleNamespace(plan=SimpleNamespace(tp=w.tp, pp=w.pp, ep=w.ep, replicas=w.ep, batch_size=w.batch_size))
        argv, more = vllm_argv(plan, spec=spec, work=work, system=system, kv_transfer_config=KV_TRANSFER_NIXL)
        cmds.append(argv)
        notes += [f"{kind}: {n}" for n in more]
        notes.append(f"{kind}: start {w.workers} such instance(s) of {w.tp * w.pp * w.ep} GPU(s)")
        # SGLang's names (python/sglang/srt/server_args.py, ServerArgs.add_cli_args): DP attention over ep ranks
        # of tp GPUs each, experts over all tp·ep GPUs of the instance.
        ep_flags = f" --dp-size {w.ep} --enable-dp-attention --ep-size {w.tp * w.ep}" if w.ep > 1 else ""
        notes.append(f"{kind} with SGLang instead: python -m sglang.launch_server --model-path {hf_repo(spec)} "
                     f"--disaggregation-mode {kind} --tp-size {w.tp * w.ep} --pp-size {w.pp}{ep_flags}")
    notes.append("route each request to a prefill instance, then to a decode instance (vLLM's disaggregated "
                 "serving proxy, examples/online_serving/disaggregated_serving, or llm-d / Dynamo); NixlConnector "
                 "needs the nixl package")
    return cmds, notes


def _split(s: Any) -> tuple[float, float, float]:
    return (s.gpu, s.cpu, s.disk)


def flexgen_argv(plan: Any, *, spec: Any, prompt_len: int, gen_len: int, module: str = "flexgen",
                 weight_percent: tuple[int, int] | None = None) -> list[str]:
    """FlexGen ``flex_opt`` argv of an offload plan (``module``: flexgen or flexllmgen); ``weight_percent`` from
    ``flexgen_export`` (FlexGen places whole tensors), else the plan's shares rounded."""
    from shardplan.cli.export import flexgen_args

    p = plan.plan
    return flexgen_args(model=spec.name, gpu_batch_size=p.gpu_batch_size, num_gpu_batches=p.num_gpu_batches,
                        weights=_split(p.weights), kv_cache=_split(p.kv_cache), activations=_split(p.activations),
                        cpu_attention=p.cpu_attention, compress_weight=p.compress_weights,
                        compress_cache=p.compress_kv_cache, prompt_len=prompt_len, gen_len=gen_len, module=module,
                        weight_percent=weight_percent)


def flexgen_export(plan: Any, *, spec: Any, system: Any, workload: Any, caps: Any
                   ) -> tuple[tuple[int, int], str | None]:
    """The weights' ``--percent`` pair to export, and a note when FlexGen's whole-tensor placement cannot give the
    plan's shares (±0.5%): of every placement FlexGen can make (a few dozen per model), the fastest that fits, as the
    cost model prices exactly that placement (the nearest when none fits); None when the nearest gives the shares."""
    from shardplan.costmodel.offload.evaluate import estimate_offload
    from shardplan.costmodel.offload.flexgen_layout import flexgen_candidates
    from shardplan.costmodel.offload.policy import OffloadPolicy, Placement

    p = plan.plan
    want = _split(p.weights)
    cands = flexgen_candidates(spec, want, None)
    g, c, got = cands[0]
    if max(abs(a - b) for a, b in zip(got, want, strict=True)) < 0.005:
        return (g, c), None

    def place(shares: tuple[float, float, float]) -> Any:  # the report's shares are rounded: sum them to one
        total = sum(shares)
        return Placement.of(*(v / total for v in shares))

    def estimate(shares: tuple[float, float, float]) -> Any:
        policy = OffloadPolicy(
            gpu_batch_size=p.gpu_batch_size, num_gpu_batches=p.num_gpu_batches, weights=place(shares),
            kv_cache=place(_split(p.kv_cache)), activations=place(_split(p.activations)),
            cpu_attention=p.cpu_attention, compress_weights=p.compress_weights,
            compress_kv_cache=p.compress_kv_cache, pin_weights=p.pin_weights)
        return estimate_offload(spec, system, workload, policy, caps)

    reports = [(cand, estimate(cand[2])) for cand in cands]
    fitting = [(cand, rep) for cand, rep in reports if rep.status != "infeasible"]
    (g, c, got), rep = max(fitting, key=lambda x: x[1].metrics.tokens_per_s) if fitting else reports[0]

    def pct(x: tuple[float, float, float]) -> str:
        return "/".join(f"{100 * v:.0f}%" for v in x)

    fits = "" if rep.status != "infeasible" else f"; no placement FlexGen can make fits ({rep.reason})"
    note = (f"FlexGen places whole tensors, so the plan's weight shares {pct(want)} (GPU/CPU/disk) are exported as "
            f"--percent {g} {c}, which puts {pct(got)} there: {rep.metrics.tokens_per_s:.3g} tokens/s as exported, "
            f"{plan.metrics.tokens_per_s:.3g} planned{fits}")
    return (g, c), note


def pareto_plot(plan: Any, path: Path, *, max_tpot_ms: float | None) -> Path:
    """The throughput–TPOT frontier of an ``infer --pareto`` plan."""
    from shardplan.cli.plots import pareto_plot as draw

    frontier = sorted(plan.pareto, key=lambda a: a.metrics.tpot_s)
    pts = [(a.metrics.tpot_s * 1e3, a.metrics.tokens_per_s) for a in frontier]
    # label the first point of each layout (TP, PP, replicas) along the frontier, with its batch range
    labels: list[str] = []
    for i, a in enumerate(frontier):
        key = (a.plan.tp, a.plan.pp, a.plan.ep, a.plan.replicas)
        prev = frontier[i - 1].plan if i else None
        if prev is None or (prev.tp, prev.pp, prev.ep, prev.replicas) != key:
            run = [b.plan.batch_size for b in frontier[i:] if (b.plan.tp, b.plan.pp, b.plan.ep, b.plan.replicas) == key]
            labels.append(f"TP{a.plan.tp} PP{a.plan.pp} ×{a.plan.replicas}, batch {run[0]}…{run[-1]}")
        else:
            labels.append("")
    chosen = None
    if plan.plan is not None:
        for i, a in enumerate(frontier):
            if a.plan == plan.plan:
                chosen = i
    draw(pts, path, labels=labels, chosen=chosen, max_tpot_ms=max_tpot_ms, title=f"{plan.model} on {plan.num_gpus}× "
         f"{plan.hardware}: throughput vs time per output token")
    return path
