"""Collective communication time over the links of a cluster, as NCCL runs it.

Ranks are laid out Megatron-style, innermost first: TP, CP, DP (EP inside DP), PP. A group of ``n``
ranks with rank stride ``stride`` has ``k = min(n, gpus_per_node // stride)`` members per node
(at least 1) on ``N = n/k`` nodes. Intra-node parts use the node fabric; inter-node parts use each GPU's
own NIC (one ring per rail), so the ``k`` members of a node move ``1/k`` of the data each across the network.

Bytes per GPU (ring; Thakur et al. 2005, NCCL docs "Performance", nccl-tests ``busbw``): all-reduce
``2(n−1)/n·S``, reduce-scatter and all-gather ``(n−1)/n·S``, all-to-all ``(n−1)/n·S``. Link rates are the
measured bus bandwidths of the presets (``LinkSpec.effective_bytes_per_s``).

How NCCL runs them (NVIDIA/nccl@5067397 ``src/graph/tuning.cc``, the tuner that picks algorithm and
protocol per call; the faster one is taken here too):
- protocols: Simple (full bandwidth, per-hop latency of the link) and LL (8-byte flag per 16-byte line:
  half the bandwidth, at most tuning.cc's ``llMaxBws`` bus bandwidth, per-hop latency 0.18 of Simple's: NVLink
  0.6 vs 3.4 µs, network 2.7 vs 14 µs), each with its base latency per call (8.4 / 6.6 µs);
- all-reduce inside an NVSwitch node with NVLink SHARP: NVLS (the switch reduces; measured bus bandwidth
  ``LinkSpec.nvls_bus_bytes_per_s``, NVLS hardware latency 25 µs) when more than 4 GPUs of the node take part;
- across nodes the intra- and inter-node phases are pipelined (chunks stream through both at once), so the
  slower phase sets the time (4 nodes of 8 B200 reach 381.8 GB/s all-reduce bus bandwidth at 16 GiB,
  stas00/ml-engineering@744d01e network/README.md, where the sum of the phases would give far less);
- bytes through each NIC: a ring reduce-scatter/all-gather carries ``(n−1)/n·S/k`` (every ring edge carries all
  chunks but one), and an all-reduce ``2(n−1)/n·S/k`` (ring, or NCCL's double binary tree, whose nodes each reduce
  up and broadcast down one tree and are a leaf of the other) from 3 nodes up, ``S/k`` on 2 (each tree one edge):
  the bus bandwidth stays at the NICs' rate at any node count, as nccl-tests measures it;
- latency steps: a ring reduce-scatter/all-gather passes every rank, ``n−1`` steps, of which ``N−1`` cross the
  network and ``n−N`` stay in a node (tuning.cc ``nsteps − nInterSteps``); all-reduce tree across nodes,
  ``2·((k−1)`` NVLink ``+ ⌈log2 N⌉`` network hops).
"""

from __future__ import annotations

import numpy as np

from shardplan.hardware.spec import LinkSpec, SystemSpec

SIMPLE_BASE_S = 8.4e-6  # tuning.cc baseLat[Simple] (ring/tree)
LL_BASE_S = 6.6e-6  # tuning.cc baseLat[LL] (ring)
LL_HOP_RATIO = 0.18  # tuning.cc hwLat ring LL/Simple: NVLink 0.6/3.4, network 2.7/14
LL_BW_FACTOR = 0.5  # LL sends 8 bytes of data per 16-byte line (tuning.cc: busBw *= 1.0/2 for LL)
NVLS_LATENCY_S = 25e-6  # tuning.cc hwLat[NVLINK][NVLS][Simple]
NVLS_MIN_GPUS = 5  # NCCL selects NVLS above 4 GPUs per node (8×H200 all-reduce table, ml-engineering §SHARP)
# Ceiling on the LL protocol's ring bus bandwidth (tuning.cc ``llMaxBws``, GB/s, ``busBw = min(llMaxBw, busBw·0.5)``):
# one node by GPU generation (Volta 39, Ampere/Ada 87.7, Hopper 141, Blackwell 282); across nodes by host CPU, Intel
# (and Grace) rows taken: 2 nodes 39, 3 or more 20.4 (AMD hosts: 22.5 / 19.0). RCCL's tuner is not modelled.
LL_MAX_BUS_ONE_NODE = (("v100", 39e9), ("t4", 39e9), ("h", 141e9), ("b", 282e9), ("gb", 282e9), ("mi", 141e9))
LL_MAX_BUS_AMPERE = 87.7e9
LL_MAX_BUS_TWO_NODES = 39e9
LL_MAX_BUS_MORE_NODES = 20.4e9


def members_per_node(system: SystemSpec, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Members of a group of ``n`` ranks (stride ``stride``) that share one node."""
    n = np.asarray(n)
    per = np.maximum(system.gpus_per_node // np.maximum(np.asarray(stride), 1), 1)
    return np.minimum(n, per)


def link_bandwidth(system: SystemSpec, level: str) -> float:
    """Achieved bandwidth of the ``intra``/``inter``-node link, with the calibration's collective-efficiency
    scale (hardware.spec.Calibration); the efficiency never exceeds 1. Every collective, training's and
    serving's, reads link rates here, so a calibrated system file moves both alike."""
    link: LinkSpec | None = system.intra_node if level == "intra" else system.inter_node
    if link is None:
        return np.inf
    cal = system.calibration
    scale = cal.intra_node_comm_scale if level == "intra" else cal.inter_node_comm_scale
    return link.bandwidth_bytes_per_s * min(link.efficiency * scale, 1.0)


def _lat(link: LinkSpec | None) -> float:
    return link.latency_s if link is not None else 0.0


def ll_max_bus(system: SystemSpec, nodes: np.ndarray) -> np.ndarray:
    """tuning.cc's ceiling on LL ring bus bandwidth for a call over ``nodes`` nodes (``LL_MAX_BUS_*``)."""
    name = system.gpu.name
    one = next((bw for prefix, bw in LL_MAX_BUS_ONE_NODE if name.startswith(prefix)), LL_MAX_BUS_AMPERE)
    nodes = np.asarray(nodes, dtype=float)
    return np.where(nodes <= 1, one, np.where(nodes <= 2, LL_MAX_BUS_TWO_NODES, LL_MAX_BUS_MORE_NODES))


def _nccl(transfer_s: np.ndarray, hops_s: np.ndarray, ll_floor_s: np.ndarray | float = 0.0) -> np.ndarray:
    """The faster of NCCL's Simple and LL protocols for a call moving data in ``transfer_s`` at full bandwidth
    with per-hop latencies summing to ``hops_s`` under Simple; ``ll_floor_s`` is the LL transfer at NCCL's LL
    bus-bandwidth ceiling (``ll_max_bus``: bus bytes / ceiling), which large calls hit first."""
    simple = SIMPLE_BASE_S + hops_s + transfer_s
    ll = LL_BASE_S + LL_HOP_RATIO * hops_s + np.maximum(transfer_s / LL_BW_FACTOR, ll_floor_s)
    return np.minimum(simple, ll)


def _split(system: SystemSpec, n: np.ndarray, stride: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = np.asarray(n, dtype=float)
    k = members_per_node(system, n, stride).astype(float)
    return n, k, n / k


def all_reduce_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """All-reduce of ``nbytes`` per GPU: ring or NVLS in the node, pipelined with a tree across nodes."""
    n, k, nodes = _split(system, n, stride)
    s = np.asarray(nbytes, dtype=float)
    intra_bytes = 2 * (k - 1) / k * s
    ring = intra_bytes / link_bandwidth(system, "intra")
    # per NIC 2(n−1)/n·s/k from 3 nodes up, s/k on 2 (module docstring): H100 with 8×400 Gb/s IB measures 470 GB/s bus
    # bandwidth on 2 nodes and 365.8 on 4 (nccl-tests issue #309), about 345–367 on 512–1,024 (NVIDIA GTC24 S62129)
    per_nic = np.where(nodes > 2, 2 * (n - 1) / n, np.where(nodes > 1, 1.0, 0.0))
    inter = per_nic * s / k / link_bandwidth(system, "inter")
    hops = 2 * ((k - 1) * _lat(system.intra_node)
                + np.ceil(np.log2(np.maximum(nodes, 1))) * _lat(system.inter_node))
    t = _nccl(np.maximum(ring, inter), hops, 2 * (n - 1) / n * s / ll_max_bus(system, nodes))
    nvls_bw = system.intra_node.nvls_bus_bytes_per_s
    if nvls_bw:
        nvls_bw = nvls_bw * system.calibration.intra_node_comm_scale
        nvls_hops = NVLS_LATENCY_S + 2 * np.ceil(np.log2(np.maximum(nodes, 1))) * _lat(system.inter_node)
        nvls = SIMPLE_BASE_S + nvls_hops + np.maximum(intra_bytes / nvls_bw, inter)
        t = np.where(k >= NVLS_MIN_GPUS, np.minimum(t, nvls), t)
    return np.where(n > 1, t, 0.0)


def reduce_scatter_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Reduce-scatter (or all-gather: same cost) of a ``nbytes`` buffer across ``n`` ranks (ring)."""
    n, k, nodes = _split(system, n, stride)
    s = np.asarray(nbytes, dtype=float)
    intra = (k - 1) / k * s / link_bandwidth(system, "intra")
    # a ring through all n ranks per channel: each NIC moves (n−1)/n·s/k (nccl-tests doc/PERFORMANCE.md: a ring's bus
    # bandwidth, algbw·(n−1)/n, is the link rate at any rank count), not the (N−1)/N·s/k of a per-node hierarchy
    inter = np.where(nodes > 1, (n - 1) / n * s / k / link_bandwidth(system, "inter"), 0.0)
    hops = (n - nodes) * _lat(system.intra_node) + (nodes - 1) * _lat(system.inter_node)
    ll_floor = (n - 1) / n * s / ll_max_bus(system, nodes)
    return np.where(n > 1, _nccl(np.maximum(intra, inter), hops, ll_floor), 0.0)


all_gather_time = reduce_scatter_time


def all_to_all_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """All-to-all where each GPU holds ``nbytes`` and keeps 1/n: intra share on the fabric, rest on the NIC."""
    n, k, _ = _split(system, n, stride)
    s = np.asarray(nbytes, dtype=float)
    return two_level_all_to_all_time(system, (k - 1) / n * s, (n - k) / n * s, n, stride)


def two_level_all_to_all_time(system: SystemSpec, intra_bytes: np.ndarray, inter_bytes: np.ndarray, n: np.ndarray,
                              stride: np.ndarray, *, intra_rate: np.ndarray | None = None) -> np.ndarray:
    """An all-to-all over ``n`` ranks that sends ``intra_bytes`` per GPU over the node fabric and ``inter_bytes``
    over its own NIC; both levels stream at once (NCCL's peer-to-peer channels, DeepEP's NVLink forwarding of
    what arrives by RDMA), so the slower level sets the time. One NVLink hop per node peer, one network hop. The
    fabric moves at the link's rate, or at ``intra_rate`` where a dispatcher's own kernels were measured
    (``ep_kernel_rate``)."""
    n, k, _ = _split(system, n, stride)
    rate = link_bandwidth(system, "intra") if intra_rate is None else intra_rate
    intra = np.asarray(intra_bytes, dtype=float) / rate
    inter = np.where(n > k, np.asarray(inter_bytes, dtype=float) / link_bandwidth(system, "inter"), 0.0)
    hops = (k - 1) * _lat(system.intra_node) + np.where(n > k, _lat(system.inter_node), 0.0)
    return np.where(n > 1, _nccl(np.maximum(intra, inter), hops), 0.0)


def ep_kernel_rate(system: SystemSpec, n: np.ndarray, stride: np.ndarray) -> np.ndarray | None:
    """Bytes per second that DeepEP/HybridEP kernels move over NVLink for an EP group of ``n`` ranks, as measured on
    the GPU's reference (``hardware.ep_data``): the mean of dispatch and combine, times (r − 1)/r for the received
    bytes that stay home on the benchmark's r ranks, at the group's ranks inside one NVLink domain (held at the
    nearest measured count outside the table), scaled by the calibration's intra-node factor, never above the link's
    rate. None where the GPU's family was not measured (the link's rate then)."""
    from shardplan.hardware.ep_data import EP_KERNEL_GBPS, EP_KERNEL_REFERENCE

    ref = EP_KERNEL_REFERENCE.get(system.gpu.name)
    if ref is None:
        return None
    ranks, dispatch, combine = EP_KERNEL_GBPS[ref]
    remote = [(d + c) / 2 * 1e9 * (r - 1) / r for r, d, c in zip(ranks, dispatch, combine, strict=True)]
    _, k, _ = _split(system, n, stride)
    rate = np.interp(k, ranks, remote) * system.calibration.intra_node_comm_scale
    return np.minimum(rate, link_bandwidth(system, "intra"))


def p2p_time(system: SystemSpec, nbytes: np.ndarray, crosses_node: np.ndarray) -> np.ndarray:
    """Point-to-point send of ``nbytes`` to a neighbour, inside the node or across it (one hop)."""
    s = np.asarray(nbytes, dtype=float)
    inter = _nccl(s / link_bandwidth(system, "inter"), np.asarray(_lat(system.inter_node)))
    intra = _nccl(s / link_bandwidth(system, "intra"), np.asarray(_lat(system.intra_node)))
    return np.where(np.asarray(crosses_node, dtype=bool), inter, intra)


def with_overlap_cost(system: SystemSpec, total_s: np.ndarray, exposed_s: np.ndarray, *,
                      slowdown: float | None = None) -> np.ndarray:
    """Time a collective adds to the step when ``exposed_s`` of its ``total_s`` shows and the rest hides behind
    compute: the exposed part plus the compute it slows while hidden (``SoftwareSpec.overlap_slowdown``: NCCL
    kernels occupy SMs and share the power budget; Lee et al. 2025, arXiv 2507.03114; ``slowdown`` where another
    kind of communication kernel was measured, e.g. ``SoftwareSpec.ep_overlap_slowdown``)."""
    hidden = np.maximum(np.asarray(total_s, dtype=float) - exposed_s, 0.0)
    return exposed_s + (system.software.overlap_slowdown if slowdown is None else slowdown) * hidden
