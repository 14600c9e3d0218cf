"""Measured attention-kernel throughput, as data: TFLOP/s by kernel, direction, mask, head dim and sequence length.

Source for every H100 number: Shah et al., "FlashAttention-3" (arXiv 2407.08608 v2), Figures 5 (forward, BF16)
and 6 (backward, BF16), H100 80GB SXM5, batch·seqlen = 16k tokens, nheads·headdim = 2048; bar labels as
transcribed in the project's docs/physics_sources.md §3 (which panel is causal is inferred there: the lower
panel of each head-dim pair). FLOP convention of the benchmark (Dao-AILab/flash-attention
benchmarks/benchmark_flash_attention.py): forward 4·b·s²·h·d, halved when causal; backward 2.5× forward — the
same as the cost model's (causal pairs as executed), so efficiency = TFLOP/s / dense BF16 peak.
Figure 6 prints the non-causal backward only; the causal backward is derived as non-causal backward × (causal
forward / non-causal forward) at the same kernel, head dim and length (marked ``derived`` below).
"""

from __future__ import annotations

from shardplan.hardware.spec import AttentionCurve

SEQ = (512, 1024, 2048, 4096, 8192, 16384)

# kernel -> (direction, causal, head_dim) -> TFLOP/s at SEQ
H100_ATTENTION_TFLOPS: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]] = {
    "flash2": {  # FlashAttention-2 (Dao 2023), the flash backend of PyTorch SDPA
        ("fwd", False, 64): (282, 306, 318, 321, 322, 324),
        ("fwd", True, 64): (180, 229, 262, 284, 295, 299),
        ("fwd", False, 128): (309, 350, 362, 368, 370, 370),
        ("fwd", True, 128): (191, 260, 298, 319, 333, 335),
        ("fwd", False, 256): (275, 313, 321, 323, 324, 326),
        ("fwd", True, 256): (208, 251, 278, 293, 297, 298),
        ("bwd", False, 128): (214, 260, 291, 310, 318, 322),
    },
    "cudnn": {  # cuDNN fused attention: Transformer Engine's FusedAttention, preferred on Hopper
        ("fwd", False, 64): (335, 373, 395, 408, 412, 413),
        ("fwd", True, 64): (225, 288, 334, 363, 379, 388),
        ("fwd", False, 128): (497, 574, 617, 609, 600, 595),
        ("fwd", True, 128): (315, 410, 484, 518, 529, 539),
        ("fwd", False, 256): (470, 546, 580, 581, 580, 581),
        ("fwd", True, 256): (308, 391, 450, 483, 497, 509),
        ("bwd", False, 128): (305, 408, 465, 499, 518, 516),
    },
    "flash3": {  # FlashAttention-3
        ("fwd", False, 64): (333, 392, 460, 476, 496, 497),
        ("fwd", True, 64): (197, 265, 371, 420, 460, 473),
        ("fwd", False, 128): (467, 565, 625, 638, 646, 648),
        ("fwd", True, 128): (292, 423, 521, 579, 602, 616),
        ("fwd", False, 256): (482, 639, 707, 736, 746, 756),
        ("fwd", True, 256): (286, 427, 537, 612, 628, 642),
        ("bwd", False, 128): (316, 424, 501, 542, 559, 561),
    },
}


def curves(table: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]], seq: tuple[int, ...] = SEQ
           ) -> list[AttentionCurve]:
    """The table as ``AttentionCurve`` records (one per kernel, direction, mask and head dim) at lengths ``seq``."""
    return [AttentionCurve(kernel=k, direction=d, causal=c, head_dim=hd, seq=list(seq), tflops=list(v))
            for k, rows in table.items() for (d, c, hd), v in rows.items()]


H100_ATTENTION = curves(H100_ATTENTION_TFLOPS)


# Blackwell: NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/artifacts (sdpa_bf16_benchmark_results_NVIDIA_
# {B200,GB200,GB300}.csv at cudnn-frontend bb37575 / d48a60e): one layer of Llama-3.1-405B's attention (batch 1, 128
# query heads, 8 KV heads, head dim 128, causal, bf16), median of timed calls with free clocks; TFLOP/s count the
# causal half (the README's example: 24.543 ms at 32k tokens → 1434), backward 2.5× forward, as above. B200: PyTorch
# SDPA's cuDNN backend, cuDNN 9.10.2 (NGC PyTorch 25.06); GB200: cuDNN called through its frontend (cudnn_fe), cuDNN
# 9.17.0 (NGC 25.11); GB300: PyTorch SDPA's cuDNN backend, cuDNN 9.13.0 (NGC 25.09). flash2 is PyTorch SDPA's
# FlashAttention-2 backend on the same runs. From 4096 tokens: below it a single call's host time shows in the
# PyTorch rows (B200 0.287 ms at 2048 tokens through PyTorch against GB200's 0.129 ms through the frontend), so
# shorter sequences take the 4096-token rate.
BLACKWELL_SEQ = (4096, 8192, 16384, 32768, 65536, 131072)
B200_ATTENTION_TFLOPS: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]] = {
    "cudnn": {("fwd", True, 128): (855.678, 1171.278, 1332.415, 1419.000, 1382.330, 1355.418),
              ("bwd", True, 128): (701.265, 942.509, 1074.776, 1108.688, 1073.059, 1047.843)},
    "flash2": {("fwd", True, 128): (324.899, 373.392, 394.495, 403.739, 408.739, 410.988),
               ("bwd", True, 128): (256.427, 298.867, 319.979, 330.801, 335.402, 336.043)},
}
GB200_ATTENTION_TFLOPS: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]] = {
    "cudnn": {("fwd", True, 128): (1386, 1584, 1668, 1681, 1573, 1467),
              ("bwd", True, 128): (1054, 1211, 1304, 1348, 1229, 1188)},
    "flash2": {("fwd", True, 128): (387, 414, 430, 438, 442, 444),
               ("bwd", True, 128): (311, 338, 352, 360, 363, 363)},
}
GB300_ATTENTION_TFLOPS: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]] = {
    "cudnn": {("fwd", True, 128): (1144.867, 1495.674, 1702.463, 1795.879, 1770.478, 1720.854),
              ("bwd", True, 128): (892.572, 1130.076, 1267.827, 1319.161, 1301.700, 1280.022)},
    "flash2": {("fwd", True, 128): (366.238, 410.579, 430.746, 440.329, 444.845, 447.786),
               ("bwd", True, 128): (291.593, 330.096, 350.925, 362.028, 366.561, 368.391)},
}
# Transformer Engine calls cuDNN through its frontend, not through PyTorch's SDPA. The same B200, shape (32k tokens)
# and cuDNN measured both ways (cudnn-frontend benchmark/sdpa_benchmark_training/README.md, benchmark_single_sdpa.py
# examples): forward 24.645 ms through PyTorch, 24.543 ms through the frontend; backward 78.674 and 73.210 ms. So the
# PyTorch rows (B200, GB300) are taken to the frontend's: 0.102 ms less per forward call, backward × 73.210/78.674.
PYTORCH_FWD_EXTRA_S = (24.645 - 24.543) * 1e-3
PYTORCH_BWD_RATIO = 73.210 / 78.674
_LAYER_FWD_FLOP = tuple(4.0 * s * s * 128 * 128 / 2 for s in BLACKWELL_SEQ)  # the benchmark's layer, causal half


def via_frontend(table: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]]
                 ) -> dict[str, dict[tuple[str, bool, int], tuple[float, ...]]]:
    """PyTorch-SDPA cuDNN rates of the benchmark layer as the cuDNN frontend runs them (``PYTORCH_*``)."""
    fwd, bwd = table["cudnn"][("fwd", True, 128)], table["cudnn"][("bwd", True, 128)]
    f = tuple(w / (w / (t * 1e12) - PYTORCH_FWD_EXTRA_S) / 1e12 for w, t in zip(_LAYER_FWD_FLOP, fwd, strict=True))
    b = tuple(t / PYTORCH_BWD_RATIO for t in bwd)
    return {**table, "cudnn": {("fwd", True, 128): f, ("bwd", True, 128): b}}


B200_ATTENTION = curves(via_frontend(B200_ATTENTION_TFLOPS), BLACKWELL_SEQ)
GB200_ATTENTION = curves(GB200_ATTENTION_TFLOPS, BLACKWELL_SEQ)
GB300_ATTENTION = curves(via_frontend(GB300_ATTENTION_TFLOPS), BLACKWELL_SEQ)
# B300 (the GB300's die at 1100 W, unmeasured): the GB300's rates as the same fractions of its own bf16 peak
# (2250 of the GB300's 2500 TFLOP/s dense bf16: HGX B300 and GB300 NVL72 datasheets, as gpus.py has them), as its
# GEMMs take the B300's fractions of peak (gpus.py).
B300_ATTENTION = [c.model_copy(update={"tflops": [t * 2250 / 2500 for t in c.tflops]}) for c in GB300_ATTENTION]

# Sliding-window attention, measured: gpt-oss's windowed layers as NVIDIA's cuDNN benchmark runs them (batch 2, 128
# heads, head dim 64, causal with a 128-key window, bf16, non-deterministic backward; TFLOP/s count the window's
# pairs, s·128 − 128²/2 per head, forward 4·pairs·d, backward 2.5× that). GB200/GB300: cuDNN frontend 1.21.1, backend
# 9.22 (NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/gpt_oss/{gb200,gb300}/*.csv, its
# tflops column); H200: cuDNN 9.19, the same shapes (results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv, its
# fwd/bwd times converted by that count). A window this short leaves each 128-row query tile two key blocks, so the
# per-tile work (load Q, softmax rescaling, write O) is amortised over almost nothing: 4-6× under the full causal rate.
WINDOW_MEASURED = 128
WINDOW_HEAD_DIM = 64
WINDOW_SEQ = (2048, 4096, 8192, 16384, 32768)
WINDOW_TFLOPS: dict[str, dict[str, tuple[float, ...]]] = {  # GPU catalog name -> direction -> TFLOP/s at WINDOW_SEQ
    "gb200": {"fwd": (153, 161, 165, 167, 104), "bwd": (176, 182, 187, 188, 186)},
    "gb300": {"fwd": (160, 167, 172, 173, 108), "bwd": (184, 191, 198, 200, 199)},
    "h200-sxm": {"fwd": (100.3, 94.5, 92.4, 91.3, 90.8), "bwd": (85.3, 81.1, 79.3, 77.9, 75.8)},
}
# The measured GPU whose ratio a GPU without its own measurement takes: its die's (B200/B300 the GB200's/GB300's,
# H100/H800/H20 the H200's); any other, the H200's.
WINDOW_REFERENCE = {"b200": "gb200", "b300": "gb300", "h100-sxm": "h200-sxm", "h100-pcie": "h200-sxm",
                    "h800-sxm": "h200-sxm", "h20": "h200-sxm"}

# fp8 attention, measured: cuDNN's fused attention on fp8 Q/K/V against bf16, one Llama-3.1 layer (batch 2, or 1 on the
# H200; 64 query heads, 8 KV heads, head dim 128, causal, non-deterministic backward), times in ms at
# FP8_ATTENTION_SEQ. "cudnn-fp8": per-tensor scaled fp8, the kernel Transformer Engine's fp8_dpa calls under
# Float8CurrentScaling; "cudnn-mxfp8": MXFP8 (32-element blocks), what fp8_dpa runs under an MXFP8 recipe from TE
# v2.16 (TransformerEngine ee5dcec "Add MXFP8 attention (#2719)"), Blackwell only. The benchmark passes the scales, so
# the amax and quantize passes (a few reads of Q/K/V and dO) are not in these times nor priced. GB200/GB300: cuDNN
# frontend 1.21.1, backend 9.22 (NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/llama3.1/
# {gb200,gb300}/*.csv, time_ms); H200: cuDNN 9.19 (results/h200_919_only_cudnn/llama3.1_20260227_034703.csv,
# fwd/bwd_time_ms), where the fp8 backward is slower than bf16's from 4k tokens (1.57x at 32k).
FP8_ATTENTION_SEQ = (2048, 4096, 8192, 16384, 32768)
_BF16_MS = {  # GPU -> direction -> bf16 times at FP8_ATTENTION_SEQ, the same runs
    "gb200": {"fwd": (0.125, 0.391, 1.397, 5.150, 21.692), "bwd": (0.389, 1.198, 4.127, 16.554, 71.756)},
    "gb300": {"fwd": (0.100, 0.323, 1.185, 4.593, 18.014), "bwd": (0.356, 1.101, 3.832, 14.593, 59.024)},
    "h200-sxm": {"fwd": (0.142, 0.465, 1.708, 6.531, 25.566), "bwd": (0.464, 1.450, 5.083, 19.002, 75.688)},
}
_FP8_MS = {  # kernel -> GPU -> direction -> times at FP8_ATTENTION_SEQ
    "cudnn-fp8": {
        "gb200": {"fwd": (0.097, 0.305, 1.074, 4.084, 16.012), "bwd": (0.414, 1.167, 3.781, 13.476, 52.155)},
        "gb300": {"fwd": (0.070, 0.217, 0.759, 2.880, 11.319), "bwd": (0.364, 0.985, 3.087, 10.805, 41.328)},
        "h200-sxm": {"fwd": (0.098, 0.322, 1.141, 4.357, 16.884), "bwd": (0.437, 1.459, 6.392, 29.422, 118.729)},
    },
    "cudnn-mxfp8": {
        "gb200": {"fwd": (0.103, 0.326, 1.156, 4.400, 17.201), "bwd": (0.461, 1.305, 4.272, 15.315, 61.716)},
        "gb300": {"fwd": (0.079, 0.242, 0.856, 3.225, 12.632), "bwd": (0.424, 1.203, 3.917, 14.072, 55.340)},
    },
}
# kernel -> GPU -> direction -> (bf16 ms, fp8 ms)
FP8_ATTENTION_MS: dict[str, dict[str, dict[str, tuple[tuple[float, ...], tuple[float, ...]]]]] = {
    k: {g: {d: (_BF16_MS[g][d], t) for d, t in dirs.items()} for g, dirs in gpus.items()}
    for k, gpus in _FP8_MS.items()}
# The measured GPU whose ratio a GPU takes: its die's (as WINDOW_REFERENCE); a GPU of no measured family keeps the
# bf16 rate (ratio 1).
FP8_ATTENTION_REFERENCE = {"gb200": "gb200", "b200": "gb200", "gb300": "gb300", "b300": "gb300",
                           "h200-sxm": "h200-sxm", "h100-sxm": "h200-sxm", "h100-pcie": "h200-sxm",
                           "h800-sxm": "h200-sxm", "h20": "h200-sxm"}
# Sliding-window layers in fp8 (gpt-oss's window-128 layer as WINDOW_TFLOPS, the same CSVs' fp8 and mxfp8 rows): the
# forward keeps the window (GB200 0.195 ms fp8 against 0.210 bf16 at 4,096 tokens), the backward does not: 1.731 ms
# fp8 / 2.080 mxfp8 against 0.465, and 90.3 / 108.4 ms against 3.69 at 32k, the full causal backward's work. Forward
# TFLOP/s of the window's pairs at WINDOW_SEQ (the bf16 table's count). The H200 has no fp8 kernel at head dim 64 (cuDNN
# 9.19 refuses it: "hidden_dim should be equal to 128"): elsewhere windowed layers keep the bf16 windowed rate.
WINDOW_FP8_FWD_TFLOPS: dict[str, dict[str, tuple[float, ...]]] = {  # kernel -> GPU -> forward TFLOP/s
    "cudnn-fp8": {"gb200": (165, 173, 177, 179, 179), "gb300": (193, 203, 208, 211, 212)},
    "cudnn-mxfp8": {"gb200": (153, 161, 164, 166, 168), "gb300": (182, 194, 200, 203, 204)},
}
