"""Hopper's FP8 GEMMs at their measured gain over bf16 (``hardware/gemm_data_fp8.py``): the grids come from the grid
cells of two H200 runs; the shapes checked here are the runs' other GEMMs (Llama linear layers and MoE experts), which
the grid never saw. Sources: benchmarks/gpu/results/h200_run12.json, h200_run13.json; benchmarks/gpu/RESULTS.md §11."""

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from shardplan.costmodel.core.gemm_shape import dtype_grid
from shardplan.costmodel.core.kernels import gemm_time
from shardplan.hardware.catalog import get_system
from shardplan.hardware.gemm_data import GEMM_TABLE_MAMF, GEMM_TABLES

GPU_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
RUNS = [json.loads((GPU_DIR / "results" / f"h200_run{i}.json").read_text()) for i in (12, 13)]


def _fp8_grid_module() -> ModuleType:
    """benchmarks/gpu/fp8_grid.py, a script outside the package, loaded by path."""
    spec = importlib.util.spec_from_file_location("fp8_grid", GPU_DIR / "fp8_grid.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_stored_grids_are_the_h100_grid_times_the_measured_gains() -> None:
    """Regenerated from the raw runs: every cell is OpenXLA's H100 bf16 cell times bf16 time / fp8 time."""
    mod = _fp8_grid_module()
    for name, key in (("h200-fp8-fast", "fp8_fast_s"), ("h200-fp8-split", "fp8_split_s")):
        assert GEMM_TABLES[name] == mod.grid(key)
        assert GEMM_TABLE_MAMF[name] == 1402.6
    # one cell by hand: b = 1, 4096 × 4096 × 4096
    cell = [r["fp8grid"]["cells"] for r in RUNS]
    i = next(j for j, c in enumerate(cell[0]) if (c["b"], c["m"], c["n"], c["k"]) == (1, 4096, 4096, 4096))
    gain = sum(c[i]["bf16_s"] for c in cell) / sum(c[i]["fp8_fast_s"] for c in cell)
    assert GEMM_TABLES["h200-fp8-fast"][1][(4096, 4096)][-1] == pytest.approx(780.2 * gain, abs=0.06)


def test_the_grid_read_follows_dtype_and_accumulation() -> None:
    assert dtype_grid("xla-sm90", "fp8") == "h200-fp8-fast"
    assert dtype_grid("xla-sm90", "fp8", split_accumulate=True) == "h200-fp8-split"
    assert dtype_grid("xla-sm100", "fp8", split_accumulate=True) == "xla-sm100-fp8"  # no split mode on Blackwell
    assert dtype_grid("xla-sm90", "bf16", split_accumulate=True) == "xla-sm90"


def _priced_gain(gpu: object, m: int, n: int, k: int, out: float, split: bool) -> float:
    t = {dt: float(gemm_time(gpu, 2.0 * m * n * k, e * (m * k + n * k) + out * m * n, dt, m=m, n=n, k=k,
                             split_accumulate=split and dt == "fp8")) for dt, e in (("bf16", 2.0), ("fp8", 1.0))}
    return t["bf16"] / t["fp8"]


@pytest.mark.parametrize(("group", "key", "median_tol"), [
    ("fwd", "fp8_fast_s", 0.03), ("dgrad", "fp8_split_s", 0.04), ("wgrad", "fp8_split_s", 0.03),
    ("expert_fwd", "fp8_fast_s", 0.05),
])
def test_priced_fp8_gain_matches_the_measured_gain_on_shapes_outside_the_grid(group: str, key: str,
                                                                             median_tol: float) -> None:
    """On the H200 preset, the model's bf16-over-fp8 time ratio for each measured shape against the measured one
    (mean of the two runs): the median within a few percent (measured medians 1.85 / 1.86 / 1.80 dense, 1.58 for the
    per-expert GEMMs; before the grid the experts were priced at 1.69). The weight gradient writes fp32."""
    gpu = get_system("hgx-h200").gpu
    idx = [i for i, r in enumerate(RUNS[0]["fp8shapes"]) if r["pass"] == group]
    assert len(idx) == (40 if group == "expert_fwd" else 72)
    ratios = []
    for i in idx:
        r = RUNS[0]["fp8shapes"][i]
        measured = sum(run["fp8shapes"][i]["bf16_s"] for run in RUNS) / sum(run["fp8shapes"][i][key] for run in RUNS)
        out = 4.0 if group == "wgrad" else 2.0
        ratios.append(_priced_gain(gpu, r["m"], r["n"], r["k"], out, key == "fp8_split_s") / measured)
    assert np.median(ratios) == pytest.approx(1.0, abs=median_tol)
    assert np.percentile(ratios, 90) < 1.15 and np.percentile(ratios, 10) > 0.85


def test_split_accumulation_prices_the_gradient_gemms_slower_where_it_measured_slower() -> None:
    """4096 × 4096 × 1024 (measured split/fast about 1.1 on both runs): a dgrad priced from the split grid takes
    longer than the same GEMM forward; bf16 and Blackwell fp8 do not depend on the mode."""
    m = n = 4096
    k = 1024
    runs = [r["fp8grid"]["cells"] for r in RUNS]
    i = next(j for j, c in enumerate(runs[0]) if (c["b"], c["m"], c["n"], c["k"]) == (1, m, n, k))
    measured = sum(c[i]["fp8_split_s"] for c in runs) / sum(c[i]["fp8_fast_s"] for c in runs)
    assert measured > 1.03
    flops, nbytes = 2.0 * m * n * k, 1.0 * (m * k + n * k) + 2.0 * m * n
    gpu = get_system("dgx-h100").gpu
    fast, split = (float(gemm_time(gpu, flops, nbytes, "fp8", m=m, n=n, k=k, split_accumulate=s)) - gpu.kernel_fixed_s
                   for s in (False, True))
    assert split / fast == pytest.approx(measured, rel=0.01)
    for system, dt in (("dgx-h100", "bf16"), ("dgx-b200", "fp8")):
        g = get_system(system).gpu
        a, b = (float(gemm_time(g, flops, nbytes, dt, m=m, n=n, k=k, split_accumulate=s)) for s in (False, True))
        assert a == b
