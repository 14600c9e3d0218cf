"""Hand-computed serving times: a memory-bound decode step, TP all-reduce, chunked prefill, pipelines, MoE."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.hardware import get_system
from shardplan.hardware.spec import GpuSpec, LinkSpec, SystemSpec
from shardplan.models import get_model

BW, MEM_EFF = 2e12, 0.8
FLAT = GpuSpec(name="flat", memory_bytes=80 * 2**30, memory_bandwidth_bytes_per_s=BW,
               peak_flops={"bf16": 1e18}, matmul_efficiency=[(1.0, 1.0)], memory_efficiency=[(1.0, MEM_EFF)],
               attention_efficiency=1.0, kernel_launch_s=0.0)
LINK = LinkSpec(bandwidth_bytes_per_s=100e9, latency_s=5e-6, efficiency=1.0)
FLAT_SYS = SystemSpec(name="flat", gpu=FLAT, gpus_per_node=8, intra_node=LINK, pcie=LINK, host_memory_bytes=2**40)


def _cost(model: str, system: SystemSpec, work: InferWorkload, *layouts: InferLayout):
    return infer_cost(get_model(model), system, work, InferRows.from_layouts(list(layouts)))


def test_memory_bound_decode_step_reads_the_weights_at_achieved_bandwidth() -> None:
    # Infinite compute, no launch floor, one GPU: a decode step is HBM bytes / (bandwidth · 0.8), and at
    # batch 1 with a short context those bytes are the weights (plus the KV cache and a few activations).
    m = get_model("llama-3.1-8b")
    w = InferWorkload(prompt_len=16, gen_len=2)
    c = _cost("llama-3.1-8b", FLAT_SYS, w, InferLayout(tp=1, batch=1))
    weights = 2 * m.total_params - 2 * m.vocab_size * m.hidden_size  # the embedding table is gathered, not streamed
    kv = 17 * 32 * 8 * 128 * 2 * 2  # context 17 positions × 32 layers × 8 KV heads × 128 × (K, V) × 2 bytes
    assert float(c.tpot_s[0]) == pytest.approx((weights + kv) / (BW * MEM_EFF), rel=1e-3)
    hbm = sum(float(s.nbytes[0]) * n for s, n in zip(c.decode.sums.values(), (1, 32, 32, 1), strict=True))
    assert float(c.tpot_s[0]) == pytest.approx(hbm / (BW * MEM_EFF), rel=1e-12)


def test_tp_all_reduce_is_latency_bound_when_small() -> None:
    sysm = get_system("dgx-h100")
    link = sysm.intra_node
    small = O.tp_all_reduce_time(sysm, np.array([16384.0]), np.array([8]))[0]
    assert small == pytest.approx(link.latency_s + 7 * 16384 / link.effective_bytes_per_s)  # one-shot
    big = O.tp_all_reduce_time(sysm, np.array([64e6]), np.array([8]))[0]
    assert big == pytest.approx(2 * link.latency_s + 2 * 7 / 8 * 64e6 / link.effective_bytes_per_s)  # two-shot
    assert O.tp_all_reduce_time(sysm, np.array([1e6]), np.array([1]))[0] == 0.0


def test_throughput_is_output_tokens_over_end_to_end_time() -> None:
    w = InferWorkload(prompt_len=1000, gen_len=200)
    c = _cost("llama-3.1-8b", get_system("dgx-h100"), w, InferLayout(tp=2, replicas=4, batch=24))
    e2e = float(c.ttft_s[0] + 199 * c.tpot_s[0])
    assert float(c.e2e_s[0]) == pytest.approx(e2e)
    assert float(c.tokens_per_s[0]) == pytest.approx(4 * 24 * 200 / e2e)


def test_prefill_runs_in_chunks_of_the_token_budget() -> None:
    w = InferWorkload(prompt_len=1000, gen_len=10, max_num_batched_tokens=2048)
    c = _cost("llama-3.1-8b", get_system("dgx-h100"), w, InferLayout(batch=2), InferLayout(batch=5))
    assert c.chunks.tolist() == [1.0, 3.0]  # 2000 tokens; 5000 tokens in 3 chunks of 1667
    assert float(c.prefill.step.tokens[1]) == pytest.approx(5000 / 3)
    one = float(c.prefill.total_s[1])
    assert float(c.ttft_s[1]) == pytest.approx(3 * one)  # pp = 1: chunks run back to back


def test_pipeline_decode_keeps_micro_batches_in_flight() -> None:
    w = InferWorkload(prompt_len=512, gen_len=64)
    c = _cost("llama-3.1-70b", get_system("dgx-h100"), w, InferLayout(tp=2, pp=4, batch=1),
              InferLayout(tp=2, pp=4, batch=64))
    assert c.micro_batches.tolist() == [1.0, 4.0]
    d = c.decode
    beat = max(float(t[1]) for s, t in zip(c.shapes, d.stage_s, strict=True) if bool(s.exists[1]))
    hop = float(d.p2p_s[1])
    # 4 micro-batches of 16: max(one pass through all stages, 4 beats of the slowest stage)
    assert float(c.tpot_s[1]) == pytest.approx(max(float(d.total_s[1]) + 4 * hop, 4 * (beat + hop)))
    # batch 1 is one pass: the sum of the stages plus the sends
    assert float(c.tpot_s[0]) == pytest.approx(float(d.total_s[0]) + 4 * float(d.p2p_s[0]))


def test_moe_decode_reads_only_the_experts_a_small_batch_touches() -> None:
    w = InferWorkload(prompt_len=256, gen_len=32)
    c = _cost("qwen3-30b-a3b", get_system("dgx-h100"), w, InferLayout(batch=1), InferLayout(batch=256))
    fc1 = next(op for op in c.decode.ops["moe"] if op.name == "moe.experts.fc1")
    m = get_model("qwen3-30b-a3b")
    moe = m.moe
    per_expert = m.hidden_size * 2 * moe.expert_ffn_hidden_size * 2  # gate+up, bf16
    # batch 1: exactly k = 8 experts of 128; batch 256: 128·(1 − (1 − 8/128)^256) ≈ 128
    assert float(fc1.nbytes[0]) == pytest.approx(8 * per_expert + 2 * 8 * (m.hidden_size + 2 * 768), rel=1e-9)
    assert float(fc1.nbytes[1]) > 15 * float(fc1.nbytes[0])
