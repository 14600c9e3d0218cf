"""Capacity planning at scale: sweeps of full plans over grids of request fields (``shardplan sweep``).

Pure functions over the public planner entry points (``planner.train.plan_training``,
``planner.infer.plan_inference``): grid syntax (``grid``), expansion into validated, deduplicated requests
(``points``), execution on a process pool or Ray (``execute``), rows with time to train, cost, scaling and the
minimum serving fleet (``aggregate``), prices (``prices``) and flat tables (``tabular``).
"""

from shardplan.sweep.points import Expansion, Point, expand, request_key
from shardplan.sweep.run import SweepResult, run_sweep

__all__ = ["Expansion", "Point", "SweepResult", "expand", "request_key", "run_sweep"]
