"""Continuous batching: the steady state against a step-by-step scheduler simulation, M/D/1 queueing by hand,
engine memory rules and defaults by hand."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.serving.continuous import mixed_step
from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.costmodel.serving.engines import engine_defaults, sglang_mem_fraction_static
from shardplan.costmodel.serving.steps import phase_times, stage_shapes
from shardplan.hardware import get_gpu, get_system
from shardplan.models import get_model
from shardplan.planner.serving.solve import InferRequest, plan_inference
from shardplan.units import GiB

H100 = get_system("dgx-h100")


def _cost(work: InferWorkload, *layouts: InferLayout, model: str = "llama-3.1-8b", system=H100):
    return infer_cost(get_model(model), system, work, InferRows.from_layouts(list(layouts)))


def simulate(slots: int, budget: int, prompt: int, gen: int, steps: int = 6000, warmup: int = 1500
             ) -> tuple[float, float, float]:
    """A vLLM-V1-like scheduler, step by step, with an endless queue: running decodes take one token each, then
    prefill chunks fill the rest of the budget first-come first-served; a freed slot admits the next request.
    Returns (requests finished, decode tokens, prefill tokens) per step after the warm-up."""
    running: list[list[int]] = []  # [prefill tokens left, decode tokens left]
    done = dec = pre = 0
    for step in range(steps):
        while len(running) < slots:
            running.append([prompt, gen - 1])
        left = budget
        d = p = 0
        for r in running:
            if r[0] == 0 and r[1] > 0 and left > 0:
                r[1] -= 1
                left -= 1
                d += 1
        for r in running:
            if r[0] > 0 and left > 0:
                t = min(r[0], left)
                r[0] -= t
                left -= t
                p += t
        finished = [r for r in running if r[0] == 0 and r[1] == 0]
        running = [r for r in running if not (r[0] == 0 and r[1] == 0)]
        if step >= warmup:
            done += len(finished)
            dec += d
            pre += p
    n = steps - warmup
    return done / n, dec / n, pre / n


@pytest.mark.parametrize(("batch", "budget", "prompt", "gen", "steps"), [
    (64, 2048, 1000, 201, 6000),   # slots bind: r = 64 / (200 + 1)
    (256, 512, 1000, 50, 6000),    # the token budget binds: r = 512 / 1049
    (32, 8192, 128, 2048, 60000),  # long outputs, few slots (cohorts of 32 finish together: a long window)
])
def test_steady_state_matches_a_scheduler_simulation(batch: int, budget: int, prompt: int, gen: int,
                                                     steps: int) -> None:
    w = InferWorkload(prompt_len=prompt, gen_len=gen, max_num_batched_tokens=budget)
    st = _cost(w, InferLayout(tp=1, batch=batch)).steady
    assert st is not None
    r, d, p = simulate(batch, budget, prompt, gen, steps=steps)
    assert float(st.finishes[0]) == pytest.approx(r, rel=0.05)
    assert float(st.decodes[0]) == pytest.approx(d, rel=0.05)
    assert float(st.prefill_tokens[0]) == pytest.approx(p, rel=0.05)


def test_saturation_throughput_and_ttft_follow_the_step() -> None:
    w = InferWorkload(prompt_len=1000, gen_len=201, max_num_batched_tokens=2048)
    c = _cost(w, InferLayout(tp=1, replicas=1, batch=64))
    st = c.steady
    r_hand = 64 / (200 + 1)  # slots bind (2048 / 1200 = 1.71 > 0.318)
    tau = float(c.tpot_s[0])
    assert float(st.finishes[0]) == pytest.approx(r_hand)
    assert float(c.tokens_per_s[0]) == pytest.approx(r_hand * 201 / tau)
    # 0.318 prompts per step: a share 0.318 of the steps carries one whole 1000-token prompt, the rest decode only
    one = np.ones(1)
    shapes = stage_shapes(c.ctx.model, one.astype(np.int64))
    k0 = one

    def step(prompts: float) -> float:
        s = mixed_step(c.ctx.model, r_hand * one, 1000, 201, k0, prompts * one)
        return float(phase_times(c.ctx, s, shapes, c.rows.tp, one).total_s[0])

    t_pre, t_dec = step(1.0), step(0.0)
    assert tau == pytest.approx(r_hand * t_pre + (1 - r_hand) * t_dec)
    # one chunk (1000 ≤ 2048 − 63.7 decodes): half an average step of waiting, then the step carrying its prompt
    assert float(c.ttft_s[0]) == pytest.approx(0.5 * tau + t_pre)
    assert float(c.e2e_s[0]) == pytest.approx(0.5 * tau + t_pre + 200 * tau)


def test_offered_load_queues_as_md1_and_slows_steps_as_it_grows() -> None:
    lay = InferLayout(tp=1, replicas=2, batch=128)
    sat = _cost(InferWorkload(prompt_len=1024, gen_len=256), lay, system=H100)
    mu = float(sat.steady.capacity_rps[0])  # one replica, requests/s
    prev_tpot = 0.0
    for rho in (0.2, 0.5, 0.9):
        c = _cost(InferWorkload(prompt_len=1024, gen_len=256, request_rate=rho * mu * 2), lay, system=H100)
        st = c.steady
        assert float(st.utilisation[0]) == pytest.approx(rho)
        assert float(st.queue_s[0]) == pytest.approx(rho / (2 * mu * (1 - rho)))  # Pollaczek–Khinchine, M/D/1
        assert float(c.tokens_per_s[0]) == pytest.approx(rho * mu * 2 * 256)
        assert float(c.tpot_s[0]) > prev_tpot  # more prefill and decode tokens share each step
        assert float(c.tpot_s[0]) <= float(sat.tpot_s[0]) * (1 + 1e-9)
        prev_tpot = float(c.tpot_s[0])
    over = _cost(InferWorkload(prompt_len=1024, gen_len=256, request_rate=2.5 * mu), lay, system=H100)
    assert float(over.steady.utilisation[0]) > 1 and np.isinf(over.ttft_s[0])


def test_a_ttft_limit_no_longer_collapses_the_mixtral_batch() -> None:
    base = dict(model=get_model("mixtral-8x7b"), system=H100, num_gpus=2,
                workload=InferWorkload(prompt_len=2048, gen_len=256, max_num_batched_tokens=8192, max_num_seqs=1024))
    free = plan_inference(InferRequest(**base))
    limited = plan_inference(InferRequest(**base, max_ttft_s=0.5))
    assert limited.metrics.ttft_s <= 0.5
    assert limited.plan.batch_size == free.plan.batch_size
    assert limited.metrics.tokens_per_s == pytest.approx(free.metrics.tokens_per_s)


def test_engine_defaults_and_memory_rules_by_hand() -> None:
    h100, a100 = get_gpu("h100-sxm"), get_gpu("a100-sxm-80gb")
    assert (engine_defaults("vllm", h100).max_num_batched_tokens, engine_defaults("vllm", h100).max_num_seqs) == \
        (8192, 1024)
    assert (engine_defaults("vllm", a100).max_num_batched_tokens, engine_defaults("vllm", a100).max_num_seqs) == \
        (2048, 256)
    assert engine_defaults("sglang", h100).max_num_batched_tokens == 8192
    assert engine_defaults("trtllm", h100).max_num_batched_tokens == 8192
    mem = h100.memory_bytes / GiB
    # SGLang on an 80 GB GPU: reserved 9.5 + tp·pp/2 GiB
    assert float(sglang_mem_fraction_static(h100, np.array([2]))[0]) == pytest.approx(round((mem - 10.5) / mem, 3))
    lay = InferLayout(tp=2, replicas=1, batch=1)
    base = dict(prompt_len=1024, gen_len=256, max_num_batched_tokens=8192, max_num_seqs=256)
    v = _cost(InferWorkload(**base), lay).memory[0]
    s = _cost(InferWorkload(**base, engine="sglang"), lay).memory[0]
    t = _cost(InferWorkload(**base, engine="trtllm"), lay).memory[0]
    cap = float(h100.memory_bytes)
    w, a, nt = float(v.weights[0]), float(v.activations[0]), float(v.non_torch[0])
    assert float(v.kv_pool[0]) == pytest.approx(0.9 * cap - w - a - nt)
    assert float(s.kv_pool[0]) == pytest.approx(round((mem - 10.5) / mem, 3) * cap - w)
    assert float(t.kv_pool[0]) == pytest.approx(0.9 * (cap - w - a - nt))


def test_continuous_pool_holds_prompt_plus_half_the_output_per_sequence() -> None:
    lay = InferLayout(tp=1, batch=1)
    cont = _cost(InferWorkload(prompt_len=1000, gen_len=2000), lay)
    stat = _cost(InferWorkload(prompt_len=1000, gen_len=2000, mode="static"), lay)
    blocks = float(cont.kv_blocks[0])
    assert float(cont.max_batch[0]) == np.floor(blocks / np.ceil((1000 + 1000) / 16))
    assert float(stat.max_batch[0]) == np.floor(blocks / np.ceil(3000 / 16))


def test_fused_moe_streams_the_touched_experts_once_at_transfer_bandwidth() -> None:
    from shardplan.costmodel.core.kernels import interp_efficiency
    from shardplan.costmodel.serving.layers import ep_imbalance

    m = get_model("qwen3-30b-a3b")
    w = InferWorkload(prompt_len=1024, gen_len=1024, mode="static")
    c = _cost(w, InferLayout(tp=1, batch=32), model="qwen3-30b-a3b")
    ops = {op.name: op for op in c.decode.ops["moe"]}
    moe = m.moe
    touched = moe.num_experts * (1 - (1 - moe.experts_per_token / moe.num_experts) ** 32)
    h, f = m.hidden_size, moe.expert_ffn_hidden_size
    weights = touched * 2 * h * 2 * f  # gate+up of every touched expert, bf16
    fc1 = ops["moe.experts.fc1"]
    assert float(fc1.nbytes[0]) == pytest.approx(weights + 2 * 32 * 8 * (h + 2 * f), rel=1e-9)
    gpu = H100.gpu
    bw = gpu.memory_bandwidth_bytes_per_s * float(interp_efficiency(gpu.memory_efficiency, fc1.nbytes[0]))
    # memory-bound, one kernel: the bytes plus the fixed time every kernel pays
    assert float(fc1.time[0]) == pytest.approx(float(fc1.nbytes[0]) / bw + gpu.kernel_fixed_s, rel=1e-9)
    # busiest of 8 EP ranks with 1000 token copies each: 1 + √(2 ln 8 / 1000)
    busiest = float(ep_imbalance(np.array([8.0]), np.array([1000.0]))[0])
    assert busiest == pytest.approx(1 + np.sqrt(2 * np.log(8) / 1000))
    assert float(ep_imbalance(np.array([1.0]), np.array([1000.0]))[0]) == 1.0


def test_p90_wait_follows_the_exponential_tail_and_is_zero_when_most_never_wait() -> None:
    from shardplan.costmodel.serving.continuous import wait_quantile

    w = np.array([0.04, 0.04, 0.04])
    rho = np.array([0.05, 0.5, 0.9])
    q = wait_quantile(w, rho, 0.9)
    assert q[0] == 0.0  # 95% of requests find the server idle
    assert q[1] == pytest.approx(0.04 / 0.5 * np.log(5.0))  # ρ·exp(−ρt/E[W]) = 0.1
    assert q[2] == pytest.approx(0.04 / 0.9 * np.log(9.0))
    # M/D/1 check by simulation at ρ = 0.7: Lindley's recursion W' = max(0, W + D − A)
    rng = np.random.default_rng(0)
    lam, d = 0.7, 1.0
    gaps = rng.exponential(1 / lam, 400_000)
    wait = np.zeros_like(gaps)
    for i in range(1, len(gaps)):
        wait[i] = max(0.0, wait[i - 1] + d - gaps[i])
    mean = 0.7 / (2 * 1.0 * (1 - 0.7))  # Pollaczek–Khinchine with μ = 1
    assert wait.mean() == pytest.approx(mean, rel=0.03)
    assert float(wait_quantile(np.array([mean]), np.array([0.7]), 0.9)[0]) == pytest.approx(
        float(np.quantile(wait, 0.9)), rel=0.10)


def test_p90_limit_bounds_the_percentile_not_the_mean() -> None:
    base = dict(model=get_model("llama-3.1-8b"), system=H100, num_gpus=2,
                workload=InferWorkload(prompt_len=1024, gen_len=256, request_rate=39.0, max_num_batched_tokens=8192,
                                       max_num_seqs=1024))
    mean = plan_inference(InferRequest(**base, max_ttft_s=1.0))
    p90 = plan_inference(InferRequest(**base, max_ttft_s=1.0, slo_statistic="p90"))
    assert mean.metrics.ttft_s <= 1.0 < mean.metrics.ttft_p90_s  # the mean-bounded plan misses a p90 bound
    assert p90.metrics.ttft_p90_s <= 1.0 and p90.metrics.ttft_p90_s >= p90.metrics.ttft_s


def test_decode_attention_without_split_kv_streams_each_head_on_one_sm() -> None:
    """Llama-3.1-8B, one H100, context 7000: a block per (sequence, query head) reads its KV head's 7000·2·128·2 bytes
    at one SM's share of the L2 read bandwidth (5120 B/clk · 1755 MHz / 132 SMs); 32 blocks fit one wave, 8
    sequences' 256 blocks take two. With split-KV the kernel is bandwidth-bound, several times faster."""
    from shardplan.costmodel.serving.layers import InferCtx, Step, attention_ops

    m, gpu = get_model("llama-3.1-8b"), H100.gpu
    per_sm = 5120 * 1.755e9 / 132
    one = np.ones(1)

    def core(split: bool, b: float) -> float:
        c = InferCtx(model=m, system=H100, tp=one, pp=one, ep=one, weight_dtype="bf16", kv_dtype="bf16",
                     gemm_dtype="bf16", decode_split_kv=split)
        step = Step("decode", b * one, b * 7000 * one, b * 7000 * one, b * one, context=7000.0)
        return float(next(o.time[0] for o in attention_ops(c, step) if o.name == "attn.core"))

    head_bytes = 7000 * 2 * 128 * 2
    assert core(False, 1) == pytest.approx(head_bytes / per_sm + gpu.kernel_fixed_s, rel=1e-9)
    assert core(False, 8) == pytest.approx(2 * head_bytes / per_sm + gpu.kernel_fixed_s, rel=1e-9)
    assert core(True, 1) < core(False, 1) / 3
