"""What the machines are: GPU, node, links, host memory, disk; a catalog of presets."""

from shardplan.hardware.catalog import GPUS, SYSTEMS, get_gpu, get_system
from shardplan.hardware.load import resolve_system
from shardplan.hardware.spec import AttentionKernel, Cluster, GpuSpec, LinkSpec, SoftwareSpec, SystemSpec

__all__ = [
    "GPUS", "SYSTEMS", "AttentionKernel", "Cluster", "GpuSpec", "LinkSpec", "SoftwareSpec", "SystemSpec",
    "get_gpu", "get_system", "resolve_system",
]
