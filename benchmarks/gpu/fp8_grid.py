"""Hopper's FP8 GEMM grids from the H200 measurements (runs 12 and 13, ``fp8_parts.part_fp8grid``), as
``hardware/gemm_data_fp8.py`` stores them: per (b, M, N, K) cell, OpenXLA's H100 bf16 rate times the FP8 GEMM's gain
over the bf16 GEMM of the same cell measured on the H200 (the bf16 time over the FP8 time, each the mean of the two
runs' medians), with fast and with split accumulation. Measured side by side in one harness, the gain carries over to
the H100's own grid; the harness's absolute rates (0.95-0.97 of OpenXLA's cells as a fraction of each one's best shape)
do not enter.

``.venv/bin/python benchmarks/gpu/fp8_grid.py`` prints the table; ``--check`` exits 1 if the stored table differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
RUNS = ("h200_run12.json", "h200_run13.json")
DIMS = (256, 512, 1024, 2048, 4096)
MODES = {"fast": "fp8_fast_s", "split": "fp8_split_s"}
# The H100's best-shape bf16 matmul, TFLOP/s (stas00/ml-engineering@744d01e), the rate OpenXLA's grid is read against.
H100_BF16_MAMF = 794.5


def runs() -> list[dict]:
    return [json.loads((RESULTS / r).read_text())["fp8grid"] for r in RUNS]


def best_gain() -> float:
    """The best-shape FP8 rate over the best-shape bf16 rate, each the highest mean rate of the five large shapes."""
    rs = runs()
    best = {}
    for key in ("bf16_s", "fp8_fast_s"):
        rates = []
        for i, row in enumerate(rs[0]["best"]):
            t = sum(r["best"][i][key] for r in rs) / len(rs)
            rates.append(2.0 * row["m"] * row["n"] * row["k"] / t / 1e12)
        best[key] = max(rates)
    return best["fp8_fast_s"] / best["bf16_s"]


def grid_best() -> float:
    """The rate the grids are read against: the H100's best-shape bf16 matmul times the measured best-shape gain."""
    return round(H100_BF16_MAMF * best_gain(), 1)


def gains(key: str) -> dict[tuple[int, int, int, int], float]:
    """The FP8 GEMM's speed-up over bf16 per measured (b, M, N, K) cell: mean bf16 time over mean FP8 time."""
    rs = runs()
    out = {}
    for i, c in enumerate(rs[0]["cells"]):
        bf16, fp8 = (sum(r["cells"][i][k] for r in rs) / len(rs) for k in ("bf16_s", key))
        out[(c["b"], c["m"], c["n"], c["k"])] = bf16 / fp8
    return out


def grid(key: str) -> dict[int, dict[tuple[int, int], tuple[float, ...]]]:
    """TFLOP/s per (b, (M, N)) over K: OpenXLA's H100 bf16 cell times the measured gain. Cells with b > 1 that no
    query reads (M and N both below 4096, not measured) take the b = 1 gain."""
    from shardplan.hardware.gemm_data import GEMM_TABLES

    xla, g = GEMM_TABLES["xla-sm90"], gains(key)
    return {b: {(m, n): tuple(round(xla[b][(m, n)][j] * g.get((b, m, n, k), g[(1, m, n, k)]), 1)
                              for j, k in enumerate(DIMS)) for m in DIMS for n in DIMS} for b in (1, 2, 4)}


def render(name: str, g: dict[int, dict[tuple[int, int], tuple[float, ...]]]) -> str:
    lines = [f'    "{name}": {{']
    for b, cells in g.items():
        lines.append(f"        {b}: {{")
        items = [f"({m}, {n}): {v}" for (m, n), v in cells.items()]
        for j in range(0, len(items), 2):
            lines.append("            " + ", ".join(items[j:j + 2]) + ",")
        lines.append("        },")
    lines.append("    },")
    return "\n".join(lines)


def main() -> int:
    tables = {f"h200-fp8-{mode}": grid(key) for mode, key in MODES.items()}
    if "--check" in sys.argv:
        from shardplan.hardware.gemm_data import GEMM_TABLE_MAMF, GEMM_TABLES
        ok = all(GEMM_TABLES.get(n) == t for n, t in tables.items())
        ok &= all(GEMM_TABLE_MAMF.get(n) == grid_best() for n in tables)
        print("stored table matches the runs" if ok else "stored table differs from the runs")
        return 0 if ok else 1
    print(f"FP8_GEMM_BEST: float = {grid_best()}  # best-shape gain {best_gain():.4f}")
    for n, t in tables.items():
        print(render(n, t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
