"""DeepEP/HybridEP move tokens over NVLink at their kernels' measured rate (``hardware.ep_data``), not the link's:
the rate against the published tables by hand, and the dispatch time it gives."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.hardware import ep_data, get_system
from shardplan.models import get_model


def _rate(system: str, ranks: float) -> float:
    r = comm.ep_kernel_rate(get_system(system), np.array([ranks]), np.array([1.0]))
    assert r is not None
    return float(r[0])


@pytest.mark.parametrize(("system", "ranks", "dispatch", "combine"), [
    # deepseek-ai/DeepEP@94a9f8f docs/README_Hybrid-EP.md, GB200 kernel-only at 16 SMs (BF16 dispatch, combine)
    ("gb200-nvl72", 32, 629.79, 547.25),
    ("gb200-nvl72", 8, 750.15, 684.27),
    ("gb300-nvl72", 36, 612.85, 543.27),  # GB300: GB200's NVLink 5 domain, priced from it
    # the same document's B200 row (8 ranks, one node); B300 shares its NVLink
    ("dgx-b200", 8, 734.95, 673.84),
    ("dgx-b300", 8, 734.95, 673.84),
    # DeepEP intranode on 8 H200 at 24 SMs (awsome-distributed-training@fd3d76d)
    ("dgx-h100", 8, 305.72, 319.88),
])
def test_the_rate_is_the_published_one_less_the_bytes_that_stay_home(system: str, ranks: int, dispatch: float,
                                                                     combine: float) -> None:
    want = (dispatch + combine) / 2 * 1e9 * (ranks - 1) / ranks
    assert _rate(system, ranks) == pytest.approx(want, rel=1e-12)


def test_between_and_beyond_the_measured_counts() -> None:
    lo, hi = _rate("gb200-nvl72", 24), _rate("gb200-nvl72", 32)
    assert lo > _rate("gb200-nvl72", 28) > hi  # interpolated between the table's rows
    assert _rate("gb200-nvl72", 64) == pytest.approx(_rate("gb200-nvl72", 36))  # held beyond the largest group
    assert _rate("gb200-nvl72", 2) == pytest.approx(_rate("gb200-nvl72", 8))  # and below the smallest
    h100 = get_system("dgx-h100")
    assert _rate("dgx-h100", 8) < comm.link_bandwidth(h100, "intra")  # 273.7 GB/s against 360 for NCCL


def test_unmeasured_gpus_keep_the_link_and_a_calibration_cannot_exceed_it() -> None:
    assert comm.ep_kernel_rate(get_system("dgx-a100-80gb"), np.array([8.0]), np.array([1.0])) is None
    h100 = get_system("dgx-h100")
    fast = h100.model_copy(update={"calibration": h100.calibration.model_copy(update={"intra_node_comm_scale": 3.0})})
    got = comm.ep_kernel_rate(fast, np.array([8.0]), np.array([1.0]))
    assert got is not None and float(got[0]) == pytest.approx(comm.link_bandwidth(fast, "intra"))


def test_an_in_node_deepep_dispatch_takes_its_bytes_at_the_measured_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """EP 8 inside a DGX H100 node: nothing crosses the network, so the dispatch's time moves by exactly its NVLink
    bytes over the difference of the two rates."""
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"ep_dispatcher": "deepep"})})
    work = TrainWorkload(seq_len=4096, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(dp=8, ep=8)], work.global_batch)
    ctx = Ctx(get_model("qwen3-30b-a3b"), system, work, rows)
    elements = float(ctx.tokens[0]) * 8 * 2048
    measured = ctx.ep_all_to_all("moe.ep_dispatch", elements)
    rate = _rate("dgx-h100", 8)
    monkeypatch.setattr(ep_data, "EP_KERNEL_REFERENCE", {})
    at_link = ctx.ep_all_to_all("moe.ep_dispatch", elements)
    nvlink = float(measured.nbytes[0])
    assert nvlink > 0
    want = nvlink * (1 / rate - 1 / comm.link_bandwidth(system, "intra"))
    assert float(measured.time[0] - at_link.time[0]) == pytest.approx(want, rel=1e-9)
