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


def fwd_bwd_once(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, int]:
    """One forward and backward of ``model(ids, labels)`` (a loss) from cleared gradients: forward and backward
    seconds (CUDA events) and the bytes the forward left allocated (what it stores for the backward, and the loss)."""
    for p in model.parameters():
        p.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    loss = model(ids, labels)
    e1.record()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    loss.backward()
    e2.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1e-3, e1.elapsed_time(e2) * 1e-3, held


def phase_medians(got: dict[str, list[tuple[float, float, int]]]) -> dict[str, dict[str, object]]:
    """Per mode, the medians of ``fwd_bwd_once``'s readings (and forward+backward), every reading, and the bytes held
    after the last forward."""
    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    return {mode: {"fwd_s": med([x[0] for x in xs]), "bwd_s": med([x[1] for x in xs]),
                   "fwdbwd_s": med([x[0] + x[1] for x in xs]), "all": xs, "after_forward_bytes": xs[-1][2]}
            for mode, xs in got.items()}

