"""Layer kinds costed exactly: windowed attention pairs, Gated DeltaNet and Mamba-2 cores against hand counts,
per-stage kind counts from the pattern, and vLLM's hybrid KV-cache capacity by hand."""

import json
import math

import pytest

from shardplan.costmodel.core import operators as inv
from shardplan.costmodel.core import recurrent as rec
from shardplan.costmodel.core.layouts import model_kind_counts
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.models.spec import MambaSpec, ModelSpec


def _brute_pairs(s: int, window: int | None = None, chunk: int | None = None) -> int:
    """Count (query, key) pairs one by one: key ≤ query, inside the window or the query's chunk."""
    n = 0
    for q in range(s):
        for k in range(q + 1):
            if window is not None and q - k >= window:
                continue
            if chunk is not None and q // chunk != k // chunk:
                continue
            n += 1
    return n


@pytest.mark.parametrize(("s", "w", "c"), [(10, 4, None), (10, None, 4), (37, 64, None), (100, 16, None),
                                           (100, None, 32), (7, None, None)])
def test_window_pairs_equal_brute_force(s, w, c) -> None:
    assert float(inv.window_pairs(s, window=w, chunk=c)) == _brute_pairs(s, w, c)


def test_window_pairs_by_hand() -> None:
    # s=10, w=4: 1+2+3+4·7 = 34; chunks of 4 over 10 tokens: 10 + 10 + 3 = 23.
    assert float(inv.window_pairs(10, window=4)) == 34
    assert float(inv.window_pairs(10, chunk=4)) == 23


def _tiny(pattern: tuple[str, ...], **kw) -> ModelSpec:
    return ModelSpec(name="tiny", num_layers=4, hidden_size=64, num_heads=4, head_dim=16, ffn_hidden_size=128,
                     vocab_size=1000, mlp="swiglu", layer_pattern=pattern, **kw)


def test_sliding_layer_attention_flops_by_hand() -> None:
    """One microbatch of one 256-token sequence, window 64, 4 heads of 16: pairs = 64·65/2 + 192·64 = 14,368 plus
    the half flash block of the diagonal per query (256·64 = 16,384); FLOPs 2·pairs·heads·(16 + 16)."""
    m = _tiny(("S", "F"), sliding_window=64)
    cost = train_cost(m, get_system("dgx-h100"), TrainWorkload(seq_len=256, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    core = next(op for op in cost.kinds["sliding"].fwd_ops if op.name == "attn.flash")
    assert float(core.flops[0]) == 2 * (2080 + 12288 + 16384) * 4 * 32
    full = next(op for op in cost.kinds["attention"].fwd_ops if op.name == "attn.flash")
    assert float(full.flops[0]) == 2 * (256 * 256 * (0.5 + 128 / 2 / 256)) * 4 * 32
    # the GEMMs of a sliding layer are those of a full one
    gemm = [op.flops[0] for op in cost.kinds["sliding"].fwd_ops if op.kind == "gemm"]
    assert gemm == [op.flops[0] for op in cost.kinds["attention"].fwd_ops if op.kind == "gemm"]


def test_mamba_layer_flops_by_hand() -> None:
    """A tiny Mamba-2 layer: 2 heads of P=4, N=8, chunk Q=16, 1 group, h=64, 32 tokens.
    SSD core: 32·(2·(2·16·4 + 4·8·4) + 2·16·8) = 24,576. in_proj: 2·32·64·(8 + 24 + 2) (inner 8, conv 8 + 2·8,
    2 heads); out_proj: 2·32·8·64."""
    mamba = MambaSpec(num_heads=2, head_dim=4, d_state=8, n_groups=1, conv_kernel=4, expand=2, chunk_size=16)
    m = _tiny(("M", "F"), mamba=mamba)
    assert float(rec.ssd_core_flops(m, 32, 2, 1, recurrent=False)) == 24576
    assert float(rec.ssd_core_flops(m, 32, 2, 1, recurrent=True)) == 32 * 2 * 6 * 8 * 4
    cost = train_cost(m, get_system("dgx-h100"), TrainWorkload(seq_len=32, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    ops = {op.name: float(op.flops[0]) for op in cost.kinds["mamba"].fwd_ops}
    assert ops["ssm.core"] == 24576
    assert ops["ssm.in_proj"] == 2 * 32 * 64 * 34
    assert ops["ssm.out"] == 2 * 32 * 8 * 64


def test_mamba_ssd_traffic_is_its_triton_kernels_tensor_by_tensor() -> None:
    """The chunked SSD's bytes (state-spaces/mamba@d757aef ssd_combined.py), kernel by kernel, for a tiny layer:
    2 heads of P=4, N=8, 1 group, chunk 16, 32 tokens (2 chunks), bf16. Each kernel's tensors listed by hand;
    the training op's backward is that traffic as one dgrad (no weights)."""
    mamba = MambaSpec(num_heads=2, head_dim=4, d_state=8, n_groups=1, conv_kernel=4, expand=2, chunk_size=16)
    m = _tiny(("M", "F"), mamba=mamba)
    T, H, P, N, G, Q, e = 32, 2, 4, 8, 1, 16, 2
    x, bc, cb = T * H * P * e, T * G * N * e, T * G * Q * 4  # x/dout/dx/out; B/C/dB/dC; CB/dCB (fp32)
    s32, s16, d4, dt = 2 * H * P * N * 4, 2 * H * P * N * e, T * H * 4, T * H * e
    fwd = [dt + 2 * d4,                            # chunk_cumsum: dt in; dt, dA_cumsum out (fp32)
           bc + x + 2 * d4 + s32,                  # chunk_state: B, x, dt, dA_cumsum in; states fp32 out
           s32 + s16,                              # state_passing: fp32 in, C.dtype out
           2 * bc + cb,                            # bmm_chunk: C, B in; CB fp32 out
           cb + x + 2 * d4 + bc + s16 + x]         # chunk_scan: CB, x, dt, dA_cumsum, C, states in; out
    bwd = [dt + 2 * d4, 2 * bc + cb, bc + x + 2 * d4 + s32, 2 * s32,  # the four recomputed (states to fp32)
           bc + d4 + x + s32,                      # bwd_dstates: C, dA_cumsum, dout in; dstates fp32 out
           2 * s32 + 2 * s16,                      # state_passing_bwd: states, dstates in; both e-byte out
           x + 2 * d4 + bc + cb + x + s16 + x + d4,  # bwd_dx: x, dt, dA, B, CB, dout, dstates in; dx, ddt out
           x + 2 * d4 + s16 + bc + bc + d4,        # bwd_db: x, dt, dA, dstates, B in; dB, ddA_next out
           s16 + d4 + x + bc + bc + d4,            # bwd_dC: states, dA, dout, C in; dC, ddA_prev out
           x + 2 * d4 + x + cb,                    # bwd_dcb: x, dt, dA, dout in; dCB out
           2 * (3 * bc + cb),                      # two bmm_chunk_bwd: C (B), dCB, residual in; dB (dC) out
           2 * x + 2 * d4 + cb + d4,               # ddAcs_stable: x, dt, dA, dout, CB in; ddA out
           3 * d4]                                 # chunk_cumsum_bwd
    got_fwd, got_bwd = rec.ssd_chunked_traffic(m, T, H, G, 1, e)
    assert (float(got_fwd), float(got_bwd)) == (sum(fwd), sum(bwd))
    cost = train_cost(m, get_system("dgx-h100"), TrainWorkload(seq_len=32, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    core = next(op for op in cost.kinds["mamba"].fwd_ops if op.name == "ssm.core")
    assert float(core.nbytes[0]) == sum(fwd) and core.grads is not None
    assert float(core.grads.dgrad_nbytes[0]) == sum(bwd) and float(core.grads.wgrad_time[0]) == 0.0


def test_gated_deltanet_core_by_hand() -> None:
    """Qwen3-Next's linear layer (d_k = d_v = 128, chunk 64): per token and value head
    64·(6·128 + 4·128) + 2·64²/3 + 6·128² = 81,920 + 2,730.67 + 98,304."""
    m = get_model("qwen3-next-80b-a3b")
    per = 64 * (6 * 128 + 4 * 128) + 2 * 64**2 / 3 + 6 * 128 * 128
    assert float(rec.gdn_core_flops(m, 10, 32, recurrent=False)) == pytest.approx(10 * 32 * per, rel=1e-12)
    assert float(rec.gdn_core_flops(m, 10, 32, recurrent=True)) == 10 * 32 * 6 * 128 * 128


def test_stage_kind_counts_follow_the_pattern() -> None:
    """gemma-3-27b, 62 layers of (S*5, F) split over pp=2: 31 + 31 layers; full layers at 5, 11, …, 59:
    5 on each stage (5, 11, 17, 23, 29 | 35, 41, 47, 53, 59)."""
    m = get_model("gemma-3-27b")
    cost = train_cost(m, get_system("dgx-h100"), TrainWorkload(seq_len=1024, global_batch=8),
                      LayoutArrays.from_layouts([TrainLayout(tp=4, pp=2)], 8))
    first, last = cost.stages[0].shape, cost.stages[2].shape
    assert float(first.count("attention")[0]) == 5 and float(first.count("sliding")[0]) == 26
    assert float(last.count("attention")[0]) == 5 and float(last.count("sliding")[0]) == 26
    assert model_kind_counts(m)["attention"] == 10 and model_kind_counts(m)["sliding"] == 52


def test_gemma3_kv_capacity_as_vllm_allocates_it(run_cli) -> None:
    """gemma-3-27b on one H100, bf16 KV (16 KV heads × 128: 8,192 B per token per layer), block 16.
    vLLM groups: 10 full, 52 sliding → group size 10; full 1 group, sliding ⌈52/10⌉ = 6 → 7 groups; the pool is 10
    tensors; num_blocks = pool // (16·8192) // 10; "GPU KV cache size" = num_blocks // 7 · 16 tokens.
    A 4,608-token request takes 288 blocks (full) + 6 × (⌈min(1023 + 2048, 4608)/16⌉ + 1 = 193) (sliding) = 1,446
    blocks of the pool: max concurrency num_blocks / 1,446 (vLLM's logged "maximum concurrency" counts whole
    requests, hence the static view, and its 2,048-token budget per step)."""
    r = run_cli("estimate", "infer", "-m", "gemma-3-27b", "-H", "dgx-h100", "-g", "1", "--prompt-len", "4096",
                "--gen-len", "512", "--batch", "1", "--mode", "static", "--max-num-batched-tokens", "2048", "--json")
    assert r.code == 0, r.err
    mem = json.loads(r.out)["memory"]
    num_blocks = int(mem["kv_pool_bytes"] // (16 * 8192) // 10)
    assert mem["kv_cache_tokens"] == num_blocks // 7 * 16
    assert mem["kv_bytes_per_token"] == 8192 * 10 * 7
    assert json.loads(r.out)["metrics"]["max_batch_size"] == math.floor((num_blocks // 7) / (1446 / 7))


def test_fp4_bytes_per_weight_include_block_scales() -> None:
    """MXFP4: 4 bits + one 8-bit E8M0 scale per 32 values = 4.25 bits; NVFP4: 4 bits + one FP8 scale per 16 = 4.5."""
    from shardplan.costmodel.serving.layers import weight_bytes_per_param

    assert weight_bytes_per_param("mxfp4", 128) == 4.25 / 8
    assert weight_bytes_per_param("nvfp4", 128) == 4.5 / 8


def test_gpt_oss_serves_mxfp4_experts(run_cli) -> None:
    """gpt-oss-120b on one GPU: routed experts (36 layers × 128 experts × the expert MLP) at 4.25 bits, every
    other weight in 16 bits; it fits one H100 as OpenAI's model card states."""
    from shardplan.models import params as P

    m = get_model("gpt-oss-120b")
    assert m.moe is not None
    experts = m.num_moe_layers * m.moe.num_experts * P.mlp_params(m, m.moe.expert_ffn_hidden_size)
    expected = experts * 4.25 / 8 + (m.total_params - experts) * 2
    r = run_cli("estimate", "infer", "-m", "gpt-oss-120b", "-H", "dgx-h100", "-g", "1", "--prompt-len", "1024",
                "--gen-len", "256", "--batch", "8", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["status"] == "feasible"
    assert d["memory"]["weights_bytes"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", ["gemma-3-27b", "gpt-oss-120b", "qwen3-next-80b-a3b", "llama-4-scout",
                                  "qwen3-32b", "deepseek-v3"])
def test_one_gpu_holds_every_parameter(name) -> None:
    """Σ over layer kinds of the per-GPU shard (tp = ep = pp = 1) equals the parameter count of ``models.params``
    (a different code path: the breakdown by component)."""
    import numpy as np

    from shardplan.costmodel.core.shards import layer_shard

    m, one = get_model(name), np.ones(1)
    total = 0.0
    for kind, n in {**model_kind_counts(m), "embedding": 1, "head": 1}.items():
        if n:
            sh = layer_shard(m, kind, one, one, one)
            total += n * float(sh.dense[0] + sh.experts[0])
    assert total == m.total_params


def test_nvfp4_training_gemm_by_hand() -> None:
    """--dtype fp4 on B200: GEMM operands at 4.5 bits (E2M1 + an FP8 scale per 16), output bf16, at the fp4 peak
    (twice the fp8 one), plus the cast passes; on H100 (no FP4 tensor cores) a clear error."""
    from shardplan.costmodel.training.evaluate import estimate_training

    m = _tiny(("F",))
    work = TrainWorkload(seq_len=4096, global_batch=8, dtype="fp4")
    cost = train_cost(m, get_system("dgx-b200"), work, LayoutArrays.from_layouts([TrainLayout(microbatch=8)], 8))
    qkv = next(op for op in cost.kinds["attention"].fwd_ops if op.name == "attn.qkv")
    T, n = 8 * 4096, (4 + 2 * 4) * 16  # tokens; q + k + v columns (4 heads, 4 KV heads, head_dim 16)
    assert float(qkv.nbytes[0]) == pytest.approx(0.5625 * T * 64 + 0.5625 * 64 * n + 2 * T * n, rel=1e-12)
    cast = next(op for op in cost.kinds["attention"].fwd_ops if op.name == "attn.qkv.fp4_cast")
    # input and weight each as row- and column-wise NVFP4 copies (scales along K each way)
    assert float(cast.nbytes[0]) == pytest.approx((4 + 2 * 0.5625) * (T * 64 + 64 * n), rel=1e-12)
    gpu = get_system("dgx-b200").gpu
    assert gpu.peak("fp4") == 2 * gpu.peak("fp8")
    from shardplan.errors import ShardplanError

    with pytest.raises(ShardplanError, match="FP4 tensor cores"):
        estimate_training(m, get_system("dgx-h100"), 8, work, TrainLayout(dp=8, microbatch=1))


def test_decode_reads_only_the_window_and_the_recurrent_state() -> None:
    """One decode step of 4 sequences at mean context 4096 + 256/2 = 4224: a gemma-3-27b sliding layer reads
    4·1024 cached positions (16 KV heads × 128 × 2 × 2 B = 8,192 B each), a full layer 4·4224; a Mamba-2 layer
    reads and writes each sequence's SSM state (heads·P·N 16-bit values) once. (A pure decode step: the static
    view; continuous batching mixes prefill chunks into the step.)"""
    from shardplan.costmodel.serving.cost import InferLayout, InferRows, InferWorkload, infer_cost

    work = InferWorkload(prompt_len=4096, gen_len=256, mode="static")
    rows = InferRows.from_layouts([InferLayout(batch=4)])
    cost = infer_cost(get_model("gemma-3-27b"), get_system("dgx-h100"), work, rows)
    core = {k: next(op for op in cost.decode.ops[k] if op.name == "attn.core") for k in ("sliding", "attention")}
    q_io = 2.0 * 4 * 32 * (128 + 128)  # Q in, O out: 4 tokens × 32 heads × (d_qk + d_v) × 2 B
    assert float(core["sliding"].nbytes[0]) == pytest.approx(q_io + 4 * 1024 * 8192, rel=1e-12)
    assert float(core["attention"].nbytes[0]) == pytest.approx(q_io + 4 * 4224 * 8192, rel=1e-12)

    mamba = MambaSpec(num_heads=2, head_dim=4, d_state=8, n_groups=1, conv_kernel=4, expand=2, chunk_size=16)
    tiny = _tiny(("M", "F"), mamba=mamba)
    cost = infer_cost(tiny, get_system("dgx-h100"), work, rows)
    ssm = next(op for op in cost.decode.ops["mamba"] if op.name == "ssm.core")
    conv_dim, inner = 8 + 2 * 8, 8
    io = 2.0 * 4 * (conv_dim + 2 + inner)  # x, B, C, dt in and y out for 4 tokens, 2 B each
    assert float(ssm.nbytes[0]) == pytest.approx(io + 2 * 4 * (2 * 4 * 8 * 2.0), rel=1e-12)
    assert float(ssm.flops[0]) == 4 * 2 * 6 * 8 * 4


@pytest.mark.parametrize(("hw", "scaling", "reads", "copies", "scales"),
                         [("dgx-b200", "current", 4, 1, 0.0), ("dgx-b200", "delayed", 2, 1, 0.0),
                          ("dgx-b200", "mxfp8", 2, 2, 1 / 32), ("dgx-h100", "current", 4, 2, 0.0),
                          ("dgx-h100", "delayed", 2, 2, 0.0)])
def test_fp8_cast_traffic_by_scaling_recipe(hw: str, scaling: str, reads: float, copies: float,
                                            scales: float) -> None:
    """The qkv input's cast under each Transformer Engine fp8 recipe, by hand: current scaling reads the bf16 input
    twice (amax, then cast); delayed scaling and MXFP8 once; each writes 1 B per fp8 copy: two (row- and column-wise)
    on Hopper, whose FP8 GEMMs take TN layouts only, and for MXFP8 (plus an e8m0 scale per 32 elements each way),
    one for per-tensor scaling on Blackwell; the weight the same once per step (cached across the microbatches); the
    backward quantizes the output gradient the same way."""
    m = _tiny(("F",))
    base = get_system(hw)
    system = base.model_copy(update={"software": base.software.model_copy(update={"fp8_scaling": scaling})})
    work = TrainWorkload(seq_len=4096, global_batch=8, dtype="fp8")
    cost = train_cost(m, system, work, LayoutArrays.from_layouts([TrainLayout(microbatch=8)], 8))
    cast = next(op for op in cost.kinds["attention"].fwd_ops if op.name == "attn.qkv.fp8_cast")
    back = next(op for op in cost.kinds["attention"].bwd_ops if op.name == "attn.qkv.fp8_cast.bwd")
    T, n = 8 * 4096, (4 + 2 * 4) * 16  # tokens; q + k + v columns (4 heads, 4 KV heads, head_dim 16)
    per = reads + copies * (1 + scales)
    assert float(cast.nbytes[0]) == pytest.approx(per * (T * 64 + 64 * n), rel=1e-12)
    assert float(back.nbytes[0]) == pytest.approx(per * T * n, rel=1e-12)


def test_records_carry_their_fp8_recipe() -> None:
    from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run

    got = {}
    for r in load_records_tuned():
        if r["id"] in ("mlperf-v5.0-llama3.1-405b-512gpu-gb200-fp8", "mbcard-qwen3-30b-a3b-8gpu-gb300-mxfp8-perf",
                       "mbridge-25.11-llama3-8b-8gpu-gb200-fp8cs"):
            run = parse_run(r)
            assert isinstance(run, OptimumRun)
            got[r["id"]] = run.system.software.fp8_scaling
    assert got == {"mlperf-v5.0-llama3.1-405b-512gpu-gb200-fp8": "delayed",
                   "mbcard-qwen3-30b-a3b-8gpu-gb300-mxfp8-perf": "mxfp8",
                   "mbridge-25.11-llama3-8b-8gpu-gb200-fp8cs": "current"}
