"""Which training layouts are valid, and the candidate space the planner chooses from.

Each rule lives here once, with its reason. ``validate_layout`` turns a broken pinned layout into a
one-line error naming the field and what is allowed; ``enumerate_layouts`` generates every valid
layout of a request as numpy columns and counts what each rule pruned.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from shardplan.costmodel.core.layouts import divisors, fmt_values
from shardplan.costmodel.training.cp_rules import a2a_heads_ok, chunked_cp_ok, recurrent_cp_ok
from shardplan.costmodel.training.frameworks import FrameworkCaps, policy_priced
from shardplan.costmodel.training.knobs import RECOMPUTE_MODULES, RECOMPUTE_POLICIES, modules_mask
from shardplan.costmodel.training.layout import RECOMPUTE_CODE, LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import GpuSpec
from shardplan.models.spec import ModelSpec

# Interleave counts above ``SpaceRequest.max_interleave`` are searched where they split every rank's layers into equal
# model chunks (pipeline_sim: no schedule loss), up to this many: NVIDIA's tuned recipes run v = 12 (GPT-3 175B on PP 8,
# MLPerf v3.0; Nemotron-4 340B), 20 (Llama 2 70B on PP 4, NeMo 24.07) and 24 (Qwen3-30B-A3B on PP 2, Megatron-Bridge
# 25.09): records of ``shardplan validate``.
EQUAL_CHUNKS_MAX_INTERLEAVE = 24


def valid_tp(model: ModelSpec) -> list[int]:
    """TP must divide the attention heads and the KV heads (Megatron shards whole query groups), and a Mamba-2
    layer's heads and B/C groups or a Gated DeltaNet layer's key and value heads (Megatron-LM d98e8a6
    ssm/mamba_mixer.py l.270; gated_delta_net/gdn.py, its heads per TP rank)."""
    kv = model.num_heads if model.mla else model.kv_heads
    s, la = model.mamba, model.linear_attention
    rec = [s.num_heads, s.n_groups] if s is not None else []
    rec += [la.num_key_heads, la.num_value_heads] if la is not None else []
    return [t for t in divisors(model.num_heads) if kv % t == 0 and all(n % t == 0 for n in rec)]


def check_dtype(work: TrainWorkload, gpu: GpuSpec) -> None:
    """NVFP4 training GEMMs need FP4 tensor cores (Blackwell: the GPU preset has an fp4 peak)."""
    if work.dtype == "fp4" and "fp4" not in gpu.peak_flops:
        raise ShardplanError(f"fp4 GEMMs need FP4 tensor cores; {gpu.name} has none (B200, GB200, B300, GB300 do): "
                             "use bf16 or fp8", field="dtype")


# ZeRO with pipeline parallelism. DeepSpeed's pipeline engine rejects ZeRO-2/3 (runtime/pipe/engine.py: "ZeRO-2
# and ZeRO-3 are incompatible with pipeline parallelism"); Megatron-FSDP has no pipeline support (Megatron-LM
# d98e8a6 megatron/core/distributed/fsdp/mcore_fsdp_adapter.py: MFSDP v2 raises on pipeline_model_parallel_size
# != 1; v1 has no PP test or documentation). torchtitan runs FSDP2 under PP (pytorch/torchtitan@b5bcd76
# torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy: "default" → not pp_enabled, so weights
# stay gathered across microbatches): that is the ZeRO-3 row with pp > 1. ZeRO-2 with PP would be the same
# runtime (FSDP2 without resharding after forward), so only ZeRO-3 represents it.
ZERO2_PP = ("ZeRO-2 cannot run with pipeline parallelism: DeepSpeed rejects it, and FSDP under PP (torchtitan) is "
            "--zero 3; use zero 0, 1 or 3, or pp = 1")


def check_modules(model: ModelSpec, modules: tuple[str, ...]) -> None:
    """A selective recompute module set must name Megatron's modules that this model has, each once, or one other
    framework's whole-layer policy alone (dense attention layers with a dense MLP, no MLA)."""
    policies = [n for n in modules if n in RECOMPUTE_POLICIES]
    if policies and len(set(modules)) > 1:
        raise ShardplanError(f"{policies[0]} is a whole-layer recompute policy: name it alone; got {','.join(modules)}",
                             field="recompute_modules")
    if policies and not policy_priced(model):
        raise ShardplanError(f"{policies[0]} needs a model of attention layers with dense MLPs (no MoE, MLA or "
                             f"recurrent layers); {model.name} has other layers", field="recompute_modules")
    bad = [n for n in modules if n not in RECOMPUTE_MODULES]
    moe_only = [n for n in modules if (n in ("moe_act", "shared_experts", "moe") and model.moe is None)
                or (n == "mla_up_proj" and model.mla is None)]
    if "moe" in modules and {"moe_act", "shared_experts"} & set(modules):
        raise ShardplanError("moe recomputes the whole MoE MLP: drop moe_act and shared_experts with it",
                             field="recompute_modules")
    if bad or moe_only or not modules:
        raise ShardplanError(f"must be a non-empty set of {', '.join(RECOMPUTE_MODULES)} (moe_act, shared_experts and "
                             f"moe need an MoE model, mla_up_proj an MLA model); got {','.join(modules)}",
                             field="recompute_modules")


def validate_layout(model: ModelSpec, num_gpus: int, work: TrainWorkload, lay: TrainLayout) -> None:
    """Raise ``ShardplanError`` naming the first rule the pinned layout breaks."""
    for name in ("tp", "pp", "dp", "ep", "cp", "microbatch", "interleave"):
        if getattr(lay, name) < 1:
            raise ShardplanError(f"must be ≥ 1 (got {getattr(lay, name)})", field=name)
    if lay.num_gpus != num_gpus:
        raise ShardplanError(
            f"tp·pp·dp·cp = {lay.tp}·{lay.pp}·{lay.dp}·{lay.cp} = {lay.num_gpus} must equal --gpus ({num_gpus})",
            field="dp")
    tps = valid_tp(model)
    if lay.tp not in tps:
        raise ShardplanError(f"tp ({lay.tp}) must divide num_heads ({model.num_heads}) and num_kv_heads "
                             f"({model.kv_heads}); allowed: {fmt_values(tps)}", field="tp")
    if lay.pp > model.num_layers:
        raise ShardplanError(f"pp ({lay.pp}) must be ≤ num_layers ({model.num_layers})", field="pp")
    if lay.interleave > 1:
        if lay.pp == 1:
            raise ShardplanError("interleave > 1 needs pp > 1", field="interleave")
        if lay.pp * lay.interleave > model.num_layers:
            raise ShardplanError(f"pp·interleave ({lay.pp}·{lay.interleave}) must be ≤ num_layers "
                                 f"({model.num_layers}): every model chunk needs a layer", field="interleave")
    per_replica = lay.dp * lay.microbatch
    if work.global_batch % per_replica:
        raise ShardplanError(f"global batch ({work.global_batch}) must be divisible by dp·microbatch "
                             f"({lay.dp}·{lay.microbatch} = {per_replica})", field="microbatch")
    m = work.global_batch // per_replica
    if work.local_batch:
        per_rank = work.global_batch // lay.dp
        if per_rank % work.local_batch or work.local_batch % lay.microbatch:
            raise ShardplanError(f"local batch ({work.local_batch}) must divide the sequences per dp rank, global "
                                 f"batch/dp = {per_rank}, and be a multiple of microbatch ({lay.microbatch})",
                                 field="local-batch")
        if lay.pp == 1 and lay.microbatch != work.local_batch:
            raise ShardplanError(f"without PP the local batch is the microbatch: give --microbatch "
                                 f"{work.local_batch} (got {lay.microbatch})", field="local-batch")
        m = work.local_batch // lay.microbatch  # microbatches per schedule
    if lay.interleave > 1 and m % lay.pp:
        raise ShardplanError(f"interleave > 1 needs the microbatches per schedule, {m}, to be a multiple of pp "
                             f"({lay.pp}): Megatron-Core's interleaved schedule runs them in groups of pp",
                             field="interleave")
    if lay.ep > 1:
        if model.moe is None:
            raise ShardplanError(f"ep ({lay.ep}) needs a mixture-of-experts model; {model.name} is dense", field="ep")
        if model.moe.num_experts % lay.ep:
            raise ShardplanError(f"ep ({lay.ep}) must divide num_experts ({model.moe.num_experts}); allowed: "
                                 f"{fmt_values(divisors(model.moe.num_experts))}", field="ep")
    if lay.etp is not None:
        if lay.etp < 1:
            raise ShardplanError(f"must be ≥ 1 (got {lay.etp})", field="etp")
        if model.moe is None and lay.etp != lay.tp:
            raise ShardplanError(f"etp ({lay.etp}) needs a mixture-of-experts model; {model.name} is dense",
                                 field="etp")
    if model.moe is not None:
        # MoE parallel folding (Megatron-Core; Liu et al. 2025, arXiv 2504.14960): the experts' etp·ep·edp grid
        # refolds the same tp·cp·dp ranks of a pipeline stage.
        fold = lay.tp * lay.cp * lay.dp
        if fold % (lay.expert_tp * lay.ep):
            ok = [e for e in divisors(model.moe.num_experts) if fold % (lay.expert_tp * e) == 0]
            raise ShardplanError(f"etp·ep ({lay.expert_tp}·{lay.ep}) must divide tp·cp·dp ({fold}): the experts "
                                 f"refold a stage's ranks; ep allowed with etp {lay.expert_tp}: {fmt_values(ok)}"
                                 + ("" if lay.etp is not None else " (or set --etp)"), field="ep")
    if work.seq_len % lay.cp:
        raise ShardplanError(f"cp ({lay.cp}) must divide seq_len ({work.seq_len})", field="cp")
    if lay.sequence_parallel and lay.tp > 1 and (work.seq_len // lay.cp) % lay.tp:
        raise ShardplanError(f"with --sequence-parallel, tp ({lay.tp}) must divide seq_len/cp "
                             f"({work.seq_len // lay.cp}): the sequence is split over the TP ranks", field="tp")
    if lay.zero_stage not in (0, 1, 2, 3):
        raise ShardplanError(f"must be 0, 1, 2 or 3 (got {lay.zero_stage})", field="zero")
    if lay.zero_stage == 2 and lay.pp > 1:
        raise ShardplanError(ZERO2_PP, field="zero")
    if lay.recompute_layers is not None:
        if lay.recompute != Recompute.FULL:
            raise ShardplanError("recompute-layers needs --recompute full", field="recompute_layers")
        if lay.recompute_layers < 1:
            raise ShardplanError(f"must be ≥ 1 (got {lay.recompute_layers})", field="recompute_layers")
    if lay.recompute_modules is not None:
        if lay.recompute != Recompute.SELECTIVE:
            raise ShardplanError("recompute-modules needs --recompute selective", field="recompute_modules")
        check_modules(model, lay.recompute_modules)
    for name in ("offload_optimizer", "offload_weights", "offload_activations"):
        v = getattr(lay, name)
        if not 0.0 <= v <= 1.0:
            raise ShardplanError(f"must be a fraction in [0, 1] (got {v})", field=name)


@dataclass
class SpaceRequest:
    """What may vary: ``None`` means free, a value pins the knob (the CLI's layout flags)."""

    num_gpus: int
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    etp: int | None = None
    cp: int | None = None
    microbatch: int | None = None
    interleave: int | None = None
    recompute: Recompute | None = None
    sequence_parallel: bool | None = None
    zero_stage: int | None = None
    max_tp: int = 8  # TP within a node unless allowed otherwise (CP may span nodes: its ring is priced)
    max_interleave: int = 8
    max_cp: int = 1
    min_cp_chunk: int = 4096  # tokens per rank below which CP is not considered (unless pinned)
    batches: list[int] = field(default_factory=list)  # global batches to consider (default: the workload's)
    max_batch: int | None = None  # instead: per layout, the largest batch ≤ this that its dp divides
    gpu_memory_bytes: float | None = None  # prunes microbatches whose one-layer input alone exceeds it
    zero3_with_pp: bool = True  # False: the target framework cannot shard weights under PP (Megatron, DeepSpeed)
    zero3_with_ep: bool = True  # False: the target cannot combine expert parallelism with ZeRO-3 (DeepSpeed MoE)
    recompute_modules: tuple[str, ...] | None = None  # pinned selective module set (None: Megatron's default)
    cp_heads_split: bool = False  # the system's CP is all-to-all: cp must divide each TP rank's heads
    cp_runs: bool = True  # the system's CP exchange can run the model's attention (``frameworks.cp_blocker``)
    framework: FrameworkCaps | None = None  # only the knobs this framework can run (``frameworks.FRAMEWORKS``)


@dataclass
class Space:
    """Candidate layouts as columns (``rows.gb`` is each row's global batch) and what each rule pruned."""

    rows: LayoutArrays
    pruned: dict[str, int]


def enumerate_layouts(model: ModelSpec, work: TrainWorkload, req: SpaceRequest) -> Space:
    """Every valid layout of the request (before memory): the product of each knob's valid values."""
    pruned: dict[str, int] = {}

    def keep(values: list[int], pin: int | None, rule: str) -> list[int]:
        if pin is None:
            return values
        if pin not in values:
            pruned[rule] = pruned.get(rule, 0) + len(values)
        return [v for v in values if v == pin]

    n = req.num_gpus
    fw = req.framework

    def allowed(values: list[int], knob: str) -> list[int]:
        if fw is None or getattr(fw, knob):
            return values
        out = [v for v in values if v == 1]
        if len(out) < len(values):
            pruned[f"{knob} > 1 ({fw.name} has none)"] = len(values) - len(out)
        return out

    # A pinned value bypasses the soft limits (TP within a node, CP chunk size, interleave cap).
    tps = keep(valid_tp(model) if req.tp else [t for t in valid_tp(model) if t <= min(req.max_tp, n)],
               req.tp, "tp pinned")
    # Context parallelism only pays when each rank keeps a long chunk: below ~4k tokens the ring
    # attention kernels are too short to hide the K/V exchange (Megatron-LM recommends CP from 8k+).
    cps = [c for c in divisors(n) if work.seq_len % c == 0 and chunked_cp_ok(model, work.seq_len, c)
           and (req.cp or (c <= req.max_cp and (c == 1 or work.seq_len // c >= req.min_cp_chunk)))]
    tps = allowed(tps, "tp")
    cps = allowed(keep(cps, req.cp, "cp pinned"), "cp")
    if not req.cp_runs and any(c > 1 for c in cps):
        pruned["cp > 1 (the CP exchange cannot run the model's sliding windows or sinks)"] = sum(c > 1 for c in cps)
        cps = [c for c in cps if c == 1]
    pps = allowed(keep([p for p in divisors(n) if p <= model.num_layers], req.pp, "pp pinned"), "pp")
    equal = fw is not None and not fw.stage_split  # its stages and model chunks hold equal layer counts
    rule = f"layers not splitting into equal stages ({fw.name})" if fw is not None else ""
    if equal and any(model.num_layers % p for p in pps):
        pruned[rule] = sum(1 for p in pps if model.num_layers % p)
        pps = [p for p in pps if model.num_layers % p == 0]
    rcs = [Recompute(req.recompute)] if req.recompute is not None else list(fw.recompute if fw else Recompute)
    sps = [req.sequence_parallel] if req.sequence_parallel is not None else [False, True]
    zeros = [req.zero_stage] if req.zero_stage is not None else list(fw.zero_stages if fw else (0, 1, 2, 3))
    batches = req.batches or [work.global_batch]
    experts = model.moe.num_experts if model.moe else 1
    cols: dict[str, list] = {k: [] for k in ("tp", "pp", "dp", "ep", "cp", "mb", "v", "rc", "sp", "zero", "gb",
                                             "etp")}
    for tp, cp, pp in itertools.product(tps, cps, pps):
        if tp * cp * pp > n or n % (tp * cp * pp):
            continue
        if req.cp_heads_split and not a2a_heads_ok(model, tp, cp):
            key = "cp not dividing a TP rank's heads (a2a CP)"
            pruned[key] = pruned.get(key, 0) + 1
            continue
        if not recurrent_cp_ok(model, tp, cp):
            key = "cp not dividing a TP rank's Mamba / Gated DeltaNet heads"
            pruned[key] = pruned.get(key, 0) + 1
            continue
        dp = n // (tp * cp * pp)
        if req.dp is not None and dp != req.dp:
            pruned["dp pinned"] = pruned.get("dp pinned", 0) + 1
            continue
        # Expert layouts: etp = tp (Megatron's default) or 1 (folded), ep any divisor of E with etp·ep | tp·cp·dp.
        etps = keep(sorted({tp, 1}) if model.moe else [tp], req.etp, "etp pinned")
        eps_of = {et: keep([e for e in divisors(experts) if (tp * cp * dp) % (et * e) == 0] if model.moe else [1],
                           req.ep, "ep pinned") for et in etps}
        eps = [(et, e) for et in etps for e in eps_of[et] if fw is None or fw.ep or e == 1]
        top = max(req.max_interleave, req.interleave or 1)
        vs = [v for v in range(1, top + 1) if v == 1 or (pp > 1 and pp * v <= model.num_layers)]
        if pp > 1 and model.num_layers % pp == 0:  # beyond the cap: chunk counts that split every rank evenly
            vs += [v for v in divisors(model.num_layers // pp) if top < v <= EQUAL_CHUNKS_MAX_INTERLEAVE]
        vs = allowed(keep(vs, req.interleave, "interleave pinned"), "interleave")
        if equal and any(model.num_layers % (pp * v) for v in vs):
            pruned[rule] = pruned.get(rule, 0) + sum(1 for v in vs if model.num_layers % (pp * v))
            vs = [v for v in vs if model.num_layers % (pp * v) == 0]
        for gb in ([req.max_batch // dp * dp] if req.max_batch else batches):
            if gb == 0:
                pruned["dp larger than the batch"] = pruned.get("dp larger than the batch", 0) + 1
                continue
            if gb % dp:
                pruned["batch not divisible by dp"] = pruned.get("batch not divisible by dp", 0) + 1
                continue
            # Gradient accumulation over whole schedules (torchtitan, AutoModel): each schedule runs local_batch
            # sequences per dp rank, so gb/dp holds whole schedules and microbatches divide local_batch; without PP
            # local_batch is the microbatch (their training loops step local_batch sequences at a time).
            sched = work.local_batch or gb // dp
            if (gb // dp) % sched:
                pruned["batch per dp rank not a multiple of local_batch"] = (
                    pruned.get("batch per dp rank not a multiple of local_batch", 0) + 1)
                continue
            mbs = keep(divisors(sched) if pp > 1 or not work.local_batch else [sched], req.microbatch,
                       "microbatch pinned")
            if req.gpu_memory_bytes is not None and req.microbatch is None:
                # Every layout holds at least the input of the layer it is running: mb·s/cp tokens × h in 16 bits,
                # ÷ tp at best (sequence parallel). A microbatch whose input alone exceeds GPU memory cannot fit.
                per_seq = work.seq_len / cp * model.hidden_size * 2 / tp
                big = [mb for mb in mbs if mb * per_seq > req.gpu_memory_bytes]
                if big:
                    pruned["microbatch input exceeds GPU memory"] = (
                        pruned.get("microbatch input exceeds GPU memory", 0) + len(big))
                    mbs = [mb for mb in mbs if mb * per_seq <= req.gpu_memory_bytes]
            # The product of the remaining knobs at once (itertools.product's order: the last knob varies fastest).
            grid = np.indices((len(eps), len(vs), len(mbs), len(rcs), len(sps), len(zeros))).reshape(6, -1)
            e_i, v_i, mb_i, rc_i, sp_i, z_i = grid
            sp_c = np.array([int(x) for x in sps], dtype=np.int64)[sp_i]
            z_c = np.array(zeros, dtype=np.int64)[z_i]
            ok = ~((sp_c == 1) & (tp == 1))  # sequence parallelism is a no-op without TP
            # it splits each sequence's seq/cp tokens over the TP ranks (Megatron-LM tensor_parallel/mappings.py
            # ``_split_along_first_dim`` asserts the split is even)
            spd = ok & (sp_c == 1) & ((work.seq_len // cp) % tp != 0)
            if spd.any():
                key = "sequence parallel with seq_len/cp not divisible by tp"
                pruned[key] = pruned.get(key, 0) + int(spd.sum())
            ok &= ~spd
            # Megatron-Core's interleaved schedule runs the microbatches in groups of pp (default
            # microbatch_group_size_per_vp_stage), refusing fewer microbatches than pp or a last group under pp
            # (pipeline_parallel/schedules.py@d98e8a6): m = gb/(dp·mb) must be a multiple of pp.
            v_c, mb_c = np.array(vs, dtype=np.int64)[v_i], np.array(mbs, dtype=np.int64)[mb_i]
            vm = ok & (v_c > 1) & ((sched // mb_c) % pp != 0)  # per schedule
            if vm.any():
                pruned["interleave with microbatches not a multiple of pp"] = (
                    pruned.get("interleave with microbatches not a multiple of pp", 0) + int(vm.sum()))
            ok &= ~vm
            z2 = ok & (z_c == 2) & (pp > 1)
            if z2.any():
                pruned["ZeRO-2 with pipeline"] = pruned.get("ZeRO-2 with pipeline", 0) + int(z2.sum())
            z3 = ok & ~z2 & (z_c == 3) & (pp > 1) & (not req.zero3_with_pp or (fw is not None and not fw.zero3_with_pp))
            if z3.any():
                pruned["ZeRO-3 with pipeline (export target)"] = (
                    pruned.get("ZeRO-3 with pipeline (export target)", 0) + int(z3.sum()))
            ep_c = np.array(eps, dtype=np.int64).reshape(-1, 2)[e_i, 1]
            z3e = ok & ~z2 & ~z3 & (z_c == 3) & (ep_c > 1) & (not req.zero3_with_ep)
            if z3e.any():
                pruned["ZeRO-3 with expert parallelism (export target)"] = (
                    pruned.get("ZeRO-3 with expert parallelism (export target)", 0) + int(z3e.sum()))
            ok &= ~z2 & ~z3 & ~z3e
            size = int(ok.sum())
            ep_arr = np.array(eps, dtype=np.int64).reshape(-1, 2)
            for key, val in (("tp", np.full(size, tp)), ("pp", np.full(size, pp)), ("dp", np.full(size, dp)),
                             ("ep", ep_arr[e_i[ok], 1]), ("cp", np.full(size, cp)),
                             ("mb", np.array(mbs, dtype=np.int64)[mb_i[ok]]),
                             ("v", np.array(vs, dtype=np.int64)[v_i[ok]]),
                             ("rc", np.array([RECOMPUTE_CODE[rc] for rc in rcs], dtype=np.int64)[rc_i[ok]]),
                             ("sp", sp_c[ok]), ("zero", z_c[ok]), ("gb", np.full(size, gb)),
                             ("etp", ep_arr[e_i[ok], 0])):
                cols[key].append(val)
    arr = {k: np.concatenate(v).astype(np.int64) if v else np.zeros(0, dtype=np.int64) for k, v in cols.items()}
    size = len(arr["tp"])
    zeros_f = np.zeros(size)
    rows = LayoutArrays(tp=arr["tp"], pp=arr["pp"], dp=arr["dp"], ep=arr["ep"], cp=arr["cp"], mb=arr["mb"],
                        v=arr["v"], rc=arr["rc"], rk=np.full(size, 10**9, dtype=np.int64), sp=arr["sp"],
                        zero=arr["zero"], f_opt=zeros_f, f_w=zeros_f.copy(), f_act=zeros_f.copy(), gb=arr["gb"],
                        etp=arr["etp"], sel=np.where(arr["rc"] == RECOMPUTE_CODE[Recompute.SELECTIVE],
                                                     modules_mask(req.recompute_modules), modules_mask(None)))
    return Space(rows, pruned)


def row_keys(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 per row, equal exactly when the rows are equal in every column: a fast stand-in for
    ``np.unique(..., axis=0)``. Integer columns code as their offset from the column's minimum (mixed radix over
    their ranges); other columns, and ranges too wide for one int64, as their rank among the distinct values."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    radix = 1
    for col in columns:
        if len(col) and np.issubdtype(col.dtype, np.integer) and (span := int(col.max()) - int(col.min()) + 1) \
                <= 4 * len(col) + 64:
            code, size = col.astype(np.int64) - int(col.min()), span
        else:
            values, inverse = np.unique(col, return_inverse=True)
            code, size = inverse.astype(np.int64).ravel(), max(len(values), 1)
        if radix * size >= 2**62:
            # too many combinations for one int64: fall back to ranks of whole rows
            return np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)[1].astype(np.int64).ravel()
        key += code * radix
        radix *= size
    return key
