"""How a job of N GPUs is laid out on a rack-scale NVLink system (GB200 / GB300 NVL72).

An NVL72 rack is 18 compute trays of 4 GPUs (one host each: the unit a scheduler allocates) on one NVLink
domain of 72 GPUs. A job uses whole trays. A job of more than 18 trays is placed as equal segments of trays,
each segment inside one NVLink domain; groups of ranks within a segment talk over NVLink, groups that span
segments cross the scale-out network (InfiniBand / RoCE). NVIDIA's Megatron-Bridge performance launcher
(NVIDIA-NeMo/Megatron-Bridge scripts/performance/utils/executors.py at 067f987d, the sbatch ``--segment``) asks
for one segment of all the job's trays when it has at most 18, otherwise segments of the largest divisor of its
tray count up to 18; its README: "Segments are not guaranteed to land in different NVLink domains". So the
published 256-GPU GB200/GB300 runs (``--num_gpus 256 --gpus_per_node 4``: 64 trays) ran as 4 segments of 16 trays,
4 NVLink domains of 64 GPUs. Only the segment is guaranteed to share NVLink, so the cost model treats each
segment as one node (``gpus_per_node``) and everything between segments as crossing the network.

Systems without ``gpus_per_tray`` (DGX/HGX 8-GPU nodes, single GPUs) are unchanged: any count up to a node,
whole nodes beyond.
"""

from __future__ import annotations

from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec


def domain_size(system: SystemSpec, num_gpus: int) -> int:
    """GPUs per NVLink domain a job of ``num_gpus`` uses on ``system`` (the job's "node")."""
    tray, top = system.gpus_per_tray, system.nvlink_domain_gpus or system.gpus_per_node
    if tray is None or num_gpus <= top:
        return top
    trays, most = num_gpus // tray, top // tray
    segment = next(d for d in range(most, 0, -1) if trays % d == 0)
    return segment * tray


def job_system(system: SystemSpec, num_gpus: int) -> SystemSpec:
    """``system`` laid out for a job of ``num_gpus``: a tray system's node becomes the NVLink domain the job
    uses (``domain_size``), with the host resources of that many GPUs; other systems come back unchanged.

    Idempotent for the same count. A count that is not whole trays is refused (exit 2, naming the tray size).
    """
    tray = system.gpus_per_tray
    if tray is None:
        return system
    if num_gpus > tray and num_gpus % tray:
        raise ShardplanError(f"gpus ({num_gpus}) must be ≤ {tray} or a multiple of {tray}: a job on {system.name} "
                             f"uses whole compute trays of {tray} GPUs", field="gpus")
    d, top = domain_size(system, num_gpus), system.nvlink_domain_gpus or system.gpus_per_node
    if d == system.gpus_per_node:
        return system
    if system.nvlink_domain_gpus is not None:
        raise ValueError(f"{system.name} is already laid out for another job ({system.gpus_per_node} per domain)")
    f = d / system.gpus_per_node
    trays = f"{d // tray} tray" + ("s" if d > tray else "")
    note = f"; this job: {num_gpus // d} NVLink domains of {d} GPUs ({trays}) over the network"
    return system.model_copy(update={
        "gpus_per_node": d, "nvlink_domain_gpus": top, "description": system.description + note,
        "host_memory_bytes": round(system.host_memory_bytes * f), "cpu_flops": system.cpu_flops * f,
        "cpu_memory_bandwidth_bytes_per_s": system.cpu_memory_bandwidth_bytes_per_s * f,
        "disk_bytes": system.disk_bytes * f, "disk_read_bytes_per_s": system.disk_read_bytes_per_s * f,
        "disk_write_bytes_per_s": system.disk_write_bytes_per_s * f,
    })
