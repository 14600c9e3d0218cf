"""`shardplan infer` and `shardplan estimate infer`."""

from __future__ import annotations
