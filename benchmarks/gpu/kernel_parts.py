"""Kernel parts of ``measure.py``: dense GEMMs, grouped expert GEMMs (one kernel, a per-expert loop, a 4-stream
pool), SDPA attention, the optimizer step's multi-tensor kernels and elementwise bandwidth."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, bench, left, rnd
from torch.nn.attention import SDPBackend, sdpa_kernel


# ---------------------------------------------------------------------------------------------------------- gemm
def linear_shapes() -> list[tuple[str, int, int]]:
    """(name, in_features K, out_features N) per TP degree for Llama-3.1-8B and -70B (fused QKV and gate/up)."""
    out = []
    for model, h, ffn, q, kv in (("llama8b", 4096, 14336, 4096, 1024), ("llama70b", 8192, 28672, 8192, 1024)):
        for tp in (1, 2, 4, 8):
            out += [(f"{model}.tp{tp}.qkv", h, (q + 2 * kv) // tp), (f"{model}.tp{tp}.proj", q // tp, h),
                    (f"{model}.tp{tp}.fc1", h, 2 * ffn // tp), (f"{model}.tp{tp}.fc2", ffn // tp, h)]
        out.append((f"{model}.tp8.head", h, 128256 // 8))
        out.append((f"{model}.tp1.head", h, 128256))
    return out


def mm_time(a: torch.Tensor, b: torch.Tensor) -> float:
    return bench(lambda: a @ b)


def part_gemm() -> list[dict]:
    rows = []
    for name, k, n in linear_shapes():
        w = rnd(n, k)
        for m in (4096, 8192):
            if left() < 60:
                return rows
            x, dy = rnd(m, k), rnd(m, n)
            rows.append({"name": name, "pass": "fwd", "m": m, "n": n, "k": k, "s": mm_time(x, w.t())})
            rows.append({"name": name, "pass": "dgrad", "m": m, "n": k, "k": n, "s": mm_time(dy, w)})
            rows.append({"name": name, "pass": "wgrad", "m": n, "n": k, "k": m, "s": mm_time(dy.t(), x)})
    for name, k, n in (("llama8b.tp1.fc1", 4096, 28672), ("llama70b.tp8.fc1", 8192, 7168),
                       ("llama70b.tp8.qkv", 8192, 1280)):
        w = rnd(n, k)
        for m in (1, 8, 32, 128, 512):
            rows.append({"name": name, "pass": "decode", "m": m, "n": n, "k": k, "s": mm_time(rnd(m, k), w.t())})
    return rows


def fwd_bwd_times(fwd, inputs: tuple[torch.Tensor, ...]) -> tuple[float, float]:
    """Median forward time and forward+backward time of ``fwd()`` (gradients w.r.t. ``inputs``)."""
    go = torch.randn_like(fwd())
    return bench(fwd), bench(lambda: torch.autograd.grad(fwd(), inputs, go))


# ---------------------------------------------------------------------------------------------------------- grouped
MOE = {  # hidden, expert FFN, experts, experts per token (the models' config.json)
    "qwen3-30b-a3b": (2048, 768, 128, 8), "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "deepseek-v3": (7168, 2048, 256, 8), "gpt-oss-120b": (2880, 2880, 128, 4), "mixtral-8x7b": (4096, 14336, 8, 2),
}


def grouped_row(model: str, ep: int, el: int, per: int, fc: str, n: int, k: int) -> dict:
    routed = el * per
    x = rnd(routed, k, grad=True)
    w = torch.randn(el, n, k, device=DEV, dtype=BF16).mul_(0.02).requires_grad_(True)
    offs = torch.arange(per, routed + 1, per, device=DEV, dtype=torch.int32)
    row: dict[str, object] = {"model": model, "ep": ep, "local_experts": el, "rows_per_expert": per, "gemm": fc,
                              "n": n, "k": k}
    try:
        row["grouped_fwd_s"], row["grouped_fwdbwd_s"] = fwd_bwd_times(
            lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), (x, w))
    except Exception as ex:
        row["grouped_error"] = repr(ex)[:300]
    if el <= 32:
        xs = x.detach().split(per)
        wd = w.detach()
        row["loop_fwd_s"] = bench(lambda: [xi @ wd[i].t() for i, xi in enumerate(xs)])
    return row


def stream_loop(xs: list[torch.Tensor], w: torch.Tensor, streams: list[torch.cuda.Stream]) -> None:
    """Per-expert GEMMs round-robin over a pool of streams (Transformer Engine's default grouped GEMM on Hopper,
    multi_stream_cublas_gemm; grouped_gemm's cuBLAS path), joined back to the current stream."""
    cur = torch.cuda.current_stream()
    for st in streams:
        st.wait_stream(cur)
    for i, xi in enumerate(xs):
        with torch.cuda.stream(streams[i % len(streams)]):
            xi @ w[i].t()
    for st in streams:
        cur.wait_stream(st)


def streams_row(model: str, ep: int, el: int, per: int, fc: str, n: int, k: int,
                streams: list[torch.cuda.Stream]) -> dict:
    x = rnd(el * per, k)
    w = rnd(el, n, k)
    xs = list(x.split(per))
    return {"model": model, "ep": ep, "local_experts": el, "rows_per_expert": per, "gemm": fc, "n": n, "k": k,
            "streams4_fwd_s": bench(lambda: stream_loop(xs, w, streams)),
            "loop_fwd_s": bench(lambda: [xi @ w[i].t() for i, xi in enumerate(xs)]),
            "one_gemm_fwd_s": bench(lambda: x @ w[0].t())}


def part_streams() -> list[dict]:
    rows = []
    streams = [torch.cuda.Stream() for _ in range(4)]
    tokens = 8192
    for model, (h, f, e, topk) in MOE.items():
        for ep in (1, 8, 32):
            if e % ep or left() < 45:
                continue
            el = e // ep
            per = tokens * topk // el
            for fc, (k, n) in (("fc1", (h, 2 * f)), ("fc2", (f, h))):
                rows.append(streams_row(model, ep, el, per, fc, n, k, streams))
    return rows


def part_grouped() -> list[dict]:
    rows = []
    tokens = 8192
    for model, (h, f, e, topk) in MOE.items():
        for ep in (1, 8, 32, 64):
            if e % ep or left() < 45:
                continue
            el = e // ep
            routed = tokens * topk  # balanced: each rank receives as many routed rows as it sends
            for fc, (k, n) in (("fc1", (h, 2 * f)), ("fc2", (f, h))):
                if el * n * k * 2 > 40e9:
                    continue
                rows.append(grouped_row(model, ep, el, routed // el, fc, n, k))
    return rows


# ---------------------------------------------------------------------------------------------------------- attn
def attn_row(row: dict, backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict:
    try:
        with sdpa_kernel([backend]):
            row["fwd_s"], row["fwdbwd_s"] = fwd_bwd_times(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v))
    except Exception as ex:
        row["error"] = repr(ex)[:300]
    return row


def part_attn() -> list[dict]:
    rows = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for d, heads in ((128, 32), (128, 8), (64, 16)):
            for s in (1024, 2048, 4096, 8192, 16384, 32768):
                if left() < 40:
                    return rows
                b = max(1, 16384 // s)
                q, k, v = (rnd(b, heads, s, d, grad=True) for _ in range(3))
                row = {"backend": backend.name, "head_dim": d, "heads": heads, "seq": s, "batch": b, "causal": True}
                rows.append(attn_row(row, backend, q, k, v))
    # MLA shape (DeepSeek-V3: q/k head dim 192, v 128) on cuDNN
    for s in (4096,):
        q, k = rnd(4, 16, s, 192, grad=True), rnd(4, 16, s, 192, grad=True)
        v = rnd(4, 16, s, 128, grad=True)
        row = {"backend": "CUDNN_ATTENTION", "head_dim": 192, "v_head_dim": 128, "heads": 16, "seq": s, "batch": 4,
               "causal": True}
        rows.append(attn_row(row, SDPBackend.CUDNN_ATTENTION, q, k, v))
    return rows


# ---------------------------------------------------------------------------------------------------------- optim
def part_optim() -> list[dict]:
    """A Megatron-style mixed-precision Adam step over 2e9 parameters in 64 tensors: gradient norm over fp32
    gradients, fused AdamW on fp32 master weights and moments, copy of the master into the bf16 model weights,
    zeroing the fp32 gradient buffer."""
    rows = []
    n, parts = 2_000_000_000, 64
    size = n // parts
    master = [torch.randn(size, device=DEV) * 0.02 for _ in range(parts)]
    for p in master:
        p.requires_grad_(True)
        p.grad = torch.randn_like(p) * 1e-3
    model16 = [p.detach().to(BF16) for p in master]
    opt = torch.optim.AdamW(master, lr=1e-5, fused=True)
    opt.step()  # creates the moments
    grads = [p.grad for p in master]
    stages = {
        "grad_norm": lambda: torch._foreach_norm(grads),
        "adamw_fused": opt.step,
        "copy_to_bf16": lambda: torch._foreach_copy_(model16, master),
        "zero_grad_buffer": lambda: torch._foreach_zero_(grads),
    }
    total = 0.0
    for name, fn in stages.items():
        t = bench(fn, warm_ms=20, rep_ms=200)
        total += t
        rows.append({"stage": name, "params": n, "s": t})
    rows.append({"stage": "total", "params": n, "s": total})
    return rows


def part_membw() -> list[dict]:
    """Achieved HBM bandwidth of one eager elementwise kernel (bf16 add, 2 reads + 1 write) and of a copy, by bytes
    moved."""
    rows = []
    for numel in (2**14, 2**16, 2**18, 2**20, 2**22, 2**24, 2**26, 2**28):
        a, b = rnd(numel), rnd(numel)
        rows.append({"numel": numel, "add_bytes": 6 * numel, "add_s": bench(torch.add, a, b),
                     "copy_bytes": 4 * numel, "copy_s": bench(torch.clone, a)})
    return rows




def unpermute_sum(o: torch.Tensor, inv: torch.Tensor, tokens: int) -> torch.Tensor:
    """Each token's k expert outputs gathered back to token order and summed."""
    return o.index_select(0, inv).view(tokens, -1, o.shape[-1]).sum(1)


def part_gather() -> list[dict]:
    """Row gathers and scatters of MoE token permutation: ``tokens`` rows of width ``h`` routed to top-``k`` random
    experts, rows sorted by expert. Permute = index_select of the token rows in expert order; unpermute = the inverse
    gather, then the k copies of each token summed (no atomics); and index_add_ (scatter with atomics) for
    comparison. Bytes = rows read + rows written (+ the k-way sum's read)."""
    rows = []
    for tokens, h, k in ((4096, 2048, 8), (16384, 2048, 8), (4096, 4096, 8), (4096, 7168, 8), (16384, 7168, 8)):
        if left() < 30:
            break
        y = rnd(tokens, h)
        experts = torch.randint(0, 128, (tokens * k,), device=DEV)
        order = experts.argsort(stable=True)
        src = order // k
        inv = order.argsort()
        o = rnd(tokens * k, h)
        out = torch.zeros_like(y)
        routed_bytes = 2.0 * tokens * k * h
        rows.append({
            "tokens": tokens, "h": h, "k": k,
            "permute_s": bench(torch.index_select, y, 0, src), "permute_bytes": 2 * routed_bytes,
            "unpermute_gather_sum_s": bench(unpermute_sum, o, inv, tokens),
            "unpermute_bytes": 3 * routed_bytes + 2.0 * tokens * h,
            "index_add_bf16_s": bench(torch.Tensor.index_add_, out, 0, src, o), "index_add_bytes": routed_bytes,
            "copy_s": bench(torch.clone, o), "copy_bytes": 2 * routed_bytes,
        })
    return rows
