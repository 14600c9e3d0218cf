"""``run_sweep``: expand the grid, plan each distinct request once (pool, Ray or in-process), build the rows."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.sweep import aggregate as agg
from shardplan.sweep.execute import Backend, Progress, run_requests
from shardplan.sweep.points import Expansion, Kind, expand
from shardplan.sweep.prices import PriceFile


class SweepResult(BaseModel):
    """The rows of a sweep (``--json`` prints ``points`` and ``summary``)."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    points: list[dict[str, Any]] = Field(description="One row per grid point, in grid order.")
    summary: dict[str, Any] = Field(description="Counts, timing, and the deadline / minimum-fleet picks.")


def rows_for(exp: Expansion, results: list[dict[str, Any]], *, tokens: float | None = None,
             prices: PriceFile | None = None, deadline_s: float | None = None) -> tuple[list[dict[str, Any]],
                                                                                        list[dict[str, Any]]]:
    """Rows of every point from the results of ``exp.requests`` (in its order), and the picks."""
    rows = agg.base_rows(exp, dict(zip(exp.requests, results, strict=True)))
    if exp.kind == "train":
        agg.add_training(rows, tokens=tokens, prices=prices)
        agg.add_scaling(rows)
        picks = agg.add_frontier(rows, deadline_s=deadline_s) if tokens is not None else []
    else:
        agg.add_serving(rows, prices=prices)
        agg.add_scaling(rows)
        picks = agg.min_fleets(rows)
    return rows, picks


def run_sweep(kind: Kind, axes: dict[str, list[Any]], options: dict[str, Any] | None = None, *,
              tokens: float | None = None, prices: PriceFile | None = None, deadline_s: float | None = None,
              backend: Backend = "pool", workers: int | None = None, ray_address: str | None = None,
              progress: Progress | None = None, expansion: Expansion | None = None) -> SweepResult:
    """Plan every point of the grid ``axes`` (see ``points.expand``) and return the rows.

    ``expansion`` reuses a grid already expanded (and so validated) by the caller.
    """
    t0 = time.perf_counter()
    exp = expansion or expand(kind, axes, options)
    results = run_requests(kind, list(exp.requests.values()), backend=backend, workers=workers,
                           ray_address=ray_address, progress=progress)
    rows, picks = rows_for(exp, results, tokens=tokens, prices=prices, deadline_s=deadline_s)
    wall = time.perf_counter() - t0
    summary = {"points": len(rows), "unique_requests": len(exp.requests),
               "infeasible": sum(r["status"] == "infeasible" for r in rows), "backend": backend,
               "workers": workers, "wall_time_s": wall, "points_per_s": len(rows) / wall if wall else None,
               "tokens": tokens, "deadline_s": deadline_s,
               "picks": [{k: r.get(k) for k in ("hardware", "model", "num_gpus", "dtype", "seq_len", "global_batch",
                                                "prompt_len", "gen_len", "request_rate", "time_to_train_s",
                                                "fleet_gpus", "copies") if k in r} for r in picks]}
    return SweepResult(kind=kind, points=rows, summary=summary)
