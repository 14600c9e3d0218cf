"""Sliding-window attention at its measured rate. NVIDIA's cuDNN benchmark runs gpt-oss's windowed layer (batch 2 ×
128 heads, head dim 64, causal with a 128-key window, bf16; NVIDIA/cudnn-frontend@3929da2
benchmark/sdpa_benchmark_training/results): GB300 0.202 ms forward, 0.442 ms backward at 4,096 tokens; GB200 0.210 and
0.465; H200 0.358 and 1.042; GB200 at 16,384 tokens 0.822 and 1.818. gpt-oss-120b at microbatch 4 on one GPU is the
same 256 (sequence, head) pairs, so its sliding layer's kernels should take those times; the model had priced them at
the full causal rate, 4-6x faster."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import window_factor
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware import get_system
from shardplan.hardware.gpus import GPUS
from shardplan.models import get_model


def _flash(system: str, seq: int, kind: str = "sliding") -> tuple[float, float]:
    work = TrainWorkload(seq_len=seq, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=4, zero_stage=1)], 64)
    ops = {o.name: o for o in (lambda c: c.fwd_ops + c.bwd_ops)(
        kind_costs(Ctx(get_model("gpt-oss-120b"), get_system(system), work, rows))[kind])}
    return float(np.ravel(ops["attn.flash"].time)[0]), float(np.ravel(ops["attn.flash.bwd"].time)[0])


@pytest.mark.parametrize(("system", "seq", "fwd_ms", "bwd_ms"), [("gb300-nvl72", 4096, 0.202, 0.442),
                                                                 ("gb200-nvl72", 4096, 0.210, 0.465),
                                                                 ("gb200-nvl72", 16384, 0.822, 1.818),
                                                                 ("hgx-h200", 4096, 0.358, 1.042)])
def test_gpt_oss_sliding_kernels_take_cudnns_measured_time(system: str, seq: int, fwd_ms: float,
                                                            bwd_ms: float) -> None:
    fwd, bwd = _flash(system, seq)
    assert fwd == pytest.approx(fwd_ms * 1e-3, rel=0.05)
    assert bwd == pytest.approx(bwd_ms * 1e-3, rel=0.05)


def test_the_full_attention_layers_keep_the_causal_rate() -> None:
    fwd, _ = _flash("gb300-nvl72", 4096, kind="attention")
    full_pairs, window_pairs = 4096 / 2 + 64, 128 + 64  # per query, as the kernel executes them
    sliding, _ = _flash("gb300-nvl72", 4096)
    # per executed pair the windowed kernel is over 4x slower than the causal one
    assert (sliding / window_pairs) / (fwd / full_pairs) > 4


def test_wider_windows_approach_the_causal_rate_and_a_window_over_the_sequence_is_causal() -> None:
    gpu = GPUS["b200"]  # no measurement of its own: the GB200's ratio
    f = {w: float(window_factor(gpu, "cudnn", backward=False, head_dim=128, seq=8192.0, window=w))
         for w in (128, 1024, 4096, 8192)}
    assert f[128] < f[1024] < f[4096] < 1.0 and f[8192] == 1.0
    assert f[128] == pytest.approx(float(window_factor(GPUS["gb200"], "cudnn", backward=False, head_dim=128,
                                                       seq=8192.0, window=128)), rel=0.01)
    assert float(window_factor(gpu, "cudnn", backward=True, head_dim=64, seq=4096.0, window=None)) == 1.0
