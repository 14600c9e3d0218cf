"""Option types shared by commands (the names are the public CLI contract of DESIGN.md).

Every integer option has a documented upper bound, checked by the option parser before any work (exit 2
naming the bound), and every float option must be finite:

=====================================================  ==========================
option                                                 allowed
=====================================================  ==========================
--gpus, --tp, --pp, --dp, --ep, --etp, --cp, --max-cp  1 … 1,048,576 (2^20)
--global-batch, --max-global-batch, --microbatch       1 … 16,777,216 (2^24)
--seq-len, --prompt-len, --max-num-batched-tokens      1 … 16,777,216 (2^24) tokens
--gen-len                                              1 … 1,048,576 (2^20) tokens
--batch, --max-num-seqs                                1 … 1,048,576 (2^20)
--interleave, --recompute-layers                       1 … 10,000 (the most layers a model may have)
--block-size, --gpu-batch, --num-gpu-batches           1 … 65,536 (2^16)
--time-limit                                           0.01 … 86,400 s
--max-ttft-ms, --max-tpot-ms                           0.001 … 10^9 ms
--request-rate                                         10^-9 … 10^9 requests/s
=====================================================  ==========================
"""

from __future__ import annotations

import math
from typing import Annotated

import typer

MAX_GPUS = 2**20
MAX_BATCH = 2**24
MAX_TOKENS = 2**24
MAX_GEN = 2**20
MAX_SEQS = 2**20
MAX_LAYER_COUNT = 10_000  # models.spec.MAX_LAYERS (the CLI does not import the model package to declare options)
MAX_SMALL = 2**16
MAX_TIME_LIMIT_S = 86_400.0
MAX_SLO_MS = 1e9
MAX_RATE = 1e9  # requests/s


def finite(value: float | None) -> float | None:
    """Option callback: refuse nan and ±inf (click's FloatRange lets nan through)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, or a HF config.json (or its folder).")]
HardwareOpt = Annotated[
    str, typer.Option("--hardware", "-H", help="System preset (e.g. dgx-h100), GPU name (a generic PCIe node of "
                      "8), or YAML/JSON file.")
]
GpusOpt = Annotated[
    int | None, typer.Option("--gpus", "-g", min=1, max=MAX_GPUS, help="Total GPUs (default: one node).",
                             show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout, nothing else.")]
TimeLimitOpt = Annotated[float, typer.Option("--time-limit", help="CP-SAT time limit in seconds.", min=0.01,
                                             max=MAX_TIME_LIMIT_S, callback=finite)]

PromptLen = Annotated[int, typer.Option(
    "--prompt-len", "-p", min=1, max=MAX_TOKENS, help="Prompt tokens per sequence.")]
GenLen = Annotated[int, typer.Option("--gen-len", "-n", min=1, max=MAX_GEN, help="Tokens generated per sequence.")]
