"""Selective recompute by module: what each of Megatron-LM's ``--recompute-modules`` frees and costs, per layer.

Megatron-LM (d98e8a6, megatron/core/transformer/transformer_config.py ``recompute_modules``) takes one set for
every layer of every stage under ``--recompute-granularity selective``, from ``core_attn`` (the default),
``layernorm`` (input_layernorm and pre_mlp_layernorm), ``mlp`` (the dense MLP submodule), ``moe_act`` (the
grouped-GEMM experts' activation function), ``shared_experts``, ``moe`` (the whole MoE layer) and
``mla_up_proj`` (not modelled here). A recomputed module keeps its input (checkpointed) and drops what it stores
for backward; in backward its forward runs again.

Bytes are ``memory.layer_activations``'s terms (Korthikanti et al. 2022 §4 generalised), split by module:

- ``core_attn``: the ``5·a·s/h`` scores term (softmax output, dropout mask and output), zero with flash attention,
  which keeps no scores;
- ``layernorm``: each norm's output, the next GEMM's input: ``2·s·b·h`` bytes (÷t under sequence parallelism) per
  norm — one per attention layer, one per MLP or MoE;
- ``mlp``: the FC1 output(s) and activation output: ``s·b·(g + 1)·f·2/t`` (``g = 2`` gated, FC1 input kept);
- ``moe_act``: each routed copy's activation output, the FC2 input: ``s·b·k·c·F·2/t`` (top-k, capacity factor);
- ``shared_experts``: the shared experts' FC1 output(s) and activation output;
- ``moe``: everything the MoE MLP stores beyond its input (dispatched copies, expert and shared activations, router).

Recompute time is the forward time of the module's operators in the layer's inventory (``core.operators``):
``core_attn`` the selective ops, ``layernorm`` the ``.norm`` ops, ``mlp`` the dense MLP's ops between its norm
and residual (GEMMs, activation, TP collectives), ``moe_act`` ``moe.experts.act``, ``shared_experts``
``moe.shared.*``, ``moe`` the MoE's ops between its norm and residual (all-to-alls included).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core.ops import Op
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.memory import layer_activations

MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "shared_experts", "moe")
ATTENTION_KINDS = ("attention", "sliding", "chunked")


def module_bytes(ctx: Ctx, kind: str) -> dict[str, np.ndarray]:
    """Bytes one layer of ``kind`` stops storing per microbatch on one GPU when each module is recomputed (only
    the modules the kind has)."""
    m, r, e = ctx.model, ctx.rows, ctx.act_bytes
    T, t = ctx.tokens, r.tp.astype(float)
    norm_out = T * np.where(r.sp == 1, e * m.hidden_size / t, e * m.hidden_size)
    g = 2 if m.mlp.gated else 1
    if kind in ATTENTION_KINDS:
        acts = layer_activations(ctx, kind)
        return {"core_attn": acts.none - acts.selective, "layernorm": norm_out}
    if kind == "mlp":
        return {"layernorm": norm_out, "mlp": T * e * m.ffn_hidden_size / t * (g + 1)}
    if kind == "moe":
        assert m.moe is not None
        moe = m.moe
        copies = moe.experts_per_token * moe.capacity_factor
        acts = layer_activations(ctx, kind)
        unsplit = (2 * e + (1.0 if ctx.dropout else 0.0)) * m.hidden_size  # norm input, MoE input, dropout mask
        outside = T * np.where(r.sp == 1, unsplit / t, unsplit)
        out = {"layernorm": norm_out, "moe_act": T * copies * e * moe.expert_ffn_hidden_size / t,
               "moe": acts.none - outside}
        if moe.num_shared_experts:
            out["shared_experts"] = T * moe.num_shared_experts * e * moe.shared_ffn / t * (g + 1)
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
    if module == "shared_experts":
        return [op for op in fwd if op.name.startswith("moe.shared.")]
    raise ValueError(f"unknown recompute module {module}")


def module_times(kind: str, fwd: list[Op], modules: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seconds one layer of ``kind`` spends rerunning each module of ``modules`` in backward (its forward ops)."""
    zero = np.zeros(np.shape(fwd[0].time)) if fwd else np.zeros(1)
    return {mod: zero + sum((op.time for op in _module_ops(kind, mod, fwd)), start=zero) for mod in modules}
