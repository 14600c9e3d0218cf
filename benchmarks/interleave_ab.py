"""What the interleaved schedule buys, measured against what the cost model prices: the one controlled A/B found, Zero
Bubble Pipeline Parallelism (Qi, Wan, Huang, Lin; ICLR 2024, arXiv 2401.10241v1). Table 3 gives four GPT shapes
(sequence 1024) run as pure pipelines of 8, 8, 16 and 32 A100 SXM 80 GB ("up to 32 NVIDIA A100 SXM 80G GPUs distributed
across 4 nodes interconnected by a RoCE RDMA network"), Table 4 the measured samples per GPU per second of 1F1B and
1F1B-I (interleaved, "each transformer layer serves as a chunk") at three microbatch counts each. The numbers were read
from two full-text transcriptions of the paper that agree digit for digit, not from the PDF.

Each pair is priced on ``dgx-a100-80gb`` with the paper's microbatch size and count, TP 1, DP 1, no recompute, and the
ratio 1F1B-I / 1F1B compared with the measured one. The authors' code (sail-sg/zero-bubble-pipeline-parallelism@93af65c
``megatron/arguments.py``) pads the layer count to V·p with two no-op layers, leaving the first and last chunk empty;
a shardplan chunk needs a layer, so both schedules are priced with the two pads as real layers (L + 2 = V·p, V
chunks of one layer per rank). Vocabulary, FFN width (4h here) and precision are not stated in the paper.

Run: .venv/bin/python benchmarks/interleave_ab.py   (a few seconds)
"""

from __future__ import annotations

import statistics

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models.presets import megatron_gpt

# (model, layers, heads, hidden, pipeline GPUs, microbatch size, microbatch counts, V = (layers + 2) / p,
#  measured samples/GPU/s (1F1B, 1F1B-I) at each count): arXiv 2401.10241v1 Tables 3 and 4
RUNS = [
    ("1.5B", 22, 24, 2304, 8, 6, (24, 32, 64), ((11.8, 13.1), (12.5, 13.4), (13.6, 13.9))),
    ("6.2B", 30, 32, 4096, 8, 3, (24, 32, 64), ((3.50, 4.01), (3.70, 4.08), (4.03, 4.19))),
    ("14.6B", 46, 40, 5120, 16, 1, (48, 64, 128), ((1.40, 1.54), (1.49, 1.59), (1.64, 1.66))),
    ("28.3B", 62, 48, 6144, 32, 1, (96, 128, 256), ((0.76, 0.82), (0.80, 0.85), (0.88, 0.90))),
]


def priced_ratio(name: str, layers: int, heads: int, hidden: int, p: int, mb: int, m: int) -> float:
    """The cost model's 1F1B-I over 1F1B throughput for one of the paper's runs."""
    system = get_system("dgx-a100-80gb")
    model = megatron_gpt(f"zb-{name}", layers=layers + 2, hidden=hidden, heads=heads, source="arXiv 2401.10241")
    work = TrainWorkload(seq_len=1024, global_batch=mb * m)
    steps = [estimate_training(model, system, p, work, TrainLayout(
        tp=1, pp=p, dp=1, microbatch=mb, interleave=v, recompute=Recompute.NONE, sequence_parallel=False,
        zero_stage=1)).metrics.step_time_s for v in (1, (layers + 2) // p)]
    return steps[0] / steps[1]


def main() -> None:
    print("| model | GPUs | microbatches | V | measured 1F1B-I/1F1B | priced | priced gain − measured gain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    gaps = []
    for name, layers, heads, hidden, p, mb, counts, measured in RUNS:
        for m, (a, b) in zip(counts, measured, strict=True):
            got = priced_ratio(name, layers, heads, hidden, p, mb, m)
            gaps.append(100 * (got - b / a))
            print(f"| {name} | {p} | {m} | {(layers + 2) // p} | {b / a:.3f} | {got:.3f} | {gaps[-1]:+.1f} points |")
    print(f"\nPriced gain over measured: mean {statistics.mean(gaps):+.1f} points, range {min(gaps):+.1f}…"
          f"{max(gaps):+.1f} over {len(gaps)} pairs")


if __name__ == "__main__":
    main()
