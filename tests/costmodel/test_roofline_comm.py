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


SIMPLE_BASE, LL_BASE = 8.4e-6, 6.6e-6  # NCCL tuning.cc base latencies (Simple, LL)


def test_all_reduce_inside_a_node_is_a_ring() -> None:
    s = 1e9  # large: Simple protocol, 2(n−1)/n·S / (bw·eff) + base + 2(n−1) hop latencies
    expected = 2 * 3 / 4 * s / 50e9 + SIMPLE_BASE + 2 * 3 * 1e-6
    assert float(comm.all_reduce_time(SYSTEM, s, 4, 1)) == pytest.approx(expected)


def test_small_all_reduce_uses_ll_at_half_bandwidth_and_a_fifth_of_the_hop_latency() -> None:
    s = 8e3  # 8 kB: LL wins (Simple 8.4 + 6 + 0.12 µs; LL 6.6 + 0.18·6 + 0.24 µs)
    ll = LL_BASE + 0.18 * 2 * 3 * 1e-6 + 2 * 3 / 4 * s / 50e9 / 0.5
    assert float(comm.all_reduce_time(SYSTEM, s, 4, 1)) == pytest.approx(ll)


def test_all_reduce_across_nodes_pipelines_node_and_network_phases() -> None:
    s, n = 1e9, 16  # 4 per node × 4 nodes
    intra = 2 * 3 / 4 * s / 50e9  # reduce-scatter + all-gather inside the node: 30 ms
    inter = 2 * 15 / 16 * (s / 4) / 10e9  # a quarter per NIC, up and down the trees across 4 nodes: 46.9 ms
    latency = SIMPLE_BASE + 2 * (3 * 1e-6 + 2 * 5e-6)  # ring in node, tree (log2 4 = 2 steps) across
    assert float(comm.all_reduce_time(SYSTEM, s, n, 1)) == pytest.approx(max(intra, inter) + latency)


def test_group_with_stride_of_a_node_uses_only_the_network() -> None:
    s = 1e9  # 4 ranks with stride 4: one per node
    expected = 2 * 3 / 4 * s / 10e9 + SIMPLE_BASE + 2 * 2 * 5e-6
    assert float(comm.all_reduce_time(SYSTEM, s, 4, 4)) == pytest.approx(expected)


def test_reduce_scatter_costs_half_an_all_reduce_and_one_rank_costs_nothing() -> None:
    s = 1e9
    assert float(comm.reduce_scatter_time(SYSTEM, s, 4, 1)) == pytest.approx(3 / 4 * s / 50e9 + SIMPLE_BASE + 3e-6)
    assert float(comm.all_reduce_time(SYSTEM, s, 1, 1)) == 0.0


def test_reduce_scatter_across_nodes_has_one_network_hop_per_node() -> None:
    """The ring visits all 16 ranks (4 nodes of 4): 15 steps, 3 across the network and 12 inside a node
    (NVIDIA/nccl tuning.cc: ``(nsteps − nInterSteps)·intraLat + nInterSteps·interLat``)."""
    s, n = 1e9, 16
    transfer = max(3 / 4 * s / 50e9, 15 / 16 * (s / 4) / 10e9)  # each NIC's ring edge carries 15 of 16 chunks
    assert float(comm.reduce_scatter_time(SYSTEM, s, n, 1)) == pytest.approx(transfer + SIMPLE_BASE + 12e-6 + 15e-6)


def test_ring_latency_grows_with_every_rank_not_only_the_nodes() -> None:
    """Small buffers are latency-bound: 64 ranks on 16 nodes pay 63 ring steps (15 network, 48 NVLink) where a
    rank-per-node count would give 15 + 3: the LL protocol's time, by hand, from the same step counts."""
    s = 1024.0
    t = float(comm.reduce_scatter_time(SYSTEM, s, 64, 1))
    hops = 48 * 1e-6 + 15 * 5e-6
    simple = SIMPLE_BASE + hops + 63 / 64 * (s / 4) / 10e9
    ll = comm.LL_BASE_S + comm.LL_HOP_RATIO * hops + max(63 / 64 * (s / 4) / 10e9 / comm.LL_BW_FACTOR,
                                                         63 / 64 * s / comm.LL_MAX_BUS_MORE_NODES)
    assert t == pytest.approx(min(simple, ll))


def test_large_rings_across_nodes_keep_the_simple_protocol() -> None:
    """NCCL caps LL's ring bus bandwidth at 20.4 GB/s beyond two nodes (tuning.cc ``llMaxBws``), so a 160 MB
    reduce-scatter over 512 H100 runs Simple: bandwidth time plus 448 NVLink and 63 network steps, by hand."""
    from shardplan.hardware import get_system

    h100 = get_system("dgx-h100")
    s, n = 160e6, 512
    t = float(comm.reduce_scatter_time(h100, s, n, 1))
    intra = 7 / 8 * s / comm.link_bandwidth(h100, "intra")
    inter = 511 / 512 * s / 8 / comm.link_bandwidth(h100, "inter")
    hops = 448 * h100.intra_node.latency_s + 63 * h100.inter_node.latency_s
    assert t == pytest.approx(SIMPLE_BASE + hops + max(intra, inter))
    assert 511 / 512 * s / comm.LL_MAX_BUS_MORE_NODES > t  # LL at its ceiling would be slower still


def test_dgx_h100_all_reduce_matches_nccl_tests_bus_bandwidth() -> None:
    """8×H100/H200 NVLink4, 8 GiB: nccl-tests bus bandwidth 473.1 GB/s with NVLS (365.6 ring) (ml-engineering
    network/README.md §SHARP): time = 2·7/8·S / busbw."""
    from shardplan.hardware import get_system

    s = 8 * 2**30
    t = float(comm.all_reduce_time(get_system("dgx-h100"), s, 8, 1))
    assert 2 * 7 / 8 * s / t == pytest.approx(473.1e9, rel=0.01)
    # A100 NVLink3 has no NVLS: the ring at 0.78 of 300 GB/s
    t_a100 = float(comm.all_reduce_time(get_system("dgx-a100-80gb"), s, 8, 1))
    assert 2 * 7 / 8 * s / t_a100 == pytest.approx(234e9, rel=0.01)


def test_four_b200_nodes_all_reduce_is_set_by_the_network_phase() -> None:
    """4 nodes × 8 B200, 16 GiB: measured 381.8 GB/s bus bandwidth (ml-engineering network/README.md, 'Inter-node
    speed depends on intra-node speed'). From 3 nodes up each NIC moves 2(n−1)/n·S/8 (the trees' up and down, as a
    ring), so the bus bandwidth is the 8 NICs' rate: 8 × 0.85 × 50 GB/s = 340 GB/s, 11% under that measurement (EFA
    there, InfiniBand here), and pipelined with the node's phase, not added to it."""
    from shardplan.hardware import get_system

    s, n = 16 * 2**30, 32
    system = get_system("dgx-b200")
    busbw = 2 * 31 / 32 * s / float(comm.all_reduce_time(system, s, n, 1))
    nic = system.inter_node.effective_bytes_per_s
    assert busbw == pytest.approx(8 * nic, rel=0.01)
    assert 0.85 < busbw / 381.8e9 < 1.0


def test_h100_all_reduce_bus_bandwidth_across_nodes_against_nccl_tests() -> None:
    """8×H100 per node, 8×400 Gb/s InfiniBand, 16 GiB: nccl-tests issue #309 (NCCL 2.26.2) measured 470 GB/s on 2 nodes
    and 365.8 on 4; NVIDIA GTC24 S62129 (slide 35) and arXiv 2411.13055 show about 345–367 on 512–1,024 nodes. The
    model: on 2 nodes each tree is one edge (S/8 each way per NIC), the node's NVLS phase then sets the pace; from 3
    nodes on the NICs' 340 GB/s at any node count."""
    from shardplan.hardware import get_system

    h100, s = get_system("dgx-h100"), 16 * 2**30

    def busbw(nodes: int) -> float:
        n = 8 * nodes
        return 2 * (n - 1) / n * s / float(comm.all_reduce_time(h100, s, n, 1))

    assert busbw(2) == pytest.approx(470e9, rel=0.10)
    assert busbw(4) == pytest.approx(365.8e9, rel=0.10)
    for nodes in (64, 512, 1024):
        assert 0.90 < busbw(nodes) / 355e9 < 1.0


def test_fixed_per_kernel_time_adds_to_the_work_and_the_floor_still_holds() -> None:
    gpu = GPU.model_copy(update={"kernel_fixed_s": 3e-6, "kernel_launch_s": 4e-6})
    # memory-bound 1e8 bytes at 0.5 TB/s = 200 µs, plus 3 µs paid by every kernel
    assert float(kernel_time(gpu, 1e6, 1e8, "bf16")) == pytest.approx(2e-4 + 3e-6)
    # 10 bytes: 20 ps of work + 3 µs is under the 4 µs floor
    assert float(kernel_time(gpu, 10.0, 10.0, "bf16")) == pytest.approx(4e-6)
    # twelve 1 µs kernels cost 12·(1 + 3) µs, not twelve floors of 4 µs
    assert 12 * float(kernel_time(gpu, 0.0, 5e5, "bf16")) == pytest.approx(12 * (1e-6 + 3e-6))


def test_catalog_gpus_pay_their_launch_time_on_every_kernel() -> None:
    from shardplan.hardware.gpus import GPUS

    for g in GPUS.values():
        assert g.kernel_fixed_s == g.kernel_launch_s > 0, g.name
