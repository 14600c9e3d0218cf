"""Two MoE models on the same platform, container and layout, measured against priced: where the Blackwell
optimism on Nemotron-3 Nano comes from.

Nemotron-3 Nano 30B-A3B (23 Mamba-2, 23 MoE and 6 attention layers; squared-ReLU experts and a shared expert) is
priced 26.6–36.5% too fast on every Blackwell record of the ``optimum`` group and −1.6…+8.6% on Megatron-Bridge's
H100 records, while Qwen3-30B-A3B, an attention MoE of the same size that Megatron-Bridge runs on the same 8 GPUs
with the same layout (TP 1, PP 1, EP 8, HybridEP, MXFP8), is priced within −6.6…+13.8% there. Their recipes differ
in CUDA graphs (Transformer Engine graphs of attention, Mamba, router and preprocess for Nano; router and preprocess
for Qwen3, attention too on B200), which leaves Nano the lighter on the host. The 26.04.01 container's table
(Megatron-Bridge @067f987df ``docs/performance-summary-archive.md`` l.244-247 for Qwen3-30B-A3B, l.272-275 for
Nemotron-3 Nano) lists both models on four Blackwell systems, the last container before Qwen3's GB300/GB200/B300
recipes took full-iteration CUDA graphs, the CuTe DSL fused MLP, the all-to-all overlap and FP8 attention
(55443cbfb, June 2026; in v0.5.0 as bac3ffebf) that Nano's did not: the ratio of their throughputs on one system
cancels the platform and most of the stack, and leaves the models.

Each model is priced as its ``optimum`` record on that system (Nano: the 26.04.01 B200 record and the 26.06/26.08
records elsewhere, whose layout and software fields are the 26.04.01 ones; Qwen3: the 26.04.01 records), and the
per-layer-kind share of Nano's priced B200 step is printed.

Run: .venv/bin/python benchmarks/hybrid_ab.py   (a few seconds)
"""

from __future__ import annotations

from shardplan.validation.optimum import parse_run, tuned_record
from shardplan.validation.runs import pinned_estimate

# system: (Nano record, Nano 26.04.01 tokens/s per GPU, Qwen3 record, Qwen3 26.04.01 tokens/s per GPU), measured
# values from docs/performance-summary-archive.md @067f987df, 26.04.01 section (Nano l.272-275, Qwen3 l.244-247)
PAIRS = {
    "DGX-GB300": ("mbridge-26.08-nemotron3-nano-8gpu-gb300-mxfp8", 37888.0,
                  "mbridge-26.04.01-qwen3-30b-a3b-8gpu-gb300-mxfp8", 31744.0),
    "DGX-GB200": ("mbridge-26.06-nemotron3-nano-8gpu-gb200-mxfp8", 32768.0,
                  "mbridge-26.04.01-qwen3-30b-a3b-8gpu-gb200-mxfp8", 26112.0),
    "DGX-B300": ("mbridge-26.06-nemotron3-nano-8gpu-b300-mxfp8", 35840.0,
                 "mbridge-26.04.01-qwen3-30b-a3b-8gpu-b300-mxfp8", 30720.0),
    "DGX-B200": ("mbridge-26.04.01-nemotron3-nano-8gpu-b200-mxfp8", 32768.0,
                 "mbridge-26.04.01-qwen3-30b-a3b-8gpu-b200-mxfp8", 27136.0),
}


def priced(record_id: str) -> float:
    """Tokens/s per GPU the cost model prices for a record's published layout."""
    run = parse_run(tuned_record(record_id))
    assert not isinstance(run, str), run
    rep = pinned_estimate(run.model, run.system, run.gpus, run.work, run.layout, run.stage_layers)
    return run.work.global_batch * run.work.seq_len / run.gpus / rep.metrics.step_time_s


def layer_shares(record_id: str) -> dict[str, float]:
    """Share of a record's priced step in each layer kind (forward, backward and recompute of every layer of
    the kind, per microbatch, times the microbatches; exposed communication outside layers is left out)."""
    run = parse_run(tuned_record(record_id))
    assert not isinstance(run, str), run
    rep = pinned_estimate(run.model, run.system, run.gpus, run.work, run.layout, run.stage_layers)
    m = rep.plan.num_microbatches * rep.plan.schedules
    t = {lay.kind: lay.count * (lay.fwd_time_s + lay.bwd_time_s + lay.recompute_time_s) * m for lay in rep.layers}
    return {k: v / rep.metrics.step_time_s for k, v in t.items()}


def main() -> None:
    print("Nemotron-3 Nano 30B-A3B against Qwen3-30B-A3B, 8 GPUs, EP 8, MXFP8, 26.04.01 (tokens/s per GPU)")
    print(f"{'system':10s} {'Nano meas':>10s} {'priced':>8s} {'err':>7s} {'Qwen3 meas':>11s} {'priced':>8s} "
          f"{'err':>7s} {'ratio meas':>11s} {'priced':>7s}")
    for system, (nano, nano_meas, qwen, qwen_meas) in PAIRS.items():
        pn, pq = priced(nano), priced(qwen)
        print(f"{system:10s} {nano_meas:10,.0f} {pn:8,.0f} {100 * (pn / nano_meas - 1):+6.1f}% {qwen_meas:11,.0f} "
              f"{pq:8,.0f} {100 * (pq / qwen_meas - 1):+6.1f}% {nano_meas / qwen_meas:11.3f} {pn / pq:7.3f}")
    shares = layer_shares(PAIRS["DGX-B200"][0])
    print("Nano's priced B200 step by layer kind: "
          + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
