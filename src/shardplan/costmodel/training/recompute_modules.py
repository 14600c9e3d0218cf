"""Selective recompute by module: what each of Megatron-LM's ``--recompute-modules`` frees and costs, per layer.

Megatron-LM (d98e8a6, megatron/core/transformer/transformer_config.py ``recompute_modules``) takes one set for
every layer of every stage under ``--recompute-granularity selective``, from ``core_attn`` (the default),
``layernorm`` (input_layernorm and pre_mlp_layernorm), ``mlp`` (the dense MLP submodule), ``moe_act`` (the
grouped-GEMM experts' activation function), ``shared_experts``, ``moe`` (the whole MoE layer) and
``mla_up_proj`` (MLA's query and key-value up-projections). A recomputed module keeps its input (checkpointed)
and drops what it stores for backward; in backward its forward runs again.

Bytes are ``memory.layer_activations``'s terms (Korthikanti et al. 2022 §4 generalised), split by module:

- ``core_attn``: the ``5·a·s/h`` scores term (softmax output, dropout mask and output), zero with flash attention,
  which keeps no scores;
- ``layernorm``: each norm's output, the next GEMM's input: ``2·s·b·h`` bytes (÷t under sequence parallelism) per
  norm — one per attention layer, one per MLP or MoE;
- ``mlp``: the FC1 output(s) and activation output: ``s·b·(g + 1)·f·2/t`` (``g = 2`` gated, FC1 input kept), and
  what an eager activation keeps beside them (``memory.activation_saved``: eager SwiGLU's silu output);
- ``moe_act``: each routed copy's activation output, the FC2 input: ``s·b·k·c·F·2/t`` (top-k, capacity factor), and
  what an eager activation and a clamped GLU's eager clamps keep (``memory.clamp_saved``);
- ``shared_experts``: the shared experts' FC1 output(s) and activation output;
- ``moe``: everything the MoE MLP stores beyond its input (dispatched copies, expert and shared activations, router);
- ``mla_up_proj``: MLA's Q, K and V after the up-projections (the latents stay for the weight gradients).

Under fp8 Transformer Engine keeps a GEMM input for the weight gradient as its 1-byte copy: the norm before a GEMM
then frees nothing, the FC2 input and MLP activations count 1 byte (``memory.layer_activations``' ``q``).

Recompute time is the forward time of the module's operators in the layer's inventory (``core.operators``):
``core_attn`` the selective ops, ``layernorm`` the ``.norm`` ops, ``mlp`` the dense MLP's ops between its norm
and residual (GEMMs, activation, TP collectives), ``moe_act`` ``moe.experts.act`` (and ``.clamp``), ``shared_experts``
``moe.shared.*``, ``moe`` the MoE's ops between its norm and residual (all-to-alls included), ``mla_up_proj``
the ``q_up``/``kv_up`` GEMMs (with their casts and sequence-parallel gathers) and the rotary.

Two whole-layer policies of other frameworks stand beside the modules, each alone in a set (it replaces core_attn):
each names the tensors a layer keeps and the share of each forward operator rerun in backward (``POLICY_RULES``);
bytes freed are ``memory.layer_activations``' ``none`` less the kept tensors, rerun time and FLOPs are those shares
of the layer's operators.

- ``torchtitan_op``: torchtitan's per-op selective activation checkpointing (``selective_ac_option = "op"``,
  torchtitan@1ea476e9f and @e7c0cae parallelize_llama.py ``_save_list``/``_custom_policy``): each transformer block
  keeps its input and the outputs of the ops in the save list — every odd ``aten.mm`` of the block (wq, wv, w1, w2;
  the even ones wk, wo, w3 are rerun), the SDPA flash/efficient attention outputs (output and log-sum-exp) and
  the TP reduce-scatters; everything else (norms, rotary, SwiGLU, the TP all-gathers, the residual add the MLP
  needs) is rerun. The block's last residual add is not (torch.utils.checkpoint stops recomputing once every saved
  tensor backward needs exists: early stop, on by default). torchao float8 linears reach the policy as ``aten.mm``
  too (the float8 tensor subclass implements aten.mm below the checkpoint's dispatch mode), so fp8 runs keep the
  same 16-bit GEMM outputs.
- ``maxtext_save_dot_except_mlpwi``: MaxText's remat policy save_dot_except_mlpwi — also what NVIDIA's
  dgxc-benchmarking v25.01 Llama-2-70B bf16 runs set as ``remat_policy=custom`` with query_proj, key_proj,
  value_proj, qkv_proj, out_proj and mlpwo on ``device`` (NVIDIA/dgxc-benchmarking@143b90d maxtext/configure.sh;
  the later command-line key wins, MaxText@c653be3 pyconfig.py ``_load_kwargs``). MaxText@c653be3 (the last commit
  before the benchmark's maxtext-2024-12-09 container) names Q, K (after the rotary) and V ``query_proj``/
  ``key_proj``/``value_proj`` and the attention output projection ``out_proj`` (layers/attentions.py), the MLP's
  output ``mlpwo`` and its gate/up GEMM outputs ``mlpwi_0``/``mlpwi_1`` (layers/linears.py), the attention core's
  output ``context`` (base.yml: remat); the scanned layer's input ``decoder_layer_input`` is always kept. Rerun:
  both norms, the attention core's forward (flash included: its output and log-sum-exp are not kept), the residual
  add before the MLP, the MLP's FC1 and activation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardplan.costmodel.core.operators import kv_heads_per_rank
from shardplan.costmodel.core.ops import ATTN, COMM, GEMM, MEM, Op
from shardplan.costmodel.core.passes import traffic
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.knobs import RECOMPUTE_MODULES, RECOMPUTE_POLICIES
from shardplan.costmodel.training.memory import activation_saved, clamp_saved, layer_activations

MODULES = RECOMPUTE_MODULES
ATTENTION_KINDS = ("attention", "sliding", "chunked")
# "moe" reruns the whole MoE MLP, its experts' activation and its shared experts included: with it, moe_act and
# shared_experts would count the same bytes twice, so a set takes either.
NESTED = {"moe": ("moe_act", "shared_experts")}


def module_bytes(ctx: Ctx, kind: str) -> dict[str, np.ndarray]:
    """Bytes one layer of ``kind`` stops storing per microbatch on one GPU when each module is recomputed (only
    the modules the kind has). Under fp8 a GEMM input kept for the weight gradient is Transformer Engine's 1-byte
    copy (``memory.layer_activations``' ``q``): recomputing the norm before it frees nothing, and the MLP's
    checkpointed input is its 16-bit original."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    T, t = ctx.tokens, r.tp.astype(float)
    q = 1.0 if ctx.work.dtype == "fp8" else e

    def shard(unsplit: float) -> np.ndarray:
        return np.where(r.sp == 1, unsplit / t, unsplit)

    norm_out = T * shard(e * m.hidden_size) * (q == e)  # the next GEMM's 16-bit input (under fp8 its fp8 copy stays)
    g = 2 if m.mlp.gated else 1
    clamp, act = clamp_saved(ctx), activation_saved(ctx)
    policies = {p: layer_activations(ctx, kind).none - policy_kept(ctx, kind, p) for p in RECOMPUTE_POLICIES
                if kind in POLICY_KINDS and m.mla is None}
    if kind in ATTENTION_KINDS:
        acts = layer_activations(ctx, kind)
        out = {"core_attn": acts.none - acts.selective, "layernorm": norm_out}
        if m.mla is not None:  # Q, K and V after the up-projections (their latents stay for the weight gradients)
            d_qk, d_v, heads = m.mla.qk_head_dim, m.mla.v_head_dim, m.num_heads
            out["mla_up_proj"] = T * e * (heads / t * d_qk + np.maximum(heads / t, 1.0) * (d_qk + d_v))
        return out | policies
    if kind == "mlp":
        f = m.ffn_hidden_size / t
        # FC1 output(s), what an eager activation keeps and the FC2 input go (``memory.layer_activations``' MLP
        # terms); the checkpointed input is the 16-bit one where fp8 kept a 1-byte copy
        return {"layernorm": norm_out,
                "mlp": T * (f * (g * e + q + act) - shard((e - q) * m.hidden_size))} | policies
    if kind == "moe":
        assert m.moe is not None
        moe = m.moe
        copies = moe.experts_per_token * moe.capacity_factor
        acts = layer_activations(ctx, kind)
        # norm input (and what an eager norm keeps beside it), MoE input, dropout mask: none of it is rerun by "moe"
        sw = ctx.system.software
        norm_saved = traffic("norm", sw.elementwise_kernels, sw.norm_kernel).saved
        unsplit = (2 * e + (1.0 if ctx.dropout else 0.0) + norm_saved) * m.hidden_size
        out = {"layernorm": T * shard(e * m.hidden_size),  # the router's input is 16-bit
               # each routed copy's FC2 input (and what an eager activation and a clamped GLU's eager clamps keep)
               "moe_act": T * copies * (q + clamp + act) * moe.expert_ffn_hidden_size / t,
               "moe": acts.none - T * shard(unsplit)}
        if moe.num_shared_experts:
            out["shared_experts"] = T * moe.num_shared_experts * moe.shared_ffn / t * (g * e + q + act)
        return out
    return {}


def _module_ops(kind: str, module: str, fwd: list[Op]) -> list[Op]:
    """The forward operators a module's recompute reruns."""
    if module in RECOMPUTE_POLICIES:
        raise ValueError(f"{module} reruns shares of operators: policy_shares")
    if module == "core_attn":
        return [op for op in fwd if op.selective]
    if module == "layernorm":
        return [op for op in fwd if op.name.split(".")[-1] == "norm" and op.name.count(".") == 1]
    inner = [op for op in fwd if op.name.split(".", 1)[-1] not in ("norm", "residual")]
    if module in ("mlp", "moe"):
        return inner if kind == module else []
    if module == "moe_act":
        return [op for op in fwd if op.name in ("moe.experts.clamp", "moe.experts.act")]
    if module == "mla_up_proj":  # the up-projections (with their fp8 casts and SP gathers) and the rotary on them
        return [op for op in fwd
                if op.name.split(".fp8")[0].split(".fp4")[0] in ("attn.q_up", "attn.kv_up", "attn.rope")
                or op.name.startswith(("attn.q_up.tp_", "attn.kv_up.tp_"))]
    if module == "shared_experts":
        return [op for op in fwd if op.name.startswith("moe.shared.")]
    raise ValueError(f"unknown recompute module {module}")


def _rerun(ctx: Ctx | None, kind: str, module: str, fwd: list[Op]) -> list[tuple[np.ndarray, Op]]:
    """The forward operators a module or policy reruns, each with the share of it rerun."""
    if module in RECOMPUTE_POLICIES:
        assert ctx is not None
        shares = policy_shares(ctx, kind, module, fwd)
        return [(s, op) for s, op in zip(shares, fwd, strict=True)]
    return [(np.ones(1), op) for op in _module_ops(kind, module, fwd)]


def module_times(kind: str, fwd: list[Op], modules: dict[str, np.ndarray], ctx: Ctx | None = None
                 ) -> dict[str, np.ndarray]:
    """Seconds one layer of ``kind`` spends rerunning each module of ``modules`` in backward (its forward ops; a
    policy's shares need the layer's ``ctx``)."""
    zero = np.zeros(np.shape(fwd[0].time)) if fwd else np.zeros(1)
    return {mod: zero + sum((s * op.time for s, op in _rerun(ctx, kind, mod, fwd)), start=zero) for mod in modules}


# --- other frameworks' whole-layer policies ---------------------------------------------------------------------
POLICY_KINDS = (*ATTENTION_KINDS, "mlp")  # dense attention layers (no MLA) with a dense MLP


def _torchtitan_mms(ctx: Ctx) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """A torchtitan Llama block's ``aten.mm`` calls in forward order (models/llama/model.py: wq, wk, wv, wo; w1,
    w3, w2): (layer kind, inventory GEMM, share of that GEMM's work, output elements per token)."""
    m, t = ctx.model, ctx.rows.tp.astype(float)
    d, kvr, h = m.head_size, kv_heads_per_rank(m, t), float(m.hidden_size)
    q = m.num_heads / t * (2 if m.attn_output_gate else 1)
    cols = q + 2 * kvr
    g = 2 if m.mlp.gated else 1
    f = m.ffn_hidden_size / t
    return [("attn", "attn.qkv", q / cols, q * d), ("attn", "attn.qkv", kvr / cols, kvr * d),
            ("attn", "attn.qkv", kvr / cols, kvr * d), ("attn", "attn.out", np.ones_like(t), h + 0 * t),
            *[("mlp", "mlp.fc1", np.full_like(t, 1 / g), f)] * g, ("mlp", "mlp.fc2", np.ones_like(t), h + 0 * t)]


def _part(kind: str) -> str:
    return "mlp" if kind == "mlp" else "attn"


def policy_kept(ctx: Ctx, kind: str, policy: str) -> np.ndarray:
    """Bytes one layer of ``kind`` keeps for backward per microbatch on one GPU under ``policy``: its checkpointed
    input (the token mixer's layer; the MLP's is rerun) and the tensors the policy saves."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    T, t = ctx.tokens, r.tp.astype(float)
    h = m.hidden_size
    sp = (r.sp == 1) & (r.tp > 1)
    row = T * np.where(r.sp == 1, e * h / t, e * h)  # one [tokens, hidden] tensor outside the TP regions
    layer_input = row if kind != "mlp" else 0.0 * row
    if policy == "torchtitan_op":
        # odd aten.mm outputs (16-bit: the GEMM output dtype under bf16 autocast and torchao float8 alike), the
        # SDPA output and fp32 log-sum-exp per head, the reduce-scatter output under sequence parallelism
        mms = sum((T * e * n for i, (part, _, _, n) in enumerate(_torchtitan_mms(ctx)) if i % 2 == 0
                   and part == _part(kind)), start=0.0 * T)
        heads = m.num_heads / t
        sdpa = T * heads * (e * m.head_size + 4.0) if kind != "mlp" else 0.0 * T
        return layer_input + mms + sdpa + np.where(sp, T * e * h / t, 0.0)
    if policy == "maxtext_save_dot_except_mlpwi":
        if kind == "mlp":
            return row  # mlpwo
        qkv = T * e * m.head_size * (m.num_heads / t + 2 * kv_heads_per_rank(m, t))  # query/key/value_proj
        return layer_input + qkv + row  # decoder_layer_input, Q/K/V, out_proj
    raise ValueError(f"unknown recompute policy {policy}")


def policy_shares(ctx: Ctx, kind: str, policy: str, fwd: list[Op]) -> list[np.ndarray]:
    """Share of each of a layer's forward operators ``fwd`` that ``policy`` reruns in backward (fp8 casts follow
    their GEMM)."""
    base = [op.name.split(".fp8")[0].split(".fp4")[0] for op in fwd]
    one, none = np.ones(1), np.zeros(1)
    shares: list[np.ndarray]
    if policy == "torchtitan_op":
        early = ctx.system.software.recompute_early_stop  # torchtitan's SAC passes it as its full AC does
        rerun: dict[str, np.ndarray] = {}
        for i, (part, name, share, _) in enumerate(_torchtitan_mms(ctx)):
            if i % 2 == 1 and part == _part(kind):  # the even mm of the block (1-based): not saved
                rerun[name] = rerun.get(name, 0.0 * share) + share

        def titan(op: Op, name: str) -> np.ndarray:
            if op.kind == GEMM and not op.selective:
                return rerun.get(name, none)
            if op.kind == ATTN or op.selective or name.endswith(("reducescatter", "cp_ring")):
                return none  # SDPA (ring attention under CP inside it) and reduce-scatters are saved
            # after w2's saved output: unneeded once early stop has every saved tensor back, rerun without it
            return none if early and name in ("mlp.residual", "mlp.tp_allreduce") else one

        shares = [titan(op, n) for op, n in zip(fwd, base, strict=True)]
    elif policy == "maxtext_save_dot_except_mlpwi":

        def maxtext(op: Op, name: str) -> np.ndarray:
            if op.kind == ATTN or op.selective or name in ("mlp.fc1", "attn.cp_ring"):
                return one  # context and mlpwi_0/1 are rematerialised
            if op.kind == GEMM or name in ("attn.rope", "mlp.residual"):
                return none  # saved dots (Q and K after the rotary); the layer output is not needed
            if op.kind == COMM:
                return one if name.endswith("allgather") else none  # a rerun norm's gather; exits follow saved dots
            return one if op.kind == MEM else none

        shares = [maxtext(op, n) for op, n in zip(fwd, base, strict=True)]
    else:
        raise ValueError(f"unknown recompute policy {policy}")
    gemm = {n: s for op, n, s in zip(fwd, base, shares, strict=True) if op.kind == GEMM}
    return [gemm.get(n, s) if n != op.name else s for op, n, s in zip(fwd, base, shares, strict=True)]



@dataclass(frozen=True, slots=True)
class ModuleCost:
    """One module of one layer, one microbatch, one GPU: bytes its recompute frees, forward seconds and FLOPs it
    reruns."""

    freed: np.ndarray
    time: np.ndarray
    flops: np.ndarray


def module_costs(ctx: Ctx, kind: str, fwd: list[Op]) -> dict[str, ModuleCost]:
    """Every module a layer of ``kind`` has, costed (the layer's forward operators ``fwd``)."""
    freed = module_bytes(ctx, kind)
    zero = np.zeros(np.shape(fwd[0].time)) if fwd else np.zeros(1)
    out = {}
    for mod, nbytes in freed.items():
        ops = _rerun(ctx, kind, mod, fwd)
        out[mod] = ModuleCost(nbytes, zero + sum((s * op.time for s, op in ops), start=zero),
                              zero + sum((s * op.flops for s, op in ops if op.kind != COMM), start=zero))
    return out


@dataclass(frozen=True, slots=True)
class SelectiveTerms:
    """A stage's selective recompute with a row's module set, against Megatron's default (core_attn alone, the
    cost model's ``selective`` terms): extra seconds and FLOPs rerun per microbatch, extra bytes freed per
    microbatch in flight, and the largest recomputed module's activations (live during its backward)."""

    time: np.ndarray
    flops: np.ndarray
    freed: np.ndarray
    transient: np.ndarray


def selective_terms(kinds: dict[str, Any], counts: dict[str, Any], sel: np.ndarray) -> SelectiveTerms:
    """``SelectiveTerms`` of a stage holding ``counts[kind]`` layers of each kind (``stages.KindCost`` in
    ``kinds``, each with ``modules``), for rows with module bit mask ``sel``. With the default set every term is 0,
    so the default keeps the cost model's selective recompute exactly."""
    masks = module_masks(sel)
    return selective_of(module_sums(kinds, counts, np.shape(sel), masks), masks, np.shape(sel))


def module_masks(sel: np.ndarray) -> dict[str, np.ndarray]:
    """The rows each module is on for, in ``MODULES`` order, for the modules where some row differs from the default
    (core_attn on, the others off): only those change a row's terms."""
    masks = {}
    for i, mod in enumerate(MODULES):
        on = (np.asarray(sel) >> i & 1) == 1
        if on.all() if mod == "core_attn" else not on.any():
            continue  # as in the default for every row
        masks[mod] = on
    return masks


@dataclass(frozen=True, slots=True)
class ModuleSums:
    """One module over a stage's layers (``selective_terms``' part that reads no row's module set): seconds and FLOPs
    rerun and bytes freed per microbatch, and the largest recomputed layer's bytes (None for core_attn, in the
    default)."""

    time: np.ndarray
    flops: np.ndarray
    freed: np.ndarray
    one: np.ndarray | None


def module_sums(kinds: dict[str, Any], counts: dict[str, Any], shape: tuple[int, ...], mods: Iterable[str]
                ) -> dict[str, ModuleSums]:
    """``ModuleSums`` of the modules ``mods`` that some layer kind of the stage has (arrays of ``shape``)."""
    zero = np.zeros(shape, dtype=float)
    out = {}
    for mod in mods:
        present = [(n, kinds[k].modules[mod]) for k, n in counts.items() if k in kinds and mod in kinds[k].modules]
        if not present:
            continue
        t = sum((n * c.time for n, c in present), start=zero)
        f = sum((n * c.flops for n, c in present), start=zero)
        b = sum((n * c.freed for n, c in present), start=zero)
        if mod == "core_attn":  # in the default: dropping it stores the scores again and saves their rerun
            out[mod] = ModuleSums(t, f, b, None)
            continue
        live = [(k, np.where(np.asarray(n) > 0, kinds[k].modules[mod].freed, 0.0) + zero) for k, n in counts.items()
                if k in kinds and mod in kinds[k].modules]
        one = np.max(np.stack([b for _, b in live]), axis=0)
        if mod in RECOMPUTE_POLICIES:  # one checkpointed block: its token mixer and its MLP are live together
            mixers = [b for k, b in live if k != "mlp"]
            one = (np.max(np.stack(mixers), axis=0) if mixers else zero) + sum((b for k, b in live if k == "mlp"),
                                                                               start=zero)
        out[mod] = ModuleSums(t, f, b, one)
    return out


def selective_of(sums: dict[str, ModuleSums], masks: dict[str, np.ndarray], shape: tuple[int, ...]
                 ) -> SelectiveTerms:
    """``SelectiveTerms`` of rows whose modules are on where ``masks`` (``module_masks``) says, from the stage's
    ``module_sums`` (arrays of ``shape``, the rows')."""
    zero = np.zeros(shape, dtype=float)
    time, flops, freed, transient = zero, zero, zero, zero
    for mod, on in masks.items():
        if mod not in sums:
            continue
        s = sums[mod]
        if mod == "core_attn":  # in the default: dropping it stores the scores again and saves their rerun
            time, flops = time - np.where(on, 0.0, s.time), flops - np.where(on, 0.0, s.flops)
            freed = freed - np.where(on, 0.0, s.freed)
            continue
        time, flops, freed = time + np.where(on, s.time, 0.0), flops + np.where(on, s.flops, 0.0), \
            freed + np.where(on, s.freed, 0.0)
        transient = np.maximum(transient, np.where(on, s.one, 0.0))
    return SelectiveTerms(time, flops, freed, transient)
