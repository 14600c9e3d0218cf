"""Collective communication time over the links of a cluster, hierarchical when a group spans nodes.

Ranks are laid out Megatron-style, innermost first: TP, CP, DP (EP inside DP), PP. A group of ``n``
ranks with rank stride ``stride`` has ``k = min(n, gpus_per_node // stride)`` members per node
(at least 1). Intra-node parts use the node fabric; inter-node parts use each GPU's own NIC, so the
``k`` members of a node move ``1/k`` of the data each across the network.

Ring algorithm byte counts per GPU (Thakur et al. 2005; NCCL docs "Performance"): all-reduce
``2(n−1)/n·S``, reduce-scatter and all-gather ``(n−1)/n·S``, all-to-all ``(n−1)/n·S``.
"""

from __future__ import annotations

import numpy as np

from shardplan.hardware.spec import LinkSpec, SystemSpec


def members_per_node(system: SystemSpec, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Members of a group of ``n`` ranks (stride ``stride``) that share one node."""
    n = np.asarray(n)
    per = np.maximum(system.gpus_per_node // np.maximum(np.asarray(stride), 1), 1)
    return np.minimum(n, per)


def _bw(link: LinkSpec | None) -> float:
    return link.effective_bytes_per_s if link is not None else np.inf


def _lat(link: LinkSpec | None) -> float:
    return link.latency_s if link is not None else 0.0


def _ring_steps_latency(system: SystemSpec, k: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    # Ring latency inside a node; across nodes NCCL's tree/ring hybrids grow like log2(nodes).
    return (k - 1) * _lat(system.intra_node) + np.ceil(np.log2(np.maximum(nodes, 1))) * _lat(system.inter_node)


def all_reduce_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """All-reduce of ``nbytes`` per GPU: reduce-scatter in node, all-reduce across nodes, all-gather in node."""
    n = np.asarray(n, dtype=float)
    k = members_per_node(system, n, stride).astype(float)
    nodes = n / k
    s = np.asarray(nbytes, dtype=float)
    intra = 2 * (k - 1) / k * s / _bw(system.intra_node)
    inter = np.where(nodes > 1, 2 * (nodes - 1) / nodes * s / k / _bw(system.inter_node), 0.0)
    lat = 2 * _ring_steps_latency(system, k, nodes)
    return np.where(n > 1, intra + inter + lat, 0.0)


def reduce_scatter_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Reduce-scatter (or all-gather: same cost) of a ``nbytes`` buffer across ``n`` ranks."""
    n = np.asarray(n, dtype=float)
    k = members_per_node(system, n, stride).astype(float)
    nodes = n / k
    s = np.asarray(nbytes, dtype=float)
    intra = (k - 1) / k * s / _bw(system.intra_node)
    inter = np.where(nodes > 1, (nodes - 1) / nodes * s / k / _bw(system.inter_node), 0.0)
    return np.where(n > 1, intra + inter + _ring_steps_latency(system, k, nodes), 0.0)


all_gather_time = reduce_scatter_time


def all_to_all_time(system: SystemSpec, nbytes: np.ndarray, n: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """All-to-all where each GPU holds ``nbytes`` and keeps 1/n: intra share on the fabric, rest on the NIC."""
    n = np.asarray(n, dtype=float)
    k = members_per_node(system, n, stride).astype(float)
    s = np.asarray(nbytes, dtype=float)
    intra = (k - 1) / n * s / _bw(system.intra_node)
    inter = (n - k) / n * s / _bw(system.inter_node)
    lat = (k - 1) * _lat(system.intra_node) + np.where(n > k, _lat(system.inter_node), 0.0)
    return np.where(n > 1, np.maximum(intra, inter) + lat, 0.0)


def p2p_time(system: SystemSpec, nbytes: np.ndarray, crosses_node: np.ndarray) -> np.ndarray:
    """Point-to-point send of ``nbytes`` to a neighbour, inside the node or across it."""
    s = np.asarray(nbytes, dtype=float)
    inter = s / _bw(system.inter_node) + _lat(system.inter_node)
    intra = s / _bw(system.intra_node) + _lat(system.intra_node)
    return np.where(np.asarray(crosses_node, dtype=bool), inter, intra)
