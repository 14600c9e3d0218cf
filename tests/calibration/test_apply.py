"""Each calibration parameter acts once, where its schema says, by the amount a hand calculation gives."""

from __future__ import annotations

import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import compute_time
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.load import system_from_mapping
from shardplan.hardware.spec import Calibration, SystemSpec, with_calibration
from shardplan.models import get_model

H100 = get_system("dgx-h100")
GIB = 2**30


def _est(system: SystemSpec, layout: TrainLayout, gpus: int = 16, batch: int = 64):
    return estimate_training(get_model("llama-3.1-8b"), system, gpus, TrainWorkload(seq_len=4096, global_batch=batch),
                             layout)


def test_gemm_scale_multiplies_efficiency_but_never_above_peak() -> None:
    flops = 1e15  # a large GEMM: the preset's top efficiency applies
    gpu = H100.gpu
    eff = max(f for _, f in gpu.matmul_efficiency)
    slow = with_calibration(H100, Calibration(gemm_scale=0.5)).gpu
    fast = with_calibration(H100, Calibration(gemm_scale=1.3)).gpu
    assert float(compute_time(slow, flops, "bf16")) == pytest.approx(flops / (gpu.peak("bf16") * eff * 0.5))
    assert float(compute_time(fast, flops, "bf16")) == pytest.approx(flops / (gpu.peak("bf16") * min(eff * 1.3, 1)))
    assert float(compute_time(fast, flops, "bf16")) >= flops / gpu.peak("bf16")


def test_inter_node_scale_divides_the_network_term_only() -> None:
    nbytes, n = 1e9, 16  # 16 ranks, stride 8: two nodes of 8, one member per node per ring → pure inter-node
    scaled = with_calibration(H100, Calibration(inter_node_comm_scale=0.5))
    link = H100.inter_node
    # latency of the protocol large messages use (NCCL Simple): t = L + S/bw, so L = 2·t(S) − t(2S)
    lat = 2 * comm.all_reduce_time(H100, nbytes, n, 8) - comm.all_reduce_time(H100, 2 * nbytes, n, 8)
    bw_term = float(comm.all_reduce_time(H100, nbytes, n, 8) - lat)
    assert bw_term == pytest.approx(2 * (n - 1) / n * nbytes / (link.bandwidth_bytes_per_s * link.efficiency))
    assert float(comm.all_reduce_time(scaled, nbytes, n, 8) - lat) == pytest.approx(2 * bw_term)


def test_overheads_and_memory_add_exactly() -> None:
    lay = TrainLayout(tp=2, pp=2, dp=4, microbatch=1, interleave=1)
    base = _est(H100, lay)
    m = 64 / (4 * 1)  # microbatches per step
    cal = with_calibration(H100, Calibration(step_overhead_s=0.25, microbatch_overhead_s=0.01,
                                             memory_overhead_bytes=2 * GIB))
    got = _est(cal, lay)
    # per microbatch per stage slot: (m + p − 1) slots on the pipeline's critical path, then the fixed step term
    assert got.metrics.step_time_s == pytest.approx(base.metrics.step_time_s + (m + 1) * 0.01 + 0.25, rel=1e-9)
    assert got.memory.total_bytes == pytest.approx(base.memory.total_bytes + 2 * GIB)


def test_file_roundtrip_applies_the_scales_once() -> None:
    sysc = system_from_mapping({"base": "dgx-h100", "calibration": {"gemm_scale": 0.8,
                                                                    "memory_overhead_bytes": "1GiB"}}, origin="t.yaml")
    assert sysc.gpu.scales.gemm == 0.8 and sysc.calibration.memory_overhead_bytes == GIB
    again = SystemSpec.model_validate(sysc.model_dump())
    assert again.gpu.scales.gemm == 0.8  # derived from the block, not multiplied again
    assert "scales" not in sysc.model_dump()["gpu"]


def test_bounds_are_enforced_by_the_schema() -> None:
    from shardplan.errors import ConfigFileError

    with pytest.raises(ConfigFileError, match=r"calibration\.gemm_scale"):
        system_from_mapping({"base": "dgx-h100", "calibration": {"gemm_scale": 1.5}}, origin="t.yaml")
    with pytest.raises(ConfigFileError, match=r"calibration\.step_overhead_s"):
        system_from_mapping({"base": "dgx-h100", "calibration": {"step_overhead_s": -1}}, origin="t.yaml")
