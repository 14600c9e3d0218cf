"""A GPU whose attention is measured at head dim 128 only (B200: cuDNN's curves, hardware/attention_data.py) takes
the head-dim dependence the H100's measured curves show (FlashAttention-3 paper Figs. 5-6)."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import attention_time, head_dim_factor
from shardplan.hardware import get_system


def test_head_dim_64_runs_at_the_h100_cudnn_ratio() -> None:
    # cuDNN, causal forward at 4096: 363 TFLOP/s at head dim 64 against 518 at 128 (attention_data.py row values)
    assert float(head_dim_factor("cudnn", backward=False, causal=True, head_dim=64, seq=4096.0)) == \
        pytest.approx(363 / 518)
    # head dims nearest 128 on a log scale keep the scalar
    assert float(head_dim_factor("cudnn", backward=False, causal=True, head_dim=96, seq=4096.0)) == 1.0


def test_b200_attention_at_head_dim_64_is_slower_for_the_same_work() -> None:
    gpu = get_system("dgx-b200").gpu
    flops, nbytes = np.array([1e13]), np.array([1e8])
    t64, t128 = (attention_time(gpu, flops, nbytes, "bf16", kernel="cudnn", head_dim=d, seq=4096.0)
                 for d in (64.0, 128.0))
    assert float(t64[0] / t128[0]) == pytest.approx(518 / 363, rel=1e-3)  # plus the fixed launch time


def test_the_h100_keeps_its_own_curves() -> None:
    gpu = get_system("dgx-h100").gpu
    flops, nbytes = np.array([1e13]), np.array([1e8])
    t = attention_time(gpu, flops, nbytes, "bf16", kernel="cudnn", head_dim=64.0, seq=4096.0)
    assert float(t[0]) == pytest.approx(1e13 / 363e12, rel=1e-3)
