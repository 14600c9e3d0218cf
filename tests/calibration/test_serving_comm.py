"""A calibrated collective efficiency reaches serving: fitted from synthetic runs, read by ``infer``'s links."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.calibration import calibrate
from shardplan.costmodel.serving.collectives import (
    CUSTOM_AR_MAX_BYTES,
    ep_all_to_all_time,
    nccl_ring_all_reduce_time,
    tp_all_reduce_time,
)
from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
from shardplan.costmodel.serving.report import estimate_inference
from shardplan.hardware import get_system, resolve_system
from shardplan.hardware.spec import Calibration, with_calibration
from shardplan.models import get_model

from .conftest import synthetic_runs

H100 = get_system("dgx-h100")
# One node of 8 H100s, TP 1..8: the exposed TP all-reduce grows with TP, so the runs see the NVLink efficiency.
TP_SWEEP = [("llama-3.1-8b", 8, 64, 8192, {"tp": t, "zero": 1, "sequence_parallel": t > 1}) for t in (1, 2, 4, 8)]


def _bandwidth_term(system, nbytes: float, n: int) -> float:
    """The ring all-reduce's bandwidth term: latency removed as L = 2·t(S) − t(2S) (NCCL Simple, large S)."""
    t1 = float(nccl_ring_all_reduce_time(system, nbytes, n))
    t2 = float(nccl_ring_all_reduce_time(system, 2 * nbytes, n))
    return t1 - (2 * t1 - t2)


def test_fitted_intra_node_scale_is_recovered_and_slows_infer_comm(tmp_path: Path) -> None:
    true_scale = 0.5
    runs = synthetic_runs(Calibration(intra_node_comm_scale=true_scale), TP_SWEEP)
    out = tmp_path / "my-cluster.yaml"
    res = calibrate("dgx-h100", runs, output=out)
    assert "intra_node_comm_scale" in res.fitted
    assert res.calibration.intra_node_comm_scale == pytest.approx(true_scale, rel=0.01)
    assert res.calibration.gemm_scale == pytest.approx(1.0, rel=0.01)

    cal = resolve_system(str(out))
    # NCCL ring above the custom all-reduce's size limit: bandwidth term 2(n−1)/n·S / (link bw · efficiency · scale)
    nbytes, n = 64 * CUSTOM_AR_MAX_BYTES, 8
    link = H100.intra_node
    hand = 2 * (n - 1) / n * nbytes / (link.bandwidth_bytes_per_s * min(link.efficiency * true_scale, 1.0))
    assert _bandwidth_term(cal, nbytes, n) == pytest.approx(hand, rel=0.01)
    assert _bandwidth_term(H100, nbytes, n) == pytest.approx(hand * true_scale, rel=0.01)
    # the engines' custom all-reduce (small messages) and the expert all-to-all read the same link rate
    small = CUSTOM_AR_MAX_BYTES / 2
    assert float(tp_all_reduce_time(cal, small, n)) > float(tp_all_reduce_time(H100, small, n))
    assert float(ep_all_to_all_time(cal, 1e8, 8, 1)) > 1.8 * float(ep_all_to_all_time(H100, 1e8, 8, 1))

    # infer: a TP-8 prefill of 8K tokens moves 2 all-reduces of 8K·8192·2 bytes per layer: bandwidth-bound
    model, work = get_model("llama-3.1-70b"), InferWorkload(prompt_len=8192, gen_len=64)
    lay = InferLayout(tp=8, pp=1, ep=1, replicas=1, batch=1)
    base_rep = estimate_inference(model, H100, 8, work, lay)
    cal_rep = estimate_inference(model, cal, 8, work, lay)
    base_comm = sum(r.comm_s * r.count for r in base_rep.prefill_layers)
    cal_comm = sum(r.comm_s * r.count for r in cal_rep.prefill_layers)
    # the bandwidth terms double, the per-call latencies do not: between 1.6x (~20% latency) and 2x
    assert base_comm > 0 and 1.6 * base_comm < cal_comm <= base_comm / true_scale
    assert cal_rep.metrics.ttft_s > base_rep.metrics.ttft_s


def test_identity_calibration_leaves_serving_links_unchanged() -> None:
    same = with_calibration(H100, Calibration())
    for nbytes in (1e4, 1e6, 1e9):
        assert float(tp_all_reduce_time(same, nbytes, 8)) == float(tp_all_reduce_time(H100, nbytes, 8))
