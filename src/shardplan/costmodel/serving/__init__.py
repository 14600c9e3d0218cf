"""Serving cost: per-layer operators of a prefill chunk or a decode step (``layers``), weights, paged KV cache,
TTFT/TPOT and throughput of many layouts (``cost``), and the float reference ``estimate_inference`` (``report``)."""
