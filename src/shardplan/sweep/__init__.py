"""Capacity planning at scale: sweeps of full plans over grids of request fields (``shardplan sweep``).

Pure functions over the public planner entry points (``planner.train.plan_training``,
``planner.infer.plan_inference``): grid syntax (``grid``), expansion into validated, deduplicated requests
(``points``), execution on a process pool or Ray (``execute``), rows with time to train, cost, scaling and the
minimum serving fleet (``aggregate``), prices (``prices``) and flat tables (``tabular``).
"""

from typing import Any

__all__ = ["Expansion", "Point", "SweepResult", "expand", "request_key", "run_sweep"]
_WHERE = {"Expansion": "points", "Point": "points", "expand": "points", "request_key": "points",
          "SweepResult": "run", "run_sweep": "run"}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (the CLI imports this package's grid syntax at start-up)."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"shardplan.sweep.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'shardplan.sweep' has no attribute {name!r}")
