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


def curves(table: dict[str, dict[tuple[str, bool, int], tuple[float, ...]]]) -> list[AttentionCurve]:
    """The table as ``AttentionCurve`` records (one per kernel, direction, mask and head dim)."""
    return [AttentionCurve(kernel=k, direction=d, causal=c, head_dim=hd, seq=list(SEQ), tflops=list(v))
            for k, rows in table.items() for (d, c, hd), v in rows.items()]


H100_ATTENTION = curves(H100_ATTENTION_TFLOPS)
