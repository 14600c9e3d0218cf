"""Roofline and collective times against hand calculations."""

import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.kernels import interp_efficiency, kernel_time
from shardplan.hardware.spec import GpuSpec, LinkSpec, SystemSpec

GPU = GpuSpec(name="toy", memory_bytes=2**30, memory_bandwidth_bytes_per_s=1e12, peak_flops={"bf16": 1e14},
              matmul_efficiency=[(1e6, 0.2), (1e10, 0.8)], memory_efficiency=[(1.0, 0.5)], kernel_launch_s=1e-6)
INTRA = LinkSpec(bandwidth_bytes_per_s=100e9, latency_s=1e-6, efficiency=0.5)
INTER = LinkSpec(bandwidth_bytes_per_s=10e9, latency_s=5e-6, efficiency=1.0)
SYSTEM = SystemSpec(name="toy", gpu=GPU, gpus_per_node=4, intra_node=INTRA, inter_node=INTER, pcie=INTRA,
                    host_memory_bytes=2**30)


def test_efficiency_interpolates_in_log_size() -> None:
    # halfway between 1e6 and 1e10 in log space is 1e8: halfway between 0.2 and 0.8
    assert float(interp_efficiency(GPU.matmul_efficiency, 1e8)) == pytest.approx(0.5)
    assert float(interp_efficiency(GPU.matmul_efficiency, 1e3)) == pytest.approx(0.2)  # clamped
    assert float(interp_efficiency(GPU.matmul_efficiency, 1e12)) == pytest.approx(0.8)


def test_kernel_time_is_max_of_compute_memory_and_launch() -> None:
    # compute-bound: 1e10 FLOPs at 0.8·1e14 = 125 µs; 1 MB at 0.5·1e12 = 2 µs
    assert float(kernel_time(GPU, 1e10, 1e6, "bf16")) == pytest.approx(1e10 / 0.8e14)
    # memory-bound: 1e6 FLOPs (0.2 eff: 50 ns) vs 1e8 bytes at 0.5 TB/s = 200 µs
    assert float(kernel_time(GPU, 1e6, 1e8, "bf16")) == pytest.approx(2e-4)
    # tiny kernel: the launch floor
    assert float(kernel_time(GPU, 10.0, 10.0, "bf16")) == pytest.approx(1e-6)


def test_all_reduce_inside_a_node_is_a_ring() -> None:
    s = 1e9
    expected = 2 * 3 / 4 * s / 50e9 + 2 * 3 * 1e-6  # 2(n−1)/n·S / (bw·eff) + 2(n−1) latency steps
    assert float(comm.all_reduce_time(SYSTEM, s, 4, 1)) == pytest.approx(expected)


def test_all_reduce_across_nodes_is_hierarchical() -> None:
    s, n = 1e9, 16  # 4 per node × 4 nodes
    intra = 2 * 3 / 4 * s / 50e9  # reduce-scatter + all-gather inside the node
    inter = 2 * 3 / 4 * (s / 4) / 10e9  # all-reduce of a quarter across 4 nodes, one NIC each
    latency = 2 * (3 * 1e-6 + 2 * 5e-6)  # ring in node, log2(4) steps across
    assert float(comm.all_reduce_time(SYSTEM, s, n, 1)) == pytest.approx(intra + inter + latency)


def test_group_with_stride_of_a_node_uses_only_the_network() -> None:
    s = 1e9  # 4 ranks with stride 4: one per node
    expected = 2 * 3 / 4 * s / 10e9 + 2 * 2 * 5e-6
    assert float(comm.all_reduce_time(SYSTEM, s, 4, 4)) == pytest.approx(expected)


def test_reduce_scatter_costs_half_an_all_reduce_and_one_rank_costs_nothing() -> None:
    s = 1e9
    assert float(comm.reduce_scatter_time(SYSTEM, s, 4, 1)) == pytest.approx(3 / 4 * s / 50e9 + 3e-6)
    assert float(comm.all_reduce_time(SYSTEM, s, 1, 1)) == 0.0
