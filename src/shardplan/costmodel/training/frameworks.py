"""What each training framework can run: the layout knobs a plan may use when the user names the framework
(``--framework``). A plan outside them would be a layout the user's code cannot launch.

Sources, one line each (read at the commits the exporters cite):
- megatron: Megatron-LM / NeMo / Megatron-Bridge — TP, PP with interleaving, CP, EP, selective and full recompute;
  ZeRO-1 as the distributed optimizer, ZeRO-2/3 as Megatron-FSDP (``optim_grads`` / ``optim_grads_params``), which
  does not run under pipeline parallelism (the exporter refuses it).
- megatron-zero1: Megatron-Core before it ran any FSDP (PyTorch FSDP2 support came in Megatron-LM e1993fa6f7,
  2024-11-13; its own FSDP in d165a8548b, 2025-02-26): ZeRO-1 (the distributed optimizer) or none — NeMo containers
  up to 24.09, Megatron-Core r0.8. Used for validation records of those versions; not a CLI choice. Its pipeline
  stages hold equal layer counts (``stage_split``): uneven stages came in Megatron-LM fa8bb5921b (2024-09-05, first and
  last stage only, core_v0.9.0), with interleaving in ef490839e8 (2025-02-03, core_v0.11.0), any layout
  (``--pipeline-model-parallel-layout``, which the Megatron export writes) in 77732c3628 (2025-06-13, core_v0.13.0).
- torchtitan: FSDP2 (ZeRO-3, also under PP: ``fsdp_reshard_after_forward``), DDP (ZeRO-0), TP, PP with
  Interleaved1F1B, CP, EP; activation checkpointing none / selective (per op) / full; no ZeRO-1 or ZeRO-2
  (torchtitan/distributed/parallel_dims.py, config/job_config.py).
  Its TP is DTensor's and its pipeline torch's: blocking collectives and sends (``_TORCH_NATIVE``).
  Its selective activation checkpointing is op-level (``selective_ac_option = "op"``: ``knobs.RECOMPUTE_POLICIES``
  ``torchtitan_op``), not Megatron's module sets; the cost model prices that policy on attention + dense-MLP layers,
  so on other models a torchtitan plan recomputes everything or nothing. Its loss is F.cross_entropy on the logits
  upcast to fp32 (train.py l.131-134 at 9dec370; components/loss.py at b5bcd76): ``SoftwareSpec.loss_memory``.
- automodel: NeMo AutoModel (FSDP2 always, DTensor TP, CP, torch PP with interleaving; ``activation_checkpointing``
  a whole-block ``checkpoint_wrapper``, on or off: components/distributed/parallelizer.py at
  NVIDIA-NeMo/Automodel@79d0ccf; blocking DTensor TP and torch pipeline sends: ``_TORCH_NATIVE``). Its MoE
  parallelizer (components/moe/parallelizer.py ``parallelize_model``) asserts TP 1 and CP 1: ``automodel-moe``,
  which ``caps_for`` picks for an MoE model. Its pipeline splits uniformly (``layers_per_stage``) and checkpoints
  every block or none: no per-rank recompute counts or splits.
- fsdp: PyTorch FSDP1 as llm-foundry (Composer) and HF Accelerate drive it — data parallelism only, sharding
  NO_SHARD (ZeRO-0), SHARD_GRAD_OP (ZeRO-2) or FULL_SHARD (ZeRO-3), activation checkpointing of whole blocks, all
  or some, or none (llm-foundry scripts/train/benchmarking/submit_benchmarks.py: fsdp_config sharding_strategy,
  activation_checkpointing; llmfoundry/models/utils/act_ckpt.py at 8c8dd48: target blocks "first-n", "range-i-j").
  Its ZeRO-2 is priced as Composer runs SHARD_GRAD_OP, no microbatch under ``no_sync``, so every forward gathers the
  weights (``FrameworkCaps.software``); HF Accelerate's accumulation uses ``no_sync``, which keeps them gathered. Its
  backward prefetch is Composer's default, BACKWARD_POST (Composer ``FSDPConfig``; llm-foundry's benchmark yamls,
  e.g. scripts/train/yamls/pretrain/mpt-7b.yaml, do not set it); HF Accelerate's is BACKWARD_PRE.
- One full-recompute count on every pipeline rank (``one_recompute_count``): Megatron-LM's ``--recompute-method block
  --recompute-num-layers N`` recomputes N layers "within each pipeline stage", one N for every rank
  (megatron/core/transformer/transformer_config.py ``recompute_num_layers`` at d98e8a6); torchtitan wraps every
  block, or every N-th by a counter over the blocks a rank builds (``activation_checkpoint``), about n_i/N of a
  rank's n_i: one rule for all ranks, which the one-count model approximates (equal on even splits, within a layer
  of it on uneven ones). A per-rank count (rank 0 alone recomputing) is a plan neither can launch, so with them the
  per-stage search keeps one count (as ``--export``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from shardplan.costmodel.core.layouts import layer_kind_names
from shardplan.costmodel.training.layout import Recompute
from shardplan.errors import ShardplanError
from shardplan.hardware.software import AttentionKernel
from shardplan.models.kinds import Mixer

if TYPE_CHECKING:
    from shardplan.hardware.spec import SystemSpec
    from shardplan.models.spec import ModelSpec


@dataclass(frozen=True)
class FrameworkCaps:
    """The knobs a framework can set; a False degree means that degree stays 1."""

    name: str
    zero_stages: tuple[int, ...]
    recompute: tuple[Recompute, ...]
    tp: bool = True
    pp: bool = True
    interleave: bool = True
    cp: bool = True
    ep: bool = True
    zero3_with_pp: bool = True
    selective_policy: str | None = None  # its selective recompute (``knobs.RECOMPUTE_POLICIES``); None: Megatron's
    partial_recompute: bool = True  # False: every block or none (no per-rank counts, uniform pipeline splits)
    one_recompute_count: bool = False  # True: one full-recompute count on every pipeline rank (no per-rank counts)
    stage_split: bool = True  # False: pipeline stages of equal layer counts only (no per-stage search)
    software: tuple[tuple[str, object], ...] = ()  # ``SoftwareSpec`` fields the framework fixes (``framework_system``)

    def refuses(self, knob: str, value: object) -> bool:
        """Whether a pinned ``value`` of ``knob`` (a layout flag's name) is outside this framework."""
        if knob in ("tp", "pp", "interleave", "cp", "ep"):
            return isinstance(value, int) and value > 1 and not getattr(self, knob)
        if knob == "zero":
            return value is not None and value not in self.zero_stages
        if knob == "recompute":
            return value is not None and Recompute(value) not in self.recompute
        return False

    def check(self, **knobs: object) -> None:
        """Bad input (one line naming the knob) when a pinned knob is outside this framework."""
        for knob, value in knobs.items():
            if self.refuses(knob, value):
                raise ShardplanError(f"{self.name} cannot run {knob} {value}: change --{knob} or drop --framework (it "
                                     f"runs zero {'/'.join(map(str, self.zero_stages))}, recompute "
                                     f"{'/'.join(str(r) for r in self.recompute)})", field=knob)

    def check_recompute(self, modules: tuple[str, ...] | None, layers: int | None) -> None:
        """Bad input for a selective module set other than the framework's own policy, or a partial recompute
        count where it checkpoints every block or none."""
        if self.selective_policy is not None and modules is not None and modules != (self.selective_policy,):
            raise ShardplanError(f"{self.name}'s selective recompute is its own policy, {self.selective_policy}: "
                                 f"drop --recompute-modules or name it alone", field="recompute_modules")
        if layers is not None and not self.partial_recompute:
            raise ShardplanError(f"{self.name} checkpoints every block or none: drop --recompute-layers",
                                 field="recompute-layers")


# Outside Megatron the fp8 recipes keep 16-bit weights and gather them (torchtitan's enable_fsdp_float8_all_gather is
# off by default; PyTorch FSDP and AutoModel gather the module's parameters): SoftwareSpec.fp8_param_gather off. Their
# losses are their own (``loss_memory``, the ``elementwise_kernels`` row), not Megatron's cross-entropy fusions. Nor do
# they keep a step's quantized weights across its microbatches: torchao's Float8Linear casts the weight in every
# forward, and Transformer Engine's layers under FSDP2 skip the cache (TE d0067d0 module/linear.py l.1958,
# layernorm_linear.py l.1763, layernorm_mlp.py l.2371-2375 ``is_fsdp2``): SoftwareSpec.fp8_weight_cache off.
_BF16_GATHERS: tuple[tuple[str, object], ...] = (("fp8_param_gather", False), ("cross_entropy_fusion", "native"),
                                                 ("fp8_weight_cache", False))
# DTensor TP runs its sequence-parallel all-gathers and reduce-scatters as blocking functional collectives: the GEMM
# that reads the gathered input waits for it, nothing else is queued beside it. Only async TP (inductor's
# micro-pipelined TP under torch.compile) overlaps them, and both stacks default it off: torchtitan b5bcd76
# torchtitan/config/configs.py l.298 ``enable_async_tensor_parallel: bool = False`` (it requires compile, l.307-313);
# NeMo AutoModel 36044ad nemo_automodel/components/distributed/config.py l.319 ``enable_async_tensor_parallel: bool =
# False`` (its docstring, l.283-287: it overlaps the row-parallel reduce-scatters).
# torchtitan's Llama 3 70B recipe keeps that default; its 405B recipe turns compile and async TP on
# (models/llama3/config_registry.py l.305-308): a plan for it wants a system file's ``tp_comm_overlap``.
# SoftwareSpec.tp_comm_overlap 0: no TP communication hidden. Their pipelines (torch.distributed.pipelining) have no
# counterpart of Megatron's overlap_p2p_comm either (validation.stacks.stack_p2p_overlap): SoftwareSpec.overlap_p2p_comm
# off. Both, with the 16-bit gathers, are what the PyTorch-native stacks share. DTensor's colwise linear saves the
# all-gathered input for its weight gradient (autograd keeps F.linear's input), so nothing is gathered again in
# backward: SoftwareSpec.sp_input_regather off; an MLA layer's input is gathered whole before its down projections
# (torchtitan deepseek_v3 sharding: the attention input to Replicate): SoftwareSpec.mla_local_down off.
_TORCH_NATIVE: tuple[tuple[str, object], ...] = (*_BF16_GATHERS, ("tp_comm_overlap", 0.0),
                                                  ("overlap_p2p_comm", False), ("sp_input_regather", False),
                                                  ("mla_local_down", False))
# Each stack's fused attention (``framework_system`` sets it where the GPU has that kernel's measured curves, else a
# generic fused kernel in place of the A100 preset's unfused softmax of Selene 2021). torchtitan's language models run
# FlexAttention (b5bcd76 torchtitan/models/llama3/__init__.py l.371 ``attn_backend="flex"``; models/common/
# config_utils.py l.71-101 refuses SDPA for them), which the model has no curves for: FlashAttention-2's, the nearest.
# NeMo AutoModel's dense models run PyTorch SDPA (its Llama 3.1 70B benchmark yaml, examples/llm_benchmark/llama3_3/
# custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml l.52 ``attn_implementation: sdpa  # required for cp>1``), with
# FlashAttention-2 first under CP or activation checkpointing (36044ad nemo_automodel/_transformers/model_init.py
# l.1637-1644); its own MoE models Transformer Engine's (36044ad nemo_automodel/components/models/
# common/utils.py ``BackendConfig.attn`` l.327: "te"), cuDNN's. llm-foundry runs flash-attn 2 (8c8dd48 llmfoundry/
# models/utils/config_defaults.py l.12 ``attn_impl: 'flash'``).
_CUDNN, _FLASH2 = ("attention", AttentionKernel.CUDNN), ("attention", AttentionKernel.FLASH2)
# PyTorch's non-reentrant checkpoint stops its rerun early (``SoftwareSpec.recompute_early_stop``; torch
# utils/checkpoint.py ``_enable_checkpoint_early_stop = True`` in 2.1-2.7). NeMo AutoModel wraps blocks in it
# (36044ad components/distributed/activation_checkpointing.py l.655-660 CheckpointImpl.NO_REENTRANT); its MoE models'
# dense MLPs are Transformer Engine linears (components/models/common/utils.py ``BackendConfig.linear`` "te" where TE
# is installed), which save after their GEMM, so nothing stops before FC2 there: not set for automodel-moe. So do
# llm-foundry's yamls under Composer (8c8dd48 scripts/train/
# yamls/pretrain/mpt-*.yaml l.95 ``activation_checkpointing_reentrant: false``; Composer v0.32.1
# dist_strategy.py l.537-540 NO_REENTRANT). torchtitan turned it off (b5bcd76 distributed/activation_checkpoint.py
# l.176-182 ``early_stop=False``, since 25413d224, 2025-08-29, against a memory leak under EP): its records from
# before state it themselves.
_EARLY_STOP = ("recompute_early_stop", True)
# NeMo AutoModel's MoE backend dispatches with DeepEP wherever DeepEP is installed, as in NVIDIA's containers
# (``BackendConfig.dispatcher``, l.338-343).
_AUTOMODEL: tuple[tuple[str, object], ...] = (*_TORCH_NATIVE, _FLASH2, ("ep_dispatcher", "deepep"), _EARLY_STOP)
_AUTOMODEL_MOE: tuple[tuple[str, object], ...] = (*_TORCH_NATIVE, _CUDNN, ("ep_dispatcher", "deepep"))

FRAMEWORKS: dict[str, FrameworkCaps] = {
    "megatron": FrameworkCaps("megatron", (0, 1, 2, 3), tuple(Recompute), zero3_with_pp=False,
                              one_recompute_count=True),
    "megatron-zero1": FrameworkCaps("megatron-zero1", (0, 1), tuple(Recompute), zero3_with_pp=False,
                                    one_recompute_count=True, stage_split=False),
    "torchtitan": FrameworkCaps("torchtitan", (0, 3), tuple(Recompute), selective_policy="torchtitan_op",
                                one_recompute_count=True,
                                software=(*_TORCH_NATIVE, _FLASH2, ("loss_memory", "torch_fp32"))),
    "automodel": FrameworkCaps("automodel", (3,), (Recompute.NONE, Recompute.FULL), partial_recompute=False,
                               software=_AUTOMODEL),
    "automodel-moe": FrameworkCaps("automodel (MoE models)", (3,), (Recompute.NONE, Recompute.FULL), tp=False,
                                   cp=False, partial_recompute=False, software=_AUTOMODEL_MOE),
    "fsdp": FrameworkCaps("fsdp", (0, 2, 3), (Recompute.NONE, Recompute.FULL), tp=False, pp=False,
                          interleave=False, cp=False, ep=False,
                          software=(("zero2_gather_per_forward", True), ("fsdp_backward_prefetch", "post"),
                                    *_BF16_GATHERS, _FLASH2, _EARLY_STOP)),
}


# Context parallelism on sliding windows and attention sinks (TransformerEngine@d0067d0 transformer_engine/pytorch/
# attention/dot_product_attention/context_parallel.py l.5054-5066, ``attn_forward_func_with_cp``, every backend; the
# same asserts at v2.8): a sliding window needs cp_comm_type a2a or all_gather, a softmax other than vanilla (gpt-oss's
# learned sinks) a2a and FusedAttention. Megatron-Bridge's gpt-oss and Gemma 3 recipes set a2a (Megatron-Bridge@067f987
# recipes/gpt_oss/h100/gpt_oss.py l.70, recipes/gemma3_vl/h100/gemma3_vl.py l.62). PyTorch's context_parallel
# (torchtitan, AutoModel) rotates K/V around SDPA's causal kernels, which take neither a window nor sinks.
CP_A2A_SOURCE = "Transformer Engine's attn_forward_func_with_cp"
PYTORCH_CP = ("torchtitan", "automodel")  # stacks whose CP is PyTorch's context_parallel (no a2a, no windows or sinks)


def cp_blocker(model: ModelSpec, cp_comm_type: str, *, pytorch: bool = False) -> str | None:
    """Why context parallelism cannot run ``model``'s attention under ``cp_comm_type`` (``CP_A2A_SOURCE``), or under
    PyTorch's context_parallel (``pytorch``: torchtitan, AutoModel) at all, or None."""
    windows = bool(model.mixer_counts().get(Mixer.SLIDING, 0))
    if pytorch and (windows or model.attention_sinks):
        return (f"{model.name}'s {'attention sinks' if model.attention_sinks else 'sliding-window layers'} do not run "
                "under PyTorch's context_parallel (torchtitan, AutoModel), which rotates K/V around SDPA's causal "
                "kernels")
    if model.attention_sinks and cp_comm_type != "a2a":
        return (f"{model.name}'s attention sinks run under context parallelism only with cp_comm_type a2a "
                f"({CP_A2A_SOURCE}; got {cp_comm_type})")
    if cp_comm_type == "p2p" and windows:
        return (f"{model.name}'s sliding-window layers run under context parallelism only with cp_comm_type a2a or "
                f"all_gather ({CP_A2A_SOURCE}; got p2p)")
    return None


def framework_system(system: SystemSpec, name: str | None, model: ModelSpec | None = None, *,
                     pytorch_cp: bool = False) -> SystemSpec:
    """``system`` with the software behaviour framework ``name`` fixes (PyTorch FSDP's SHARD_GRAD_OP gathers the
    weights in every forward; AutoModel's MoE parallelizer for an MoE ``model``), except the fields the user's system
    file states (a torchtitan recipe that turns async TP on: ``software.tp_comm_overlap``). A framework's attention
    kernel applies where the GPU has its measured curves; elsewhere a fused kernel (``AttentionKernel.FLASH``, at the
    GPU's scalar efficiency) replaces an unfused preset's and any other preset kernel stays. Transformer Engine's
    stacks (Megatron, or none named) exchange K/V by a2a where the system's unstated exchange cannot run the model's
    sliding windows or sinks (``cp_blocker``), unless the plan's CP is PyTorch's (``pytorch_cp``: a torchtitan
    export). Unchanged without a framework or for one that fixes none."""
    if name in (None, "megatron") and not pytorch_cp and model is not None \
            and "cp_comm_type" not in system.software._stated \
            and cp_blocker(model, system.software.cp_comm_type) is not None:
        # the exchange Transformer Engine runs for these layers, as Megatron-Bridge's recipes set it (CP_A2A_SOURCE)
        software = system.software.model_copy(update={"cp_comm_type": "a2a"})
        software._stated = system.software._stated
        system = system.model_copy(update={"software": software})
    key = "automodel-moe" if name == "automodel" and model is not None and model.moe is not None else name or ""
    caps = FRAMEWORKS.get(key)
    if caps is None or not caps.software:
        return system
    stated = system.software._stated
    fixed = {k: v for k, v in caps.software if k not in stated}
    kernel = fixed.get("attention")
    if kernel is not None and not any(c.kernel == kernel for c in system.gpu.attention_curves):
        preset = system.software.attention
        fixed["attention"] = AttentionKernel.FLASH if preset == AttentionKernel.UNFUSED else preset
    software = type(system.software).model_validate({**system.software.model_dump(), **fixed})
    software._stated = stated
    return system.model_copy(update={"software": software})


def caps_for(name: str, model: ModelSpec) -> FrameworkCaps:
    """The knobs framework ``name`` can run on ``model``: AutoModel's MoE parallelizer for an MoE model; a
    framework whose selective recompute is its own policy keeps selective only where that policy is priced (bad
    input for an unknown name: one line naming the choices)."""
    if name not in FRAMEWORKS:
        raise ShardplanError(f"framework must be one of {', '.join(FRAMEWORKS)} (got {name!r})", field="framework")
    caps = FRAMEWORKS["automodel-moe" if name == "automodel" and model.moe is not None else name]
    if caps.selective_policy is not None and not policy_priced(model):
        caps = replace(caps, recompute=tuple(r for r in caps.recompute if r != Recompute.SELECTIVE))
    return caps


def policy_priced(model: ModelSpec) -> bool:
    """Whether the cost model prices a whole-layer recompute policy (``knobs.RECOMPUTE_POLICIES``) on ``model``:
    attention layers with dense MLPs, no MoE, MLA or recurrent layers (``recompute_modules``' policy terms)."""
    return model.mla is None and not set(layer_kind_names(model)) - {"attention", "sliding", "chunked", "mlp"}
