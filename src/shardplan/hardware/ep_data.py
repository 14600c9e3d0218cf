"""Measured NVLink rates of the token dispatchers that move MoE tokens with their own kernels (DeepEP, HybridEP).

Each row is the dispatcher's benchmark on the named GPU: BF16 dispatch and combine, algorithm bandwidth as the
benchmark prints it, the bytes a rank receives (its own tokens included) over the kernel time, GB/s, by EP ranks
inside one NVLink domain; 4,096 tokens of hidden 7,168 per rank, uniform random top-8 routing.

- HybridEP (Megatron's flex dispatcher, backend ``hybridep``), kernel only, 16 SMs (Megatron-Bridge's Nemotron and
  Qwen3 recipes set 16 or 32; Megatron-LM leaves DeepEP's default): deepseek-ai/DeepEP@94a9f8f (branch hybrid-ep)
  docs/README_Hybrid-EP.md, "GB200 Platform" table (8-36 ranks of one NVL72) and "B200 Platform" (8 ranks, one node),
  8 local experts per rank. Its test (tests/test_hybrid_ep.py ``_report_bw``) divides
  ``dispatched_hidden.numel() * 2`` by the time.
- DeepEP intranode kernels on 8 H200 at 24 SMs (Megatron-LM's DeepEP default is 20), top-8 of 256 experts: 305.72 GB/s
  dispatch, 319.88 combine of received bytes (aws-samples/awsome-distributed-training@fd3d76d micro-benchmarks/
  expert-parallelism/deepep-benchmark/README.md "P5en results", DeepEP e02e4d2 tests/test_intranode.py l.167): the
  Hopper row, timed through DeepEP's Python API on its cached path (``dispatch(handle=...)``, tests/test_intranode.py
  l.188: the layout and notify kernels are skipped) at more SMs than Megatron's default gives it, so if anything fast
  for Megatron. HybridEP publishes no in-node Hopper table; DeepEP's prices both there. H20 and H800 (other NVLink
  rates) keep the link's rate.

A rank's received bytes include the 1/n of its tokens that stay home, so the rate of what crosses NVLink, the bytes
``costmodel.core.comm.ep_kernel_rate`` prices, is (n − 1)/n of it.
"""

from __future__ import annotations

# GPU preset name -> the GPU whose dispatcher benchmark prices it (same NVLink generation and domain kind)
EP_KERNEL_REFERENCE: dict[str, str] = {
    "h100-sxm": "h200-sxm", "h200-sxm": "h200-sxm",
    "b200": "b200", "b300": "b200",
    "gb200": "gb200", "gb300": "gb200",
}

# reference GPU -> (EP ranks, BF16 dispatch GB/s, combine GB/s), received bytes per kernel second
EP_KERNEL_GBPS: dict[str, tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]] = {
    "gb200": ((8, 16, 24, 32, 36), (750.15, 661.93, 637.80, 629.79, 612.85), (684.27, 600.75, 565.53, 547.25, 543.27)),
    "b200": ((8,), (734.95,), (673.84,)),
    "h200-sxm": ((8,), (305.72,), (319.88,)),
}
