"""The Gated DeltaNet core at FLA's measured kernel times. flash-linear-attention's ``chunk_gated_delta_rule``
forward on B200 (d_k = d_v = 128), published beside FlashInfer's Blackwell kernel: flashinfer-ai/flashinfer PR #3001
(FLA 0.4.2, Triton 3.5.1; Qwen3.5 shapes at TP 8 and 4) and vllm-project/vllm PR #43273 (Qwen3.6-27B at TP 1, 48 value
heads). The model had priced the core as a roofline kernel, 6-11x under these times; ``core.recurrent.GDN_FLA_*`` are
read off them (chunk recurrence, per-token work, fixed time), so this checks that the three-term form carries all
fifteen within −28…+20%."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from shardplan.costmodel.core.recurrent import gdn_chunked_time
from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

# (value heads per GPU, sequence lengths, measured ms)
FLA_B200 = [
    (8, [8192], 0.338), (8, [4096], 0.215), (8, [2048], 0.213), (8, [6144, 2048], 0.285), (8, [4096, 4096], 0.239),
    (8, [2048, 6144], 0.285), (8, [1024, 7168], 0.308), (8, [2048] * 4, 0.208), (8, [1024] * 8, 0.214),
    (16, [8192], 0.424),
    (48, [8192], 1.116), (48, [16384], 2.017), (48, [1024] * 8, 1.021), (48, [2048] * 8, 1.819),
    (48, [1024] * 16, 1.812),
]


def _priced(heads: int, seqs: list[int]) -> float:
    # uneven sequences: the longest one's chunk chain is the serial part
    model = get_model("qwen3-next-80b-a3b")  # d_k = d_v = 128
    tokens = float(sum(seqs))
    return float(gdn_chunked_time(model, tokens, float(heads), tokens / max(seqs)))


def test_fla_times_on_b200_within_the_fit() -> None:
    errors = [_priced(h, seqs) / (ms * 1e-3) - 1 for h, seqs, ms in FLA_B200]
    assert all(-0.30 < e < 0.22 for e in errors), errors
    assert statistics.median(abs(e) for e in errors) < 0.12


def test_the_longer_chain_not_the_token_count_sets_one_long_sequence() -> None:
    # 8 value heads: 8,192 tokens in one sequence (128 chained chunks) take longer than 8 sequences of 1,024
    assert _priced(8, [8192]) > _priced(8, [1024] * 8)
    # 48 value heads: the per-token work dominates, however the tokens are split
    assert _priced(48, [8192]) == pytest.approx(_priced(48, [1024] * 8))


def test_training_prices_the_core_at_fla_not_at_its_roofline() -> None:
    model = get_model("qwen3-next-80b-a3b")  # 32 value heads: TP 4 leaves 8 per GPU
    rows = LayoutArrays.from_layouts([TrainLayout(tp=4, pp=1, dp=2, microbatch=1, zero_stage=1,
                                                  sequence_parallel=True)], 64)
    ctx = Ctx(model, get_system("dgx-b200"), TrainWorkload(seq_len=8192, global_batch=64), rows)
    (core,) = [o for o in L.linear_ops(ctx) if o.name == "lin.core"]
    assert float(np.ravel(core.time)[0]) == pytest.approx(0.338e-3, rel=0.05)  # the 1×8,192, h_v = 8 measurement
