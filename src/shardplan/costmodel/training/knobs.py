"""Enumerated knobs of a layout (a light module: the CLI imports it at start-up)."""

from __future__ import annotations

from enum import StrEnum


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198)."""

    NONE = "none"
    """Store every activation: most memory, no extra FLOPs."""
    SELECTIVE = "selective"
    """Recompute core attention (QKᵀ, softmax, dropout, ·V): drops the 5·a·s/h term for ~2–7% more time."""
    FULL = "full"
    """Store only each layer's input (2·s·b·h bytes) and rerun the layer's forward pass in backward."""


RECOMPUTE_CODE = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
RECOMPUTE_OF_CODE = {v: k for k, v in RECOMPUTE_CODE.items()}


# Megatron-LM's selective recompute modules the cost model prices (``--recompute-modules``; d98e8a6
# megatron/core/transformer/transformer_config.py ``recompute_modules``; the default is core_attn alone). A row of
# layouts carries the set as a bit mask (bit i: ``RECOMPUTE_MODULES[i]``). Two more names are other frameworks'
# whole-layer policies, each alone in a set (``recompute_modules.POLICY_RULES``): torchtitan's per-op selective
# checkpointing (selective_ac_option = "op") and MaxText's remat_policy save_dot_except_mlpwi.
RECOMPUTE_POLICIES = ("torchtitan_op", "maxtext_save_dot_except_mlpwi")
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "shared_experts", "moe", "mla_up_proj",
                     *RECOMPUTE_POLICIES)
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)


def modules_mask(names: tuple[str, ...] | None) -> int:
    """Bit mask of a module set (None: Megatron's default, core_attn)."""
    return sum(1 << RECOMPUTE_MODULES.index(n) for n in set(DEFAULT_RECOMPUTE_MODULES if names is None else names))


def modules_of_mask(mask: int) -> tuple[str, ...]:
    """The module set of a bit mask, in ``RECOMPUTE_MODULES`` order."""
    return tuple(n for i, n in enumerate(RECOMPUTE_MODULES) if mask >> i & 1)


# Multi-token-prediction modules a workload may train (DeepSeek-V3 trains 1; the bound only keeps input sane).
MAX_MTP_LAYERS = 16
