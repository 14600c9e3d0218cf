"""Latency-bound TP all-reduce as serving engines issue it: the engines' custom all-reduce over NVLink/xGMI, NCCL's
ring with its LL / LL128 / Simple protocols elsewhere.

- **Custom all-reduce** (vLLM ``csrc/custom_all_reduce.cuh``, TensorRT-LLM's allReduce kernels): peers' buffers are
  read directly over the fabric. One-shot (one latency, each GPU pulls ``(n−1)·S``) or two-shot (reduce-scatter
  + all-gather: two latencies, ``2(n−1)/n·S``), the faster applies. vLLM uses it only on a full NVLink/xGMI fabric
  (or two PCIe GPUs) and for messages up to ``CUSTOM_AR_MAX_BYTES`` (``CustomAllreduce(max_size=8192 * 1024)`` in
  ``vllm/distributed/device_communicators/custom_all_reduce.py``); otherwise NCCL.
- **NCCL ring** (NCCL ``src/graph/tuning.cc``, 2.19–2.21): a ring all-reduce takes ``2(n−1)`` steps; its latency is
  ``baseLat + 2(n−1)·hwLat`` per protocol and its bandwidth the link's times the protocol's payload share (LL
  sends 4 data bytes per 8-byte line with a flag, LL128 120 of 128 bytes, Simple all of them). NCCL picks the
  fastest protocol for the size; LL128 runs on NVLink only.
- **Expert dispatch/combine**: the serving engines' all-to-all kernels (DeepEP's low-latency mode, NVSHMEM puts;
  NCCL's grouped send/recv) write to every peer of the EP group at once, so one message latency is paid, not one
  per peer; the bytes leave over the node fabric and, for peers in other nodes, each GPU's own NIC in parallel.
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.hardware.spec import SystemSpec

CUSTOM_AR_MAX_BYTES = 8192 * 1024  # vLLM CustomAllreduce max_size (custom_all_reduce.py)
# NCCL tuning.cc: Ring base latency per protocol (µs), hardware latency per ring step over NVLink and PCIe (µs).
NCCL_RING_BASE_LAT_S = {"LL": 6.6e-6, "LL128": 14.0e-6, "Simple": 8.4e-6}
NCCL_RING_HW_LAT_S = {"nvlink": {"LL": 0.6e-6, "LL128": 1.9e-6, "Simple": 3.4e-6},
                      "pci": {"LL": 1.0e-6, "LL128": 2.5e-6, "Simple": 5.7e-6}}
# Payload share of the link bandwidth: LL 8-byte lines carry 4 bytes + a 4-byte flag; LL128 120 of 128 bytes.
NCCL_PROTOCOL_BW_SHARE = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}


PCIE5_X16_BYTES_PER_S = 64e9  # PCIe 5.0 x16, one direction (PCI-SIG): the fastest PCIe a GPU link can be


def has_gpu_fabric(system: SystemSpec) -> bool:
    """NVLink/xGMI inside the node: a GPU↔GPU link faster than any PCIe (PCIe-only boxes route peer traffic over
    PCIe at ≤ 64 GB/s per direction)."""
    return system.intra_node.bandwidth_bytes_per_s > PCIE5_X16_BYTES_PER_S * 1.1


def nccl_ring_all_reduce_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """NCCL ring all-reduce inside one node: the fastest protocol's ``latency + 2(n−1)/n·S / bandwidth``."""
    s, n = np.asarray(nbytes, dtype=float), np.asarray(n, dtype=float)
    fabric = "nvlink" if has_gpu_fabric(system) else "pci"
    protos = ("LL", "LL128", "Simple") if fabric == "nvlink" else ("LL", "Simple")
    bw = comm.link_bandwidth(system, "intra")
    steps = 2 * (n - 1)
    times = [NCCL_RING_BASE_LAT_S[p] + steps * NCCL_RING_HW_LAT_S[fabric][p]
             + steps / n * s / (bw * NCCL_PROTOCOL_BW_SHARE[p]) for p in protos]
    return np.where(n > 1, np.min(np.stack(times), axis=0), 0.0)


def custom_all_reduce_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """One-shot or two-shot peer-to-peer all-reduce over the node fabric, whichever is faster."""
    s, n = np.asarray(nbytes, dtype=float), np.asarray(n, dtype=float)
    link = system.intra_node
    bw, lat = comm.link_bandwidth(system, "intra"), link.latency_s
    return np.where(n > 1, np.minimum(lat + (n - 1) * s / bw, 2 * lat + 2 * (n - 1) / n * s / bw), 0.0)


def tp_all_reduce_time(system: SystemSpec, nbytes: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """TP all-reduce of ``nbytes`` per GPU: custom all-reduce where the engine uses it, NCCL's ring inside the
    node otherwise, NCCL's node phase pipelined with the network's across nodes (``comm.all_reduce_time``)."""
    n = np.asarray(tp, dtype=float)
    s = np.asarray(nbytes, dtype=float) + np.zeros_like(n)
    custom_ok = (has_gpu_fabric(system) | (n <= 2)) & (s <= CUSTOM_AR_MAX_BYTES)
    in_node = np.where(custom_ok, custom_all_reduce_time(system, s, n), nccl_ring_all_reduce_time(system, s, n))
    across = comm.all_reduce_time(system, s, n, np.ones_like(n))
    return np.where(n > 1, np.where(n <= system.gpus_per_node, in_node, across), 0.0)


def ep_all_to_all_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Dispatch (or combine) of ``nbytes`` per GPU over an EP group of ``n`` ranks at rank ``stride``, keeping 1/n:
    the intra-node share on the fabric and the rest on the NIC, concurrently, after one latency (the slower link's)."""
    n = np.asarray(n, dtype=float)
    k = comm.members_per_node(system, n, stride).astype(float)
    s = np.asarray(nbytes, dtype=float)
    intra = (k - 1) / n * s / comm.link_bandwidth(system, "intra")
    net = system.inter_node
    inter = (n - k) / n * s / comm.link_bandwidth(system, "inter") if net is not None else 0.0 * s
    lat = np.where(n > k, net.latency_s if net is not None else 0.0, system.intra_node.latency_s)
    return np.where(n > 1, np.maximum(intra, inter) + lat, 0.0)
