"""Sweep throughput, on demand (not part of the test suite): points per second on a process pool and on a local
Ray instance, for a 200-point training sweep and a 100-point serving sweep.

    .venv/bin/python benchmarks/sweep_bench.py [--repeats 3] [--workers 2] [--no-ray]

Prints a markdown section: per-request planning time (serial, min/median/p90/max), then for each backend the
median wall time of ``run_sweep`` over the repeats and points/s, and whether its rows equal the serial rows.
Ray's start-up (``ray.init`` of a local instance) is timed apart, and the sweeps reuse one instance; the
per-task overhead is timed with empty tasks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from shardplan.sweep import expand, run_sweep
from shardplan.sweep.execute import plan_request

TRAIN = {"model": ["llama-3.1-8b", "llama-3.1-70b"],
         "hardware": ["dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x-8"],
         "gpus": [64, 128, 256, 512, 1024], "global_batch": [512, 1024, 2048, 4096], "seq_len": [4096]}  # 200
INFER = {"model": ["llama-3.1-8b", "llama-3.1-70b"],
         "hardware": ["dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x-8"],
         "gpus": [1, 2, 4, 8, 16], "prompt_len": [1024, 4096], "gen_len": [256], "request_rate": [20.0]}  # 100
SERVE_OPTIONS = {"max_tpot_s": 0.05}


def _per_request(kind: str, axes: dict[str, Any], options: dict[str, Any]) -> tuple[list[float], Any]:
    exp = expand(kind, axes, options)  # type: ignore[arg-type]
    times = []
    for req in exp.requests.values():
        t0 = time.perf_counter()
        plan_request(kind, req)
        times.append(time.perf_counter() - t0)
    return sorted(times), exp


def _timed(kind: str, axes: dict[str, Any], options: dict[str, Any], repeats: int, **kw: Any) -> tuple[float, Any]:
    walls, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run_sweep(kind, axes, options, **kw)  # type: ignore[arg-type]
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    ray = None
    if not args.no_ray:
        try:
            import ray
        except ImportError:
            ray = None
    lines = [f"## Sweeps (`benchmarks/sweep_bench.py`, {time.strftime('%Y-%m-%d')})", ""]
    ray_start = task_ms = None
    if ray is not None:
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - t0

        @ray.remote(num_cpus=1)
        def noop(x: int) -> int:
            return x

        ray.get([noop.remote(i) for i in range(20)])  # warm the workers
        t0 = time.perf_counter()
        ray.get([noop.remote(i) for i in range(500)])
        task_ms = (time.perf_counter() - t0) / 500 * 1e3
    rows = []
    for kind, axes, opts in (("train", TRAIN, {}), ("infer", INFER, SERVE_OPTIONS)):
        times, exp = _per_request(kind, axes, opts)
        n, u = len(exp.points), len(exp.requests)
        p90 = times[int(0.9 * (len(times) - 1))]
        lines.append(f"- {kind}: {n} points, {u} distinct requests; "
                     f"planning one request (serial, in-process): min {times[0]:.3f} s, median "
                     f"{statistics.median(times):.3f} s, p90 {p90:.3f} s, max {times[-1]:.3f} s, "
                     f"sum {sum(times):.1f} s")
        backends: list[tuple[str, dict[str, Any]]] = [("serial (in-process)", {"backend": "serial"}),
                                                      ("pool", {"backend": "pool", "workers": args.workers})]
        if ray is not None:
            backends.append(("ray (local)", {"backend": "ray", "workers": args.workers}))
        serial = None
        for name, kw in backends:
            wall, res = _timed(kind, axes, opts, args.repeats, **kw)
            serial = serial or res
            rows.append(f"| {kind} | {n} | {u} | {res.summary['infeasible']} | {name} | {kw.get('workers', 1)} | "
                        f"{wall:.1f} s | {n / wall:.2f} | {'yes' if res.points == serial.points else 'NO'} |")
    lines += ["", f"Median of {args.repeats} runs of `run_sweep` (expansion, planning, rows); the machine is shared.",
              "", "| sweep | points | distinct | infeasible | backend | workers | wall | points/s | rows = serial |",
              "|---|---:|---:|---:|---|---:|---:|---:|---|", *rows]
    if ray is not None:
        lines += ["", f"- local Ray start-up (`ray.init`, {args.workers} CPUs): {ray_start:.1f} s (not in the times "
                  f"above); one empty task round trip, 500 in flight: {task_ms:.2f} ms"]
        ray.shutdown()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
