"""Hand-computed checks of the offload cost model's per-layer terms (OPT-30B on FlexGen's T4 machine).

OPT-30B: h = 7168, 48 layers, 56 heads, f = 4h, fp16. One token's K and V in one layer: 2·h·2 B = 28,672 B.
gcp-t4: PCIe 3.0 x16 15.75 GB/s × 0.88 = 13.86 GB/s pinned DMA; disk 2.0 GB/s read, 1.0 GB/s write; CPU
attention 12.3 GB/s of KV cache.
"""

import numpy as np
import pytest

from shardplan.costmodel.offload.evaluate import estimate_offload, evaluate
from shardplan.costmodel.offload.policy import (
    ACT,
    CPU,
    DISK,
    GPU,
    KV,
    Knobs,
    OffloadPolicy,
    OffloadWorkload,
    Placement,
    W,
    default_capacities,
)
from shardplan.costmodel.offload.table import build_offload_table
from shardplan.costmodel.offload.terms import (
    COMPRESSED_RATIO,
    COMPUTE,
    D2H,
    DREAD,
    DWRITE,
    H2D,
    gemm_time,
    layer_geometry,
    phases,
)
from shardplan.hardware import get_system
from shardplan.models import get_model

H = 7168
KV_TOKEN = 2 * H * 2
LINK = 15.75e9 * 0.88


@pytest.fixture(scope="module")
def t4():
    return get_system("gcp-t4")


@pytest.fixture(scope="module")
def opt30():
    return get_model("opt-30b")


@pytest.fixture(scope="module")
def table(opt30, t4):
    """OPT-30B, b = 48, K = 3, CPU attention (FlexGen's published block), prompt 512, 32 generated tokens."""
    knobs = Knobs.of(gpu_batch=[48], num_batches=[3], cpu_attention=[True], compress_weights=[False],
                     compress_kv=[False])
    work = OffloadWorkload(prompt_len=512, gen_len=32, decode_segments=4)
    return build_offload_table(opt30, t4, work, knobs, default_capacities(t4))


def test_geometry_of_opt30b(opt30):
    g = layer_geometry(opt30, 2.0)
    assert g.kv_token_bytes == KV_TOKEN
    # attention: Q, K, V, out (4h² weights + 4h biases) + one LayerNorm (2h); MLP: 2·h·4h + 5h biases + 2h
    assert g.attn_weight_bytes == 2 * (4 * H * H + 4 * H + 2 * H)
    assert g.mlp_weight_bytes == 2 * (8 * H * H + 5 * H + 2 * H)
    # embeddings (50272 tokens, 2050 positions, tied head) and final LayerNorm spread over 48 layers
    assert g.extra_weight_bytes == pytest.approx(2 * ((50272 + 2050) * H + 2 * H) / 48)


def test_compressed_size_is_four_bits_plus_group_scale():
    # 64 values: 32 B of nibbles + fp16 min and scale = 36 B instead of 128 B
    assert pytest.approx(36 / 128) == COMPRESSED_RATIO


def test_phases_split_decode_steps_evenly():
    ph = phases(OffloadWorkload(prompt_len=512, gen_len=32, decode_segments=4))
    assert ph.names[0] == "prefill" and ph.steps[0] == 1 and ph.span[0] == 512 and ph.cached[0] == 0
    assert list(ph.steps[1:]) == [8, 8, 8, 7] and ph.steps[1:].sum() == 31
    # segment 1 holds decode steps 1..8: mean 4.5 → attends 516.5 positions, reads 515.5 from the cache
    assert ph.span[1] == 516.5 and ph.cached[1] == 515.5 and ph.tokens[1] == 1


def test_weight_load_is_in_the_first_iteration_only(table, opt30):
    g = table.geometry
    # the attention sublayer's first iteration loads the MLP's weights (plus the embedding share) from CPU
    assert table.lane_coef[0, 0, 0, 0, H2D, W, CPU] == pytest.approx((g.mlp_weight_bytes + g.extra_weight_bytes)
                                                                     / LINK)
    assert table.lane_coef[0, 0, 1, 0, H2D, W, CPU] == pytest.approx(g.attn_weight_bytes / LINK)
    assert table.lane_coef[0, 0, 1, 0, DREAD, W, DISK] == pytest.approx(g.attn_weight_bytes / 2.0e9)
    assert table.lane_coef[0, :, :, 1, H2D, W, :].max() == 0.0  # steady iterations load no weights


def test_kv_terms_of_a_decode_step(table):
    b, cached = 48, 515.5
    kv_read = b * cached * KV_TOKEN
    seg = 1  # first decode segment
    # CPU attention streams the CPU- and disk-resident cache on the host thread at 12.3 GB/s
    assert table.lane_coef[0, seg, 0, 1, COMPUTE, KV, CPU] == pytest.approx(kv_read / 12.3e9)
    assert table.lane_coef[0, seg, 0, 1, COMPUTE, KV, DISK] == pytest.approx(kv_read / 12.3e9)
    assert table.lane_coef[0, seg, 0, 1, DREAD, KV, DISK] == pytest.approx(kv_read / 2.0e9)
    assert table.lane_coef[0, seg, 0, 1, H2D, KV, CPU] == 0.0  # CPU attention: the cache stays on the host
    # one new token's K/V per sequence is stored
    assert table.lane_coef[0, seg, 0, 1, D2H, KV, CPU] == pytest.approx(b * KV_TOKEN / LINK)
    assert table.lane_coef[0, seg, 0, 1, DWRITE, KV, DISK] == pytest.approx(b * KV_TOKEN / 1.0e9)
    assert table.lane_coef[0, seg, 1, 1, COMPUTE, KV, :].max() == 0.0  # the MLP touches no cache


def test_prefill_stores_the_prompt_cache_and_hidden_states(table):
    b, P = 48, 512
    assert table.lane_coef[0, 0, 0, 1, D2H, KV, CPU] == pytest.approx(b * P * KV_TOKEN / LINK)
    assert table.lane_coef[0, 0, 0, 1, DREAD, KV, DISK] == 0.0
    for sub in range(2):
        assert table.lane_coef[0, 0, sub, 1, H2D, ACT, CPU] == pytest.approx(b * P * H * 2 / LINK)
        assert table.lane_coef[0, 0, sub, 1, D2H, ACT, DISK] == pytest.approx(b * P * H * 2 / LINK)


def test_iteration_counts(table):
    L = 48
    assert table.weight[0, 0].tolist() == [L * 1, L * 1 * 2]  # prefill: first + (K − 1) steady
    assert table.weight[0, 1].tolist() == [L * 8, L * 8 * 2]


def test_memory_forms(table):
    N, smax, L = 144, 512 + 32 - 1, 48
    kv_all = N * smax * KV_TOKEN * L
    assert table.mem_coef[0, 2, KV, CPU] == pytest.approx(kv_all)  # CPU row
    assert table.mem_coef[0, 3, KV, DISK] == pytest.approx(kv_all)  # disk row
    assert table.mem_coef[0, 0, KV, GPU] == pytest.approx(kv_all)  # GPU (prefill peak)
    assert table.mem_coef[0, 2, ACT, CPU] == pytest.approx(N * 512 * H * 2)
    # CPU attention keeps an fp32 K and V workspace for one GPU batch
    assert table.mem_const[0, 2] == pytest.approx(48 * smax * KV_TOKEN * 2)


def test_decode_gemm_is_weight_bound(t4):
    # MLP up-projection of a 48-token GPU batch in decode: 411 MB of weights, 2·48·h·4h = 19.7 GFLOP
    t = float(gemm_time(t4, np.array(48.0), H, 4 * H, "fp16"))
    nbytes = 2 * (48 * H + H * 4 * H + 48 * 4 * H)
    assert nbytes / 320e9 < t < nbytes / (0.75 * 320e9)
    # prefill GEMMs run at the machine's sustained 21.24 TFLOP/s
    m = 48 * 512.0
    assert float(gemm_time(t4, np.array(m), H, 4 * H, "fp16")) == pytest.approx(2 * m * H * 4 * H / 21.24e12)


def test_decode_segments_follow_kv_growth():
    # 512 + 32: the cache grows by 6% → one segment; 32 + 512: by 94% → four
    assert OffloadWorkload(prompt_len=512, gen_len=32).segments == 1
    assert OffloadWorkload(prompt_len=256, gen_len=256).segments == 2
    assert OffloadWorkload(prompt_len=32, gen_len=512).segments == 4
    assert len(phases(OffloadWorkload(prompt_len=512, gen_len=1)).names) == 1  # prefill only


def test_all_gpu_run_time_is_the_sum_of_gpu_kernels(t4):
    """Everything resident: no transfers, so every iteration lasts its GPU kernels."""
    m = get_model("opt-6.7b")
    policy = OffloadPolicy(gpu_batch_size=2, num_gpu_batches=1, weights=Placement.of(1, 0, 0),
                           kv_cache=Placement.of(1, 0, 0), activations=Placement.of(1, 0, 0))
    work = OffloadWorkload(prompt_len=512, gen_len=32)
    tb = build_offload_table(m, t4, work, Knobs.from_policy(policy), default_capacities(t4))
    cost = evaluate(tb, policy.fractions()[None])
    gpu = tb.gpu_const[0] + np.einsum("psict,ct->psi", tb.gpu_coef[0], policy.fractions())
    assert np.allclose(cost.iteration[0], gpu)
    expected = 32 * (gpu[0, :, 0].sum() + sum(n * gpu[p, :, 0].sum() for p, n in enumerate(tb.phases.steps)
                                              if p > 0))
    assert float(cost.total_s[0]) == pytest.approx(expected)
    rep = estimate_offload(m, t4, work, policy, default_capacities(t4))
    assert rep.metrics.tokens_per_s == pytest.approx(2 * 32 / expected)
    assert rep.bottleneck == {"prefill": "gpu", "decode": "gpu"}


def test_time_is_linear_in_the_placement_between_binding_changes(table):
    """Lanes are linear forms: a lane at a mix of two placements is the mix of the lanes."""
    rng = np.random.default_rng(0)
    xs = rng.dirichlet(np.ones(3), size=(2, 3))
    mid = (xs[0] + xs[1]) / 2
    lanes = [table.lane_const[0] + np.einsum("psilct,ct->psil", table.lane_coef[0], x) for x in (*xs, mid)]
    assert np.allclose(lanes[2], (lanes[0] + lanes[1]) / 2)
