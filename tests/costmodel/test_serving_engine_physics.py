"""Engine mechanisms of the serving cost model, each against a hand calculation: TensorRT-LLM's GUARANTEED_NO_EVICT
reservation, trtllm-bench's batch/token heuristic, steps with and without prefill, the engine's host gap per step and
whole 64-row MMA tiles."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.operators import Gemm
from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.continuous import mixed_step, prefill_steps
from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.costmodel.serving.engines import STEP_HOST_GAP_S, trtllm_bench_settings
from shardplan.costmodel.serving.steps import phase_times, stage_shapes
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.units import GiB

H100 = get_system("dgx-h100")
LLAMA8 = get_model("llama-3.1-8b")


def _cost(work: InferWorkload, batch: int = 1):
    return infer_cost(LLAMA8, H100, work, InferRows.from_layouts([InferLayout(tp=1, batch=batch)]))


def test_trtllm_reserves_prompt_plus_whole_output_per_request() -> None:
    # GUARANTEED_NO_EVICT admits a request only with blocks for ISL + OSL; vLLM allocates as tokens arrive.
    trt = _cost(InferWorkload(prompt_len=1000, gen_len=2000, engine="trtllm", block_size=32))
    vllm = _cost(InferWorkload(prompt_len=1000, gen_len=2000, engine="vllm", block_size=32))
    assert float(trt.max_batch[0]) == np.floor(float(trt.kv_blocks[0]) / np.ceil(3000 / 32))
    assert float(vllm.max_batch[0]) == np.floor(float(vllm.kv_blocks[0]) / np.ceil(2000 / 32))


@pytest.mark.parametrize(("isl", "osl", "expected"), [
    # 0.9·(80 GiB − 8e9 B) / (65536 B · 2176) = 491.6 requests → batch 128·⌈491.6/128⌉ = 512;
    # tokens 491.6·(1 + 16) = 8357 → 1024·⌈8357/1024⌉ = 9216 ≥ 2048 + 512
    (2048, 128, (512, 9216)),
    # 48.6 requests → batch 64 (floor of 64); tokens 535 → 2048, raised to 20000 + 64 (no chunked prefill)
    (20000, 2000, (64, 20064)),
    # 4178.9 requests capped at 4096 → batch 4096; tokens 4096·2 = 8192 ≥ 128 + 4096
    (128, 128, (4096, 8192)),
])
def test_trtllm_bench_heuristic_by_hand(isl: int, osl: int, expected: tuple[int, int]) -> None:
    got = trtllm_bench_settings(gpu_memory_bytes=80 * GiB, gpus=1, pp=1, weight_bytes=8e9,
                                kv_bytes_per_token=2 * 32 * 8 * 128, input_len=isl, output_len=osl)
    assert got == expected


def test_prefill_share_of_steps_by_hand() -> None:
    # r ≥ 1 prompt per step: every step carries r prompts (the average step)
    f, n = prefill_steps(np.array([2.0]), prompt=100, gen=50, budget=1000)
    assert (float(f[0]), float(n[0])) == (1.0, 2.0)
    # one 20,000-token prompt every 100 steps, unchunked budget: 1 step in 100 carries the whole prompt
    f, n = prefill_steps(np.array([0.01]), prompt=20000, gen=2000, budget=20064)
    assert float(f[0]) == pytest.approx(0.01) and float(n[0]) == pytest.approx(1.0)
    # chunked at 8192: chunks of 8192 − 19.99 decodes, a share 200/8172.01 of the steps
    f, n = prefill_steps(np.array([0.01]), prompt=20000, gen=2000, budget=8192)
    assert float(f[0]) == pytest.approx(200 / (8192 - 19.99))
    assert float(n[0]) == pytest.approx((8192 - 19.99) / 20000)


def test_long_prompts_cost_the_average_of_prefill_and_decode_steps() -> None:
    """TPOT = f·t(step with a whole 20k prompt) + (1 − f)·t(decode-only step), not t(average step)."""
    work = InferWorkload(prompt_len=20000, gen_len=2000, engine="vllm", max_num_batched_tokens=20064,
                         max_num_seqs=64)
    c = _cost(work, batch=16)
    r = 16 / (2000 - 1 + 1)  # slot-bound: B / (G − 1 + k₀)
    one = np.ones(1)
    k0 = one * 1.0
    shapes = stage_shapes(LLAMA8, one.astype(np.int64))
    t_pre = phase_times(c.ctx, mixed_step(LLAMA8, r * one, 20000, 2000, k0, one), shapes, c.rows.tp, one).total_s
    t_dec = phase_times(c.ctx, mixed_step(LLAMA8, r * one, 20000, 2000, k0, 0 * one), shapes, c.rows.tp,
                        one).total_s
    f = r * 20000 / 20000
    assert float(c.tpot_s[0]) == pytest.approx(float(f * t_pre[0] + (1 - f) * t_dec[0]), rel=1e-9)
    avg = phase_times(c.ctx, mixed_step(LLAMA8, r * one, 20000, 2000, k0), shapes, c.rows.tp, one).total_s
    assert float(c.tpot_s[0]) > float(avg[0])  # a compute-bound prompt cannot hide under the decode steps
    # TTFT: half an average step in progress, then the prompt's own step (one chunk), which carries the prefill
    assert float(c.ttft_s[0]) == pytest.approx(float(c.tpot_s[0] / 2 + t_pre[0]), rel=1e-9)


def test_trtllm_step_pays_the_executor_host_gap() -> None:
    base = dict(prompt_len=1000, gen_len=1000, max_num_batched_tokens=8192, max_num_seqs=256, block_size=32)
    trt = _cost(InferWorkload(engine="trtllm", **base), batch=64)
    vllm = _cost(InferWorkload(engine="vllm", **base), batch=64)
    assert float(trt.tpot_s[0] - vllm.tpot_s[0]) == pytest.approx(580e-6, rel=1e-9)
    assert STEP_HOST_GAP_S["trtllm"] == 580e-6


def test_dense_gemm_pays_whole_64_row_mma_tiles() -> None:
    one = np.ones(1, dtype=np.int64)
    ctx = O.InferCtx(model=LLAMA8, system=H100, tp=one, pp=one, ep=one, weight_dtype="bf16", kv_dtype="bf16",
                     gemm_dtype="bf16")

    def t(m: int) -> float:
        return float(ctx.gemm(Gemm("x", m, 8192, 8192))[0].time[0])

    # 1000 rows run as 1024 (compute-bound: 1.4e11 FLOPs vs 134 MB of weights), 1025 as 1088
    assert t(1000) == pytest.approx(t(1024), rel=1e-12)
    assert t(1025) > t(1024) * 1.05
    assert float(ctx.gemm(Gemm("x", 1000, 8192, 8192))[0].flops[0]) == 2.0 * 1000 * 8192 * 8192  # FLOPs reported
