"""Shared by the parts of ``measure.py``: the device, the time budget, CUDA-event timing, random inputs, nvidia-smi."""

from __future__ import annotations

import os
import subprocess
import time

import torch

DEV = "cuda"
BF16 = torch.bfloat16
T0 = time.time()
BUDGET_S = float(os.environ.get("MEASURE_BUDGET_S", "330"))


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def bench(fn, *args: object, warm_ms: float = 10, rep_ms: float = 40) -> float:
    """Median seconds of ``fn(*args)`` (triton do_bench: CUDA events, L2 flushed between repeats)."""
    from triton.testing import do_bench

    return float(do_bench(lambda: fn(*args), warmup=warm_ms, rep=rep_ms, return_mode="median")) * 1e-3


def rnd(*shape: int, grad: bool = False) -> torch.Tensor:
    return (torch.randn(*shape, device=DEV, dtype=BF16) * 0.02).requires_grad_(grad)


def smi(query: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"error {e}"


