"""shardplan: how should this model be laid out on this hardware?

An analytical cost model (time and memory per layer) and an exact OR-Tools CP-SAT planner for
LLM training, serving and single-GPU offloading.

The notebook API (``shardplan.api``) is reachable from here without importing it up front::

    import shardplan
    plan = shardplan.plan_training("llama-3.1-70b", "dgx-h100", gpus=64, global_batch=256, seq_len=8192)
"""

from typing import Any

__version__ = "0.1.0"

_API = ("plan_training", "estimate_training", "export_training", "plan_inference", "estimate_inference",
        "plan_offload", "estimate_offload", "calibrate", "sweep_training", "sweep_inference")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    """Load ``shardplan.api`` on first use of one of its functions (keeps ``import shardplan`` light)."""
    if name in _API:
        from shardplan import api

        return getattr(api, name)
    raise AttributeError(f"module 'shardplan' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
