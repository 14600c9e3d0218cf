"""Options of `shardplan train` and `shardplan estimate train` (their names are the CLI contract of DESIGN.md)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli.export import TrainFormat
from shardplan.cli.options import MAX_BATCH, MAX_GPUS, MAX_LAYER_COUNT, MAX_TOKENS
from shardplan.costmodel.training.knobs import MAX_MTP_LAYERS, Recompute


class Framework(StrEnum):
    """The training framework a plan must run in (``--framework``): only the knobs it has."""

    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    AUTOMODEL = "automodel"
    FSDP = "fsdp"


FrameworkOpt = Annotated[Framework | None, typer.Option(
    "--framework", help="Plan only layouts this framework can run: megatron (Megatron-LM/NeMo: every knob; ZeRO-3 "
    "without PP; one full-recompute count on every pipeline rank), torchtitan (FSDP2 or DDP, TP, PP, CP, EP; no "
    "ZeRO-1/2; selective recompute is its op-level policy; one recompute count on every rank), automodel (NeMo "
    "AutoModel: FSDP2, PP, EP, and TP/CP for dense models only; full recompute or none), "
    "fsdp (PyTorch FSDP as llm-foundry or HF Accelerate run it: data parallel only, ZeRO 0/2/3, full recompute or "
    "none). Default: every knob.")]


class PlotKind(StrEnum):
    """What a training --plot draws."""

    MEMORY = "memory"
    PIPELINE = "pipeline"


GlobalBatch = Annotated[int, typer.Option(
    "--global-batch", "-b", min=1, max=MAX_BATCH, help="Sequences per optimizer step.")]
SeqLen = Annotated[int, typer.Option("--seq-len", "-s", min=1, max=MAX_TOKENS, help="Tokens per sequence.")]
Tp = Annotated[int | None, typer.Option("--tp", min=1, max=MAX_GPUS, help="Tensor-parallel degree.")]
Pp = Annotated[int | None, typer.Option("--pp", min=1, max=MAX_GPUS, help="Pipeline-parallel stages.")]
Dp = Annotated[int | None, typer.Option(
    "--dp", min=1, max=MAX_GPUS, help="Data-parallel degree (default: GPUs/(tp·pp·cp)).")]
Ep = Annotated[int | None, typer.Option(
    "--ep", min=1, max=MAX_GPUS, help="Expert-parallel degree (MoE); with --etp it may exceed dp·cp: etp·ep must "
    "divide tp·cp·dp (MoE parallel folding).")]
Etp = Annotated[int | None, typer.Option(
    "--etp", min=1, max=MAX_GPUS, help="Expert tensor-parallel degree (MoE; default: tp). Expert-data-parallel "
    "ranks follow: tp·cp·dp / (etp·ep).")]
Cp = Annotated[int | None, typer.Option("--cp", min=1, max=MAX_GPUS, help="Context-parallel degree (long sequences).")]
Micro = Annotated[int | None, typer.Option("--microbatch", min=1, max=MAX_BATCH, help="Sequences per microbatch.")]
Inter = Annotated[int | None, typer.Option(
    "--interleave", min=1, max=MAX_LAYER_COUNT, help="Pipeline chunks per stage (v).")]
Rc = Annotated[Recompute | None, typer.Option("--recompute", help="Activation recomputation.")]
RcLayers = Annotated[int | None, typer.Option("--recompute-layers", min=1, max=MAX_LAYER_COUNT,
                                              help="With --recompute full: only this many layers per stage.")]
Sp = Annotated[bool | None, typer.Option("--sequence-parallel/--no-sequence-parallel", help="Sequence parallelism.")]
Zero = Annotated[int | None, typer.Option("--zero", min=0, max=3, help="ZeRO stage 0-3.")]
OffOpt = Annotated[str | None, typer.Option("--offload-optimizer", help="Optimizer state on CPU, e.g. 30%.")]
OffW = Annotated[str | None, typer.Option("--offload-weights", help="Weights on CPU, e.g. 20%.")]
OffA = Annotated[str | None, typer.Option("--offload-activations", help="Stored activations on CPU, e.g. 50%.")]
Dtype = Annotated[str, typer.Option("--dtype", help="Compute datatype: bf16, fp16, fp8, fp4 (NVFP4 GEMMs at the "
                                    "GPU's fp4 peak, bf16 elsewhere), fp32.")]
GradDtype = Annotated[str, typer.Option("--grad-dtype", help="Gradient datatype: fp32 (Megatron), bf16, fp16.")]
GradReduceDtype = Annotated[str | None, typer.Option(
    "--grad-reduce-dtype", help="Datatype of the data-parallel gradient reduction: fp32 (torchtitan's "
    "mixed_precision_reduce, Composer FSDP DEFAULT), bf16, fp16; default: --grad-dtype, the compute dtype under "
    "ZeRO-3.")]
Optimizer = Annotated[str, typer.Option(
    "--optimizer", help="adam (12 B/param state), adam-8bit (6), sgd (8), adafactor (4), adam-bf16 (8: bf16 moments, "
    "Megatron's precision-aware optimizer); all with an fp32 master.")]
Attention = Annotated[str | None, typer.Option(
    "--attention", help="Attention kernel: flash (the GPU's fused rate), flash2, cudnn, cudnn-fp8 / cudnn-mxfp8 (cuDNN "
    "on per-tensor fp8 or MXFP8 Q/K/V: Transformer Engine's fp8_dpa; with --dtype fp8 or fp4), flash3, triton "
    "(flash-attn's Triton kernel, llm-foundry's attn_impl triton) or unfused (default: the system's).")]
LocalBatch = Annotated[int | None, typer.Option(
    "--local-batch", min=1, max=MAX_BATCH, help="Sequences per data-parallel rank in one pipeline schedule, when "
    "gradient accumulation repeats whole schedules (torchtitan and NeMo AutoModel local_batch_size): each schedule "
    "pays its own fill and drain and gradient reduction. Default: one schedule per step (Megatron).")]
MtpLayers = Annotated[int, typer.Option(
    "--mtp-layers", min=0, max=MAX_MTP_LAYERS, help="Multi-token-prediction modules trained on the last pipeline "
    "stage (DeepSeek-V3 §2.2; Megatron-LM --mtp-num-layers): each adds a transformer layer, a 2h→h projection and "
    "another LM head pass with its loss. Default 0.")]
ExportOpt = Annotated[TrainFormat | None, typer.Option(
    "--export", help="Print the layout as launch settings instead of the tables: megatron (Megatron-LM "
    "arguments), deepspeed (config JSON) or torchtitan (TOML); with --output, write them to a file.")]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="File for --export (default: stdout).",
                                                dir_okay=False)]
HeadroomOpt = Annotated[str | None, typer.Option(
    "--memory-headroom", metavar="SIZE|PCT",
    help="GPU memory a plan leaves free for allocator fragmentation and memory spikes, as a size (8GiB) or a share "
    "of GPU memory (10%); default 10%. It comes on top of the framework memory (CUDA context, NCCL buffers, "
    "workspaces: 2 GiB) shown in the stage table.")]
StageLayersOpt = Annotated[str | None, typer.Option(
    "--stage-layers", help="Layers per pipeline rank, e.g. 7,8,8,7 (must sum to the model's layers).")]
StageRcOpt = Annotated[str | None, typer.Option(
    "--stage-recompute-layers", help="With --recompute full and --stage-layers: fully recomputed layers per rank.")]
RcModulesOpt = Annotated[str | None, typer.Option(
    "--recompute-modules", help="With --recompute selective: the modules recomputed in every layer, comma-separated "
    "(Megatron's --recompute-modules: core_attn, layernorm, mlp, moe_act, shared_experts, moe, mla_up_proj; default "
    "core_attn), or alone another framework's policy: torchtitan_op (torchtitan's per-op selective checkpointing) "
    "or maxtext_save_dot_except_mlpwi (MaxText's remat policy of that name).")]
UniformOpt = Annotated[bool, typer.Option(
    "--uniform-stages", help="Split layers evenly over pipeline stages with one recompute count (no per-stage "
    "optimisation; for comparison).")]
PlotOpt = Annotated[list[str] | None, typer.Option(
    "--plot", metavar="FILE", help="Write a plot (repeatable; .png, .svg, .pdf or .jpg, PNG without a suffix): the "
    "kind is --plot-kind, else KIND:FILE, else the name (memory*, pipeline*), else memory. memory = memory per "
    "stage against capacity, pipeline = one step's schedule. Needs the plot extra (matplotlib).")]
PlotKindOpt = Annotated[PlotKind | None, typer.Option(
    "--plot-kind", help="Kind of every --plot FILE without a KIND: prefix: memory or pipeline.")]


def parse_headroom(text: str | None, gpu_memory_bytes: float) -> dict[str, Any]:
    """``--memory-headroom``: ``10%`` (a share of GPU memory) or ``8GiB`` → TrainWorkload fields (none: default)."""
    from shardplan.errors import ShardplanError
    from shardplan.units import format_bytes, parse_size

    if text is None:
        return {}
    t = text.strip()
    if t.endswith("%"):
        try:
            pct = float(t[:-1])
        except ValueError:
            raise ShardplanError(f"'{text}' is not a size or a percentage (use e.g. 8GiB or 10%)",
                                 field="memory-headroom") from None
        if not 0 <= pct < 100:
            raise ShardplanError(f"must be between 0% and 100% (got {text})", field="memory-headroom")
        return {"memory_headroom_fraction": pct / 100}
    try:
        size = parse_size(t, field="memory-headroom")
    except ShardplanError:
        raise ShardplanError(f"'{text}' is not a size or a percentage (use e.g. 8GiB or 10%)",
                             field="memory-headroom") from None
    if size >= gpu_memory_bytes:
        raise ShardplanError(f"must be smaller than the GPU's memory ({format_bytes(gpu_memory_bytes)}; got {text})",
                             field="memory-headroom")
    return {"memory_headroom_bytes": size}


class CpComm(StrEnum):
    """How context parallelism exchanges K/V (``--cp-comm-type``; ``SoftwareSpec.cp_comm_type``)."""

    P2P = "p2p"
    ALL_GATHER = "all_gather"
    A2A = "a2a"


CpCommOpt = Annotated[CpComm | None, typer.Option(
    "--cp-comm-type", help="How context parallelism exchanges K/V, as Megatron-Core's --cp-comm-type runs it in "
    "Transformer Engine: p2p (a ring beside the attention kernels), all_gather (K/V gathered before attention, "
    "exposed; Llama 3's), a2a (all-to-alls of Q, K, V and O, exposed; cp must divide a TP rank's query and K/V "
    "heads). Default: the system's (software: cp_comm_type), p2p in the presets.")]


def with_cp_comm(system: Any, cp_comm: CpComm | None) -> Any:
    """``system`` with ``--cp-comm-type`` as its software's CP exchange, stated (the flag wins over the system file
    and a framework's defaults); unchanged when not given."""
    if cp_comm is None:
        return system
    software = system.software.model_copy(update={"cp_comm_type": str(cp_comm)})
    software._stated = system.software._stated | {"cp_comm_type"}
    return system.model_copy(update={"software": software})


def check_cp_comm(system: Any, framework: Any, export: Any) -> None:
    """An a2a exchange (``--cp-comm-type`` or the system file's) needs Transformer Engine's CP (Megatron):
    torchtitan's and NeMo AutoModel's CP is PyTorch's ``context_parallel``, which exchanges K/V by ring or
    all-gather only."""
    from shardplan.costmodel.training.frameworks import PYTORCH_CP
    from shardplan.errors import ShardplanError

    pytorch_cp = {str(x) for x in (framework, export) if x is not None} & set(PYTORCH_CP)
    if system.software.cp_comm_type == CpComm.A2A and pytorch_cp:
        raise ShardplanError(f"a2a is Transformer Engine's (Megatron's); {min(pytorch_cp)}'s context parallelism "
                             "exchanges K/V by p2p or all_gather", field="cp-comm-type")
