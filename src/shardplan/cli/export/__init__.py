"""From a plan to a launch: other frameworks' arguments and config files for a chosen layout.

Training plans export to Megatron-LM (arguments), DeepSpeed (config JSON) and torchtitan (TOML); serving plans
to ``vllm serve`` flags (``vllm_args``); offload plans to FlexGen's ``flex_opt`` flags (``flexgen_args``).
Exporters are presentation: they translate a layout and never compute a cost. Every flag and key they write
exists in the target framework (``tests/data/export/*.json`` lists them with the source commit). A choice the
target cannot express is refused with a ``ShardplanError`` that names the option; one it expresses only
approximately becomes a note.

This module stays light (the CLI imports it to declare ``--export``): exporters load on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from shardplan.errors import ShardplanError

if TYPE_CHECKING:
    from shardplan.cli.export.base import Export, TrainTarget

__all__ = ["EXPORT_JOBS", "TRAIN_EXPORTERS", "Export", "TrainFormat", "TrainTarget", "export_train", "exporter",
           "flexgen_args", "layout_summary", "shell_join", "train_target", "vllm_args"]


class TrainFormat(StrEnum):
    """Where a training plan can be exported (``--export``)."""

    MEGATRON = "megatron"
    """Megatron-LM ``pretrain_gpt.py`` arguments, one per line (``#`` lines are comments)."""
    DEEPSPEED = "deepspeed"
    """A DeepSpeed config JSON: batch sizes, ZeRO stage and offload, precision, activation checkpointing."""
    TORCHTITAN = "torchtitan"
    """A torchtitan TOML fragment: ``[parallelism]``, ``[activation_checkpoint]``, ``[training]``."""


TRAIN_EXPORTERS = {"megatron": "shardplan.cli.export.megatron", "deepspeed": "shardplan.cli.export.deepspeed",
                   "torchtitan": "shardplan.cli.export.torchtitan"}
"""The registry of training exporters: name → module whose ``export(target, *, file_name)`` returns an Export."""

EXPORT_JOBS = {"megatron": "train", "deepspeed": "train", "torchtitan": "train", "vllm": "infer",
               "flexgen": "offload"}
"""Every export name and the command whose plans it exports."""

_LAZY = {"Export": "base", "TrainTarget": "base", "layout_summary": "base", "shell_join": "base",
         "train_target": "base", "vllm_args": "vllm", "flexgen_args": "flexgen"}


def exporter(name: str) -> Callable[..., Export]:
    """The training exporter called ``name``; other names fail with the list (and the command they belong to)."""
    if name not in TRAIN_EXPORTERS:
        job = EXPORT_JOBS.get(name)
        hint = f" ({name} exports `shardplan {job}` plans)" if job else ""
        raise ShardplanError(f"'{name}' is not a training export: use {', '.join(TRAIN_EXPORTERS)}{hint}",
                             field="export")
    return importlib.import_module(TRAIN_EXPORTERS[name]).export


def export_train(fmt: TrainFormat | str, target: TrainTarget, *, file_name: str | None = None) -> Export:
    """The file for ``fmt`` (megatron, deepspeed, torchtitan); ``file_name`` is quoted in launch hints."""
    return exporter(str(fmt))(target, file_name=file_name)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"shardplan.cli.export.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'shardplan.cli.export' has no attribute '{name}'")
