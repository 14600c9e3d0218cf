"""`shardplan offload` and `shardplan estimate offload`."""

from __future__ import annotations
