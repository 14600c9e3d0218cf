"""Planning the distinct requests of a sweep: in this process, on a local process pool, or as Ray tasks.

Each request is planned by the same function whichever backend runs it (``plan_request``), and the planner
is deterministic (CP-SAT with one worker and a fixed seed; ties broken by a fixed rank), so the results are
identical across backends. Results come back in request order, not completion order.

Ray is the optional ``ray`` extra; with ``ray_address`` the tasks go to that cluster (the workers must have
shardplan installed), otherwise a local Ray instance with ``workers`` CPUs is started and stopped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from shardplan.errors import ShardplanError

Backend = Literal["serial", "pool", "ray"]
Progress = Callable[[int, int], None]
RAY_MISSING = "--ray needs the ray package: pip install 'shardplan[ray]'"

RESULT_KEYS = {"status", "reason", "suggestions", "plan", "metrics", "memory"}


def plan_request(kind: str, request: Any) -> dict[str, Any]:
    """Plan one request; returns the result's JSON fields (``RESULT_KEYS``) and CP-SAT's status.

    A request the planner rejects (e.g. no layout uses exactly this many GPUs) is an infeasible result
    carrying the planner's message as its reason, not a failure of the sweep.
    """
    if kind == "train":
        from shardplan.planner.training.solve import plan_training as plan
    else:
        from shardplan.planner.serving.solve import plan_inference as plan
    try:
        result = plan(request)
    except ShardplanError as e:
        return {"status": "infeasible", "reason": str(e), "suggestions": [], "plan": None, "metrics": None,
                "memory": None, "solver_status": "not run"}
    out = result.model_dump(mode="json", include=RESULT_KEYS)
    out["solver_status"] = result.solver.status
    return out


def require_ray() -> None:
    """Raise the one-line install hint when ray is missing (called before any work)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ShardplanError(RAY_MISSING, field="ray") from None


def default_workers() -> int:
    return os.cpu_count() or 1


def run_requests(kind: str, requests: list[Any], *, backend: Backend = "pool", workers: int | None = None,
                 ray_address: str | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """``plan_request`` of every request, in order; ``progress(done, total)`` after each one finishes."""
    workers = max(1, workers or default_workers())
    if not requests:
        return []
    if backend == "ray":
        return _run_ray(kind, requests, workers, ray_address, progress)
    if backend == "serial" or workers == 1 or len(requests) == 1:
        return _run_serial(kind, requests, progress)
    return _run_pool(kind, requests, workers, progress)


def _run_serial(kind: str, requests: list[Any], progress: Progress | None) -> list[dict[str, Any]]:
    out = []
    for i, req in enumerate(requests, start=1):
        out.append(plan_request(kind, req))
        if progress:
            progress(i, len(requests))
    return out


def _run_pool(kind: str, requests: list[Any], workers: int, progress: Progress | None) -> list[dict[str, Any]]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # fork: workers inherit the imported planner (no re-import per worker); forkserver where fork is absent.
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    out: list[dict[str, Any] | None] = [None] * len(requests)
    with ProcessPoolExecutor(max_workers=min(workers, len(requests)), mp_context=mp.get_context(method)) as pool:
        futures = {pool.submit(plan_request, kind, req): i for i, req in enumerate(requests)}
        for done, fut in enumerate(as_completed(futures), start=1):
            out[futures[fut]] = fut.result()
            if progress:
                progress(done, len(requests))
    return [r for r in out if r is not None]


def _run_ray(kind: str, requests: list[Any], workers: int, address: str | None,
             progress: Progress | None) -> list[dict[str, Any]]:
    require_ray()
    import ray

    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        task = ray.remote(num_cpus=1)(plan_request)
        refs = [task.remote(kind, req) for req in requests]
        pending, done = list(refs), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done += len(ready)
            if progress:
                progress(done, len(requests))
        return list(ray.get(refs))
    finally:
        if started:
            ray.shutdown()
