"""Shared parts of the exporters: what they read (``TrainTarget``), what they return (``Export``), headers."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardplan.errors import ShardplanError

if TYPE_CHECKING:
    from shardplan.costmodel.training.report import TrainPlanOut
    from shardplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainTarget:
    """What a training exporter reads: the chosen layout and what the user fixed (model, sequence, datatypes)."""

    plan: TrainPlanOut
    model: ModelSpec
    seq_len: int
    num_gpus: int
    gpus_per_node: int
    hardware: str = ""
    dtype: str = "bf16"
    """Compute datatype: bf16, fp16, fp8 (fp8 GEMMs with bf16 elsewhere) or fp32."""
    grad_dtype: str = "fp32"
    """Gradient accumulation and reduction datatype."""
    attention: str = "flash"
    """Core-attention kernel the cost model assumed (AttentionKernel: flash, flash2, flash3, cudnn, cudnn-fp8,
    cudnn-mxfp8, triton, unfused)."""
    dropout: bool = False
    """Whether the cost model kept dropout (GPT/OPT/BLOOM families by default)."""
    overlap_grad_reduce: bool = True
    ddp_bucket_params: int | None = None
    """Parameters per gradient bucket the cost model priced (SoftwareSpec.ddp_bucket_params); None: Megatron's
    default."""
    cross_entropy_fusion: str = "native"
    """Which fused cross entropy the cost model priced (SoftwareSpec.cross_entropy_fusion): native or te."""
    ep_dispatcher: str = "alltoall"
    """How the cost model moved MoE tokens (SoftwareSpec.ep_dispatcher): alltoall, or deepep (DeepEP/HybridEP)."""
    ep_comm_overlap: bool = False
    """Whether the cost model hid the EP all-to-all behind another microbatch (Megatron's combined 1F1B)."""
    ep_delay_wgrad: bool = False
    """Whether the experts' weight gradients waited past the backward dispatch (Megatron's --delay-wgrad-compute)."""
    moe_drop_and_pad: bool = False
    """Whether the cost model dropped and padded MoE tokens to a capacity (SoftwareSpec.moe_drop_and_pad)."""
    moe_router_padding: bool = False
    """Whether the router padded expert token counts to the fp8/fp4 alignment (SoftwareSpec.moe_router_padding)."""
    eager_kernels: bool = False
    """Whether the cost model priced eager PyTorch elementwise kernels (SoftwareSpec.elementwise_kernels or
    norm_kernel not fused): a torchtitan export then leaves torch.compile off, as costed."""
    overlap_p2p_comm: bool = True
    """Whether the cost model priced interleaved pipeline sends beside compute (SoftwareSpec.overlap_p2p_comm)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules the cost model priced (TrainWorkload.mtp_layers)."""
    optimizer: str = "adam"
    """The optimizer whose state the cost model held (TrainWorkload.optimizer)."""
    fp8_param_gather: bool = True
    """Whether the cost model gathered fp8 weights (1 B a parameter) under fp8 (SoftwareSpec.fp8_param_gather)."""
    fp8_attention_recipe: str | None = None
    """The Transformer Engine recipe fp8 attention runs under on this GPU (``fp8_attention_recipe``), if priced."""
    tp_userbuffers: bool = False
    """Whether the cost model hid the sequence-parallel TP collectives with Transformer Engine's userbuffers
    (``costmodel.training.userbuffers``: tp_comm_overlap on, method userbuffers, not MLA or NVFP4)."""
    tp_overlap_rs: str = "pipeline"
    """How those userbuffers reduce-scatter after the output projection and FC2 (SoftwareSpec.tp_overlap_rs)."""

    @property
    def cp_comm_type(self) -> str:
        """How the plan was priced exchanging K/V under context parallelism (``plan.cp_comm_type``; p2p, Megatron's
        default, when the plan does not say)."""
        return self.plan.cp_comm_type or "p2p"

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.gpus_per_node))


@dataclass(frozen=True, slots=True)
class Export:
    """An exported file: its text, and caveats for the user (printed on stderr by the CLI)."""

    text: str
    notes: tuple[str, ...] = ()


def train_target(plan: TrainPlanOut | None, *, model: ModelSpec, system: Any, num_gpus: int, workload: Any,
                 ) -> TrainTarget:
    """A ``TrainTarget`` from a plan's layout plus the request's model, system (``SystemSpec``) and workload."""
    from shardplan.costmodel.training.ctx import DROPOUT_FAMILIES
    from shardplan.costmodel.training.userbuffers import ub_blocked

    if plan is None:
        raise ShardplanError("nothing to export: no layout fits", field="export")
    sw = system.software
    return TrainTarget(
        plan=plan, model=model, seq_len=workload.seq_len, num_gpus=num_gpus,
        gpus_per_node=system.gpus_per_tray or system.gpus_per_node,  # processes per host: an NVL72 tray has 4
        hardware=system.name, dtype=workload.dtype, grad_dtype=workload.grad_dtype,
        attention=str(workload.attention or sw.attention),
        dropout=workload.dropout if workload.dropout is not None else model.family in DROPOUT_FAMILIES,
        overlap_grad_reduce=workload.overlap_grad_reduce if workload.overlap_grad_reduce is not None
        else sw.overlap_grad_reduce, ddp_bucket_params=sw.ddp_bucket_params,
        cross_entropy_fusion=str(sw.cross_entropy_fusion), ep_dispatcher=str(sw.ep_dispatcher),
        ep_comm_overlap=bool(sw.ep_comm_overlap),
        ep_delay_wgrad=bool(sw.ep_delay_wgrad),
        moe_drop_and_pad=bool(sw.moe_drop_and_pad), moe_router_padding=bool(sw.moe_router_padding),
        eager_kernels=sw.elementwise_kernels != "fused" or sw.norm_kernel != "fused",
        overlap_p2p_comm=bool(sw.overlap_p2p_comm), mtp_layers=workload.mtp_layers,
        optimizer=workload.optimizer, fp8_param_gather=bool(sw.fp8_param_gather),
        fp8_attention_recipe=fp8_attention_recipe(system.gpu, str(workload.attention or sw.attention)),
        tp_userbuffers=bool(sw.tp_comm_overlap) and sw.tp_overlap_method == "userbuffers"
        and not ub_blocked(model, workload.dtype, sw), tp_overlap_rs=str(sw.tp_overlap_rs),
    )


def fp8_attention_recipe(gpu: Any, attention: str) -> str | None:
    """The NVTE_DPA_FP8_RECIPE under which Transformer Engine runs the fp8 attention a plan priced: MXFP8BlockScaling
    for ``cudnn-mxfp8``; for ``cudnn-fp8`` Float8CurrentScaling on Blackwell, DelayedScaling on Hopper, where TE turns
    its fused kernel off for current scaling below sm100 (TransformerEngine v2.16 dot_product_attention/utils.py
    l.576-578)."""
    from shardplan.costmodel.core.kernels import fp8_attention_reference

    if attention == "cudnn-mxfp8":
        return "MXFP8BlockScaling"
    if attention != "cudnn-fp8":
        return None
    return "Float8CurrentScaling" if fp8_attention_reference(gpu, attention) in ("gb200", "gb300") else "DelayedScaling"


def fp8_attention_note(t: TrainTarget, tool: str) -> str | None:
    """What a framework that does not run cuDNN's fp8 attention must be told of a plan priced with it."""
    if t.attention not in ("cudnn-fp8", "cudnn-mxfp8"):
        return None
    return (f"the plan priced attention as cuDNN's on fp8 Q/K/V (Transformer Engine fp8_dpa); {tool} attends in "
            "16 bit, slower than planned: re-plan with --attention cudnn")


def recompute_kind(p: TrainPlanOut) -> str:
    """The plan's recompute as a framework sees it: ``full`` of 0 layers per stage (a per-stage plan whose one
    recompute count is 0) recomputes nothing, and exports as ``none``."""
    return "none" if p.recompute == "full" and p.recompute_layers == 0 else str(p.recompute)


def layout_summary(p: TrainPlanOut) -> str:
    """One line: degrees, microbatching, memory savers (for file headers)."""
    parts = [f"TP={p.tp} PP={p.pp} DP={p.dp} CP={p.cp}" + (f" EP={p.ep}" if p.ep > 1 else "")]
    parts.append(f"{p.num_microbatches} microbatches of {p.microbatch_size} (global batch {p.global_batch})")
    if p.interleave > 1:
        parts.append(f"{p.interleave} chunks per stage")
    parts.append(f"ZeRO-{p.zero_stage}")
    if p.sequence_parallel:
        parts.append("sequence parallel")
    rc = recompute_kind(p) + (f" ({p.recompute_layers} layers/stage)" if p.recompute_layers else "")
    parts.append(f"recompute {rc}")
    off = [f"{name} {frac:.0%}" for name, frac in
           (("optimizer", p.offload.optimizer), ("weights", p.offload.weights), ("activations", p.offload.activations))
           if frac > 0]
    if off:
        parts.append("CPU offload: " + ", ".join(off))
    return ", ".join(parts)


def torchrun_line(t: TrainTarget, script: str) -> str:
    """The ``torchrun`` launcher prefix for the target's GPU count (the same line on every node)."""
    per_node = min(t.num_gpus, t.gpus_per_node)
    if t.num_nodes == 1:
        return f"torchrun --nproc-per-node {per_node} {script}"
    return (f"torchrun --nnodes {t.num_nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint $MASTER_ADDR:29500 {script}")


def shell_join(argv: list[str]) -> str:
    """``argv`` as one shell command, each word quoted, each ``--option`` (and its values) on its own line."""
    lines: list[list[str]] = [[]]
    for word in argv:
        if word.startswith("--"):
            lines.append([])
        lines[-1].append(shlex.quote(word))
    return " \\\n  ".join(" ".join(line) for line in lines if line)


# The other frameworks' whole-layer recompute policies (costmodel.training.knobs.RECOMPUTE_POLICIES) and the
# framework whose own setting each one is.
POLICY_FRAMEWORK = {"torchtitan_op": "torchtitan", "maxtext_save_dot_except_mlpwi": "MaxText"}


def refuse_module_set(t: TrainTarget, framework: str) -> None:
    """A plan costed with a Megatron ``--recompute-modules`` set other than core_attn, or another framework's
    recompute policy, cannot be written for a framework without that knob: one line naming the field and the way
    out."""
    mods = t.plan.recompute_modules
    if t.plan.recompute != "selective" or mods is None:
        return
    policy = next((m for m in mods if m in POLICY_FRAMEWORK), None)
    if policy is not None and POLICY_FRAMEWORK[policy] != framework:
        raise ShardplanError(f"{framework} cannot express {policy} ({POLICY_FRAMEWORK[policy]}'s selective recompute "
                             "policy); pin --recompute-modules core_attn, or another recompute",
                             field="recompute_modules")
    if policy is None and list(mods) != ["core_attn"]:
        raise ShardplanError(f"{framework} has no --recompute-modules: the plan recomputes {'+'.join(mods)}; use "
                             "--export megatron, or pin --recompute-modules core_attn", field="recompute_modules")

