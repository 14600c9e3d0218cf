"""Data-parallel gradient buckets as Megatron-Core builds them: the recipe's bucket size (``ddp_bucket_params``,
Megatron-LM --ddp-bucket-size), and the bucket that closes the backward and opens the forward holding the whole
word embedding (buckets fill in backprop order and never split a parameter: param_and_grad_buffer.py@d98e8a6
l.980-991). Checked by hand against the link rates of the preset."""

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.dp_sync import bucket_params, edge_bucket_params, sixteen_bit_params
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.spec import SystemSpec
from shardplan.models import get_model

LLAMA = get_model("llama-3.1-8b")
EMB = 128256 * 4096  # Llama 3.1's word embedding (config.json vocab_size × hidden_size)
H100 = get_system("dgx-h100")


def _with_bucket(system: SystemSpec, size: int | None) -> SystemSpec:
    return system.model_copy(update={"software": system.software.model_copy(update={"ddp_bucket_params": size})})


def test_bucket_size_is_megatrons_default_unless_the_recipe_sets_it() -> None:
    """max(40M, 1M·dp) (distributed_data_parallel.py l.133-134); NVIDIA's MLPerf Llama 3.1 8B recipe sets 768M."""
    n = np.array([16.0, 72.0, 256.0])
    assert bucket_params(H100, n).tolist() == [40e6, 72e6, 256e6]
    assert bucket_params(_with_bucket(H100, 768_000_000), n).tolist() == [768e6] * 3


def test_the_edge_bucket_holds_the_whole_embedding() -> None:
    """First stage: at least the embedding (vocab-parallel: split over TP); elsewhere a bucket; never more than the
    model chunk holds."""
    bucket = np.array([40e6, 40e6, 40e6, 900e6, 40e6])
    chunk = np.array([8e9, 8e9, 8e9, 8e9, 3e8])
    has_emb = np.array([True, False, True, True, True])
    tp = np.array([1.0, 1.0, 2.0, 1.0, 1.0])
    edge, emb = edge_bucket_params(LLAMA, bucket, chunk, has_emb, tp)
    assert edge.tolist() == [EMB, 40e6, EMB / 2, 900e6, 3e8]
    assert emb.tolist() == [EMB, 0.0, EMB / 2, EMB, 3e8]


def test_sixteen_bit_params_are_the_embedding_and_the_head() -> None:
    """Llama 3.1 8B untied: embedding V·h, head V·h plus the final norm's h; split by TP."""
    got = sixteen_bit_params(LLAMA, np.array([True, False, True]), np.array([True, True, False]),
                             np.array([1.0, 2.0, 1.0]), np.array([1.0, 2.0, 2.0]))
    assert got.tolist() == [2 * EMB + 4096, EMB / 2 + 4096, EMB]


def test_recipe_bucket_and_fp8_gathers_by_hand() -> None:
    """Llama 3.1 8B on 16 H100 (ZeRO-1, one microbatch each), fp8 with fp8 primary weights and 768M-parameter
    buckets: the reduce-scatter of the last bucket (768M fp32 gradients) shows after the backward, the gather of
    the first (768M parameters of which the embedding's 525M in bf16, the rest fp8) before the forward; what hides
    slows the overlapped compute by 18.9% (Lee et al. 2025). The whole gather moves the linear weights in fp8 and the
    embedding and head in bf16."""
    system = _with_bucket(H100, 768_000_000)
    work = TrainWorkload(seq_len=4096, global_batch=16, dtype="fp8")
    rep = estimate_training(LLAMA, system, 16, work, TrainLayout(dp=16, zero_stage=1))
    params = float(LLAMA.total_params)
    sixteen = 2 * EMB + 4096
    last = float(comm.reduce_scatter_time(system, 768e6 * 4, 16, 1))
    first = float(comm.all_gather_time(system, (768e6 - EMB) * 1 + EMB * 2, 16, 1))
    rs = float(comm.reduce_scatter_time(system, params * 4, 16, 1))
    ag = float(comm.all_gather_time(system, (params - sixteen) * 1 + sixteen * 2, 16, 1))
    st = rep.stages[0]
    share = 1 - 768e6 / params
    assert rs - st.bwd_time_s * share < last and ag - st.fwd_time_s * share < first  # the edges show, not saturated
    want = last + first + 0.189 * ((rs - last) + (ag - first))
    assert rep.metrics.dp_exposed_s == pytest.approx(want, rel=1e-6)
    default = estimate_training(LLAMA, H100, 16, work, TrainLayout(dp=16, zero_stage=1))
    # Megatron's default 40M buckets: the edge is the embedding's bucket alone
    last_d = float(comm.reduce_scatter_time(H100, EMB * 4, 16, 1))
    first_d = float(comm.all_gather_time(H100, EMB * 2, 16, 1))
    want_d = last_d + first_d + 0.189 * ((rs - last_d) + (ag - first_d))
    assert default.metrics.dp_exposed_s == pytest.approx(want_d, rel=1e-6)
