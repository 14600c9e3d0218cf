"""Catalog of model presets: a plain dict of validated ``ModelSpec``s, each with its source.

The data lives in ``presets.py`` (one comment per entry naming its config.json or paper table);
this module indexes it by name and resolves names with a "did you mean" on a miss.
"""

from __future__ import annotations

from shardplan.errors import UnknownNameError
from shardplan.models.presets import PRESETS, megatron_gpt
from shardplan.models.spec import ModelSpec

__all__ = ["MODELS", "get_model", "megatron_gpt"]

MODELS: dict[str, ModelSpec] = {m.name: m for m in PRESETS}
assert len(MODELS) == len(PRESETS), "duplicate preset name"


def get_model(name: str) -> ModelSpec:
    """The preset called ``name`` (case-insensitive), or an error suggesting close names."""
    key = name.strip().lower()
    if key not in MODELS:
        raise UnknownNameError("model", name, MODELS, field="model", listing="`shardplan models list`")
    return MODELS[key]
