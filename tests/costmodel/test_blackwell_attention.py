"""Blackwell attention from NVIDIA's measured cuDNN runs (cudnn-frontend benchmark/sdpa_benchmark_training/artifacts:
one Llama-3.1-405B attention layer, batch 1, 128 query heads, head dim 128, causal, bf16): the cost model's kernel
time for that layer is the measured time."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import attention_time
from shardplan.hardware import get_system

HEADS, HEAD_DIM = 128, 128


def _layer(system: str, seq: int, backward: bool, kernel: str = "cudnn") -> float:
    flops = 4.0 * seq * seq * HEADS * HEAD_DIM / 2 * (2.5 if backward else 1.0)  # causal half; backward 2.5×
    nbytes = 4.0 * seq * HEADS * HEAD_DIM * 2  # q, k, v, o in bf16 (far below the compute time)
    gpu = get_system(system).gpu
    return float(attention_time(gpu, np.array([flops]), np.array([nbytes]), "bf16", backward=backward, kernel=kernel,
                                causal=True, head_dim=HEAD_DIM, seq=float(seq))[0])


# The benchmark README's B200 pair at 32k tokens: forward 24.645 ms through PyTorch SDPA, 24.543 through the cuDNN
# frontend (which Transformer Engine calls); backward 78.674 and 73.210 ms.
FWD_EXTRA_MS, BWD_RATIO = 24.645 - 24.543, 73.210 / 78.674


@pytest.mark.parametrize(("system", "seq", "fwd_ms", "bwd_ms", "pytorch"), [
    ("gb200-nvl72", 8192, 1.389, 4.542, False),  # sdpa_bf16_benchmark_results_NVIDIA_GB200.csv, cudnn_fe (9.17.0)
    ("dgx-b200", 32768, 24.795, 79.338, True),  # ..._NVIDIA_B200.csv, pyt_cudnn (cuDNN 9.10.2)
    ("gb300-nvl72", 16384, 5.167, 17.345, True),  # ..._NVIDIA_GB300.csv, pyt_cudnn (cuDNN 9.13.0)
])
def test_the_measured_layer_takes_the_measured_time(system: str, seq: int, fwd_ms: float, bwd_ms: float,
                                                    pytorch: bool) -> None:
    """As the cuDNN frontend runs it: rows measured through PyTorch less the README pair's difference."""
    if pytorch:
        fwd_ms, bwd_ms = fwd_ms - FWD_EXTRA_MS, bwd_ms * BWD_RATIO
    assert _layer(system, seq, False) * 1e3 == pytest.approx(fwd_ms, rel=5e-3)
    assert _layer(system, seq, True) * 1e3 == pytest.approx(bwd_ms, rel=5e-3)


def test_flash_attention_2_is_slow_on_blackwell() -> None:
    # PyTorch SDPA's FlashAttention-2 on the GB200 at 8192: 5.308 ms forward, 3.8x cuDNN's 1.389 (same csv)
    assert _layer("gb200-nvl72", 8192, False, kernel="flash2") * 1e3 == pytest.approx(5.308, rel=5e-3)


def test_shorter_sequences_take_the_4096_token_rate() -> None:
    # B200 at 4096: the layer's rate there; a quarter of the work at 2048 runs at that rate
    # (each kernel also pays the GPU's fixed per-kernel time once)
    fixed = get_system("dgx-b200").gpu.kernel_fixed_s
    assert _layer("dgx-b200", 2048, False) - fixed == pytest.approx((_layer("dgx-b200", 4096, False) - fixed) / 4,
                                                                   rel=1e-6)


def test_blackwell_presets_run_transformer_engines_cudnn_attention() -> None:
    for name in ("dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"):
        assert get_system(name).software.attention == "cudnn"


def test_full_blocks_on_blackwell_take_the_h100_mask_ratio() -> None:
    """The Blackwell curves are causal only: a full (non-causal) block, as context parallelism runs off the diagonal,
    takes the causal rate × the H100 cuDNN ratio (head dim 128, 4096 tokens: non-causal 609 / causal 518 TFLOP/s,
    FlashAttention-3 paper Figs. 5-6)."""
    from shardplan.costmodel.core.kernels import attention_efficiency

    gpu = get_system("gb200-nvl72").gpu
    kw = {"backward": False, "head_dim": 128.0, "seq": 4096.0}
    full, causal = (attention_efficiency(gpu, "cudnn", causal=c, **kw) for c in (False, True))
    assert full is not None and causal is not None
    assert float(full / causal) == pytest.approx(609 / 518, rel=1e-9)
