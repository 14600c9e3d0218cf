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
- ``mlp``: the FC1 output(s) and activation output: ``s·b·(g + 1)·f·2/t`` (``g = 2`` gated, FC1 input kept);
- ``moe_act``: each routed copy's activation output, the FC2 input: ``s·b·k·c·F·2/t`` (top-k, capacity factor);
- ``shared_experts``: the shared experts' FC1 output(s) and activation output;
- ``moe``: everything the MoE MLP stores beyond its input (dispatched copies, expert and shared activations, router);
- ``mla_up_proj``: MLA's Q, K and V after the up-projections (the latents stay for the weight gradients).

Under fp8 Transformer Engine keeps a GEMM input for the weight gradient as its 1-byte copy: the norm before a GEMM
then frees nothing, the FC2 input and MLP activations count 1 byte (``memory.layer_activations``' ``q``).

Recompute time is the forward time of the module's operators in the layer's inventory (``core.operators``):
``core_attn`` the selective ops, ``layernorm`` the ``.norm`` ops, ``mlp`` the dense MLP's ops between its norm
and residual (GEMMs, activation, TP collectives), ``moe_act`` ``moe.experts.act``, ``shared_experts``
``moe.shared.*``, ``moe`` the MoE's ops between its norm and residual (all-to-alls included), ``mla_up_proj``
the ``q_up``/``kv_up`` GEMMs (with their casts) and the rotary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardplan.costmodel.core.ops import COMM, Op
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.knobs import RECOMPUTE_MODULES
from shardplan.costmodel.training.memory import layer_activations

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
    if kind in ATTENTION_KINDS:
        acts = layer_activations(ctx, kind)
        out = {"core_attn": acts.none - acts.selective, "layernorm": norm_out}
        if m.mla is not None:  # Q, K and V after the up-projections (their latents stay for the weight gradients)
            d_qk, d_v, heads = m.mla.qk_head_dim, m.mla.v_head_dim, m.num_heads
            out["mla_up_proj"] = T * e * (heads / t * d_qk + np.maximum(heads / t, 1.0) * (d_qk + d_v))
        return out
    if kind == "mlp":
        f = m.ffn_hidden_size / t
        # FC1 output(s) and the FC2 input go; the checkpointed input is the 16-bit one where fp8 kept a 1-byte copy
        return {"layernorm": norm_out, "mlp": T * (f * (g * e + q) - shard((e - q) * m.hidden_size))}
    if kind == "moe":
        assert m.moe is not None
        moe = m.moe
        copies = moe.experts_per_token * moe.capacity_factor
        acts = layer_activations(ctx, kind)
        unsplit = (2 * e + (1.0 if ctx.dropout else 0.0)) * m.hidden_size  # norm input, MoE input, dropout mask
        out = {"layernorm": T * shard(e * m.hidden_size),  # the router's input is 16-bit
               "moe_act": T * copies * q * moe.expert_ffn_hidden_size / t,  # each routed copy's FC2 input
               "moe": acts.none - T * shard(unsplit)}
        if moe.num_shared_experts:
            out["shared_experts"] = T * moe.num_shared_experts * moe.shared_ffn / t * (g * e + q)
        return out
    return {}


def _module_ops(kind: str, module: str, fwd: list[Op]) -> list[Op]:
    """The forward operators a module's recompute reruns."""
    if module == "core_attn":
        return [op for op in fwd if op.selective]
    if module == "layernorm":
        return [op for op in fwd if op.name.split(".")[-1] == "norm" and op.name.count(".") == 1]
    inner = [op for op in fwd if op.name.split(".", 1)[-1] not in ("norm", "residual")]
    if module in ("mlp", "moe"):
        return inner if kind == module else []
    if module == "moe_act":
        return [op for op in fwd if op.name == "moe.experts.act"]
    if module == "mla_up_proj":  # the up-projections (and their fp8 casts) and the rotary on their output
        return [op for op in fwd
                if op.name.split(".fp8")[0].split(".fp4")[0] in ("attn.q_up", "attn.kv_up", "attn.rope")]
    if module == "shared_experts":
        return [op for op in fwd if op.name.startswith("moe.shared.")]
    raise ValueError(f"unknown recompute module {module}")


def module_times(kind: str, fwd: list[Op], modules: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seconds one layer of ``kind`` spends rerunning each module of ``modules`` in backward (its forward ops)."""
    zero = np.zeros(np.shape(fwd[0].time)) if fwd else np.zeros(1)
    return {mod: zero + sum((op.time for op in _module_ops(kind, mod, fwd)), start=zero) for mod in modules}


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
        ops = _module_ops(kind, mod, fwd)
        out[mod] = ModuleCost(nbytes, zero + sum((op.time for op in ops), start=zero),
                              zero + sum((op.flops for op in ops if op.kind != COMM), start=zero))
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
    zero = np.zeros(np.shape(sel), dtype=float)
    time, flops, freed, transient = zero, zero, zero, zero
    for i, mod in enumerate(MODULES):
        on = (np.asarray(sel) >> i & 1) == 1
        if on.all() if mod == "core_attn" else not on.any():
            continue  # as in the default for every row
        present = [(n, kinds[k].modules[mod]) for k, n in counts.items() if k in kinds and mod in kinds[k].modules]
        if not present:
            continue
        t = sum((n * c.time for n, c in present), start=zero)
        f = sum((n * c.flops for n, c in present), start=zero)
        b = sum((n * c.freed for n, c in present), start=zero)
        if mod == "core_attn":  # in the default: dropping it stores the scores again and saves their rerun
            time, flops, freed = time - np.where(on, 0.0, t), flops - np.where(on, 0.0, f), freed - np.where(on, 0.0, b)
            continue
        time, flops, freed = time + np.where(on, t, 0.0), flops + np.where(on, f, 0.0), freed + np.where(on, b, 0.0)
        one = np.max(np.stack([np.where(np.asarray(n) > 0, c.freed, 0.0) + zero for n, c in present]), axis=0)
        transient = np.maximum(transient, np.where(on, one, 0.0))
    return SelectiveTerms(time, flops, freed, transient)
