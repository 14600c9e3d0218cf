"""The Mamba-2 SSD core at its Triton kernels' measured rate. vLLM's copies of mamba_ssm's chunked SSD forward
(``_mamba_chunk_scan_combined_fwd``: chunk_cumsum, chunk_state, state_passing, bmm_chunk, chunk_scan) on one H100 at
granite-4.0-h-small's shape (128 heads of 64, one group, state 128, chunk 256), one sequence per run:
vllm-project/vllm PR #27299 (2025-10-25), microbenchmark "Original" column, tokens/s. The model had priced the core at
the streaming time of its traffic; ``core.recurrent.SSD_TRITON_STREAM_SHARE`` (the median share of the streaming rate)
and ``SSD_TRITON_BYTES_PER_S`` (the median rate) are read off these runs, so this checks the SSD op the training
pricer builds lands within ±12% of each measured time, that the roofline alone was 2.2-2.7x too fast, and which bound
holds on a GPU of lower (A100) and higher (GB200) memory bandwidth."""

from __future__ import annotations

import pytest

from shardplan.costmodel.core import recurrent as rec
from shardplan.costmodel.core.kernels import memory_time, with_launch
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.models.spec import MambaSpec

# tokens in one sequence -> measured tokens/s (H100, bf16)
VLLM_H100 = {4096: 1.206409e7, 8192: 1.262327e7, 16384: 1.292440e7, 32768: 1.180002e7, 65536: 1.106830e7,
             131072: 1.070444e7, 262144: 1.081547e7}
GRANITE_SSD = MambaSpec(num_heads=128, head_dim=64, d_state=128, n_groups=1, conv_kernel=4, expand=2, chunk_size=256)


def _two_bounds(hardware: str, nbytes: float) -> float:
    """The scan's price by hand: the slower of the share of the streaming rate and the H100's measured rate, plus
    the per-kernel fixed time."""
    gpu = get_system(hardware).gpu
    t = max(float(memory_time(gpu, nbytes)) / rec.SSD_TRITON_STREAM_SHARE, float(nbytes) / rec.SSD_TRITON_BYTES_PER_S)
    return float(with_launch(gpu, t))


def _granite_ssd_model():
    nano = get_model("nemotron-3-nano-30b-a3b")
    return nano.model_copy(update={"mamba": GRANITE_SSD, "hidden_size": 4096})


@pytest.mark.parametrize("tokens", sorted(VLLM_H100))
def test_training_ssd_forward_at_the_measured_h100_rate(tokens: int) -> None:
    model = _granite_ssd_model()
    cost = train_cost(model, get_system("dgx-h100"), TrainWorkload(seq_len=tokens, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    core = next(op for op in cost.kinds["mamba"].fwd_ops if op.name == "ssm.core")
    measured = tokens / VLLM_H100[tokens]
    assert float(core.time[0]) == pytest.approx(measured, rel=0.12)
    # the traffic alone, streamed at the GPU's rate, was 2.2-2.7x faster than measured
    streamed = float(memory_time(get_system("dgx-h100").gpu, core.nbytes[0]))
    assert 2.2 < measured / streamed < 2.7
    # the backward's traffic takes the same two bounds (mamba_ssm's _bwd kernels, the same family; unmeasured)
    assert core.grads is not None
    assert float(core.grads.dgrad_time[0]) == pytest.approx(_two_bounds("dgx-h100", core.grads.dgrad_nbytes[0]),
                                                            rel=1e-9)


def _core(hardware: str, tokens: int = 16384):
    cost = train_cost(_granite_ssd_model(), get_system(hardware), TrainWorkload(seq_len=tokens, global_batch=1),
                      LayoutArrays.from_layouts([TrainLayout()], 1))
    return next(op for op in cost.kinds["mamba"].fwd_ops if op.name == "ssm.core")


def test_faster_memory_does_not_pass_the_h100_rate() -> None:
    """GB200 (8 TB/s) and H200 (the H100's die, 4.8 TB/s): the measured H100 rate binds, not the share of their
    streaming rate."""
    for hardware in ("gb200-nvl72", "hgx-h200"):
        core = _core(hardware)
        gpu = get_system(hardware).gpu
        capped = float(core.nbytes[0]) / rec.SSD_TRITON_BYTES_PER_S
        assert float(core.time[0]) == pytest.approx(float(with_launch(gpu, capped)), rel=1e-9)
        assert float(memory_time(gpu, core.nbytes[0])) / rec.SSD_TRITON_STREAM_SHARE < capped


def test_slower_memory_keeps_the_share_of_its_streaming_rate() -> None:
    """A100 80 GB (2.04 TB/s): the share of its own streaming rate binds, below the H100's rate."""
    core = _core("dgx-a100-80gb")
    gpu = get_system("dgx-a100-80gb").gpu
    share = float(memory_time(gpu, core.nbytes[0])) / rec.SSD_TRITON_STREAM_SHARE
    assert float(core.time[0]) == pytest.approx(float(with_launch(gpu, share)), rel=1e-9)
    assert share > float(core.nbytes[0]) / rec.SSD_TRITON_BYTES_PER_S


@pytest.mark.parametrize("hardware", ["dgx-h100", "gb200-nvl72", "dgx-a100-80gb"])
@pytest.mark.parametrize("tokens", [1024, 16384])
def test_serving_prefill_takes_the_same_bounds(hardware: str, tokens: int) -> None:
    """vLLM's own prefill path: the serving pricer's scan is the same two-bound price of the same traffic, also for a
    short prompt (1 MB-scale traffic, where dividing bytes before the bandwidth curve would have priced it faster)."""
    import numpy as np

    from shardplan.costmodel.serving.layers import InferCtx, Step, mamba_ops

    one = np.array([1])
    c = InferCtx(model=_granite_ssd_model(), system=get_system(hardware), tp=one, pp=one, ep=one, weight_dtype="bf16",
                 kv_dtype="bf16", gemm_dtype="bf16")
    step = Step("prefill", tokens * one, tokens * (tokens + 1) / 2 * one, tokens * one, one, context=float(tokens))
    core = next(o for o in mamba_ops(c, step) if o.name == "ssm.core")
    assert float(core.time[0]) == pytest.approx(_two_bounds(hardware, core.nbytes[0]), rel=1e-9)
