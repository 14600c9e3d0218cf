"""Training-step parts of ``measure.py``: a Llama-shaped model in plain PyTorch (eager or compiled blocks, recompute
none or full, gradient accumulation), and dropless MoE blocks with and without the host copy of their token counts."""

from __future__ import annotations

import subprocess
import time

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, left, rnd
from kernel_parts import MOE
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


# ---------------------------------------------------------------------------------------------------------- step
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, ffn: int, hd: int = 128) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, hd
        self.n1, self.n2 = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, (heads + 2 * kv) * self.hd, bias=False)
        self.proj = nn.Linear(heads * self.hd, h, bias=False)
        self.fc1 = nn.Linear(h, 2 * ffn, bias=False)
        self.fc2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q = rope(q.view(b, s, self.heads, self.hd), cos, sin).transpose(1, 2)
        k = rope(k.view(b, s, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        rep = self.heads // self.kv  # torchtitan repeat_kv: K and V expanded to the query heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, -1))
        a, g = self.fc1(self.n2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(a) * g)


class Llama(nn.Module):
    def __init__(self, layers: int, h: int = 4096, heads: int = 32, kv: int = 8, ffn: int = 14336,
                 vocab: int = 128256, full_recompute: bool = False, hd: int = 128) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, heads, kv, ffn, hd) for _ in range(layers))
        self.norm = nn.RMSNorm(h, eps=1e-5)
        self.head = nn.Linear(h, vocab, bias=False)
        self.full = full_recompute
        self.hd = hd

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        t = torch.arange(s, device=ids.device, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.hd, 2, device=ids.device, dtype=torch.float32) / self.hd))
        ang = torch.outer(t, inv)
        cos = torch.cat((ang, ang), -1).cos().to(BF16)[None, :, None, :]
        sin = torch.cat((ang, ang), -1).sin().to(BF16)[None, :, None, :]
        x = self.emb(ids)
        for blk in self.blocks:
            if self.full:
                x = torch.utils.checkpoint.checkpoint(blk, x, cos, sin, use_reentrant=False)
            else:
                x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def categorise(name: str) -> str:
    n = name.lower()
    if any(t in n for t in ("flash", "fmha", "cudnn", "attention", "sdpa")):
        return "attention"
    if any(t in n for t in ("gemm", "sm90_xmma", "cutlass", "nvjet", "ampere_bf16", "sm80_xmma", "cublas")):
        return "gemm"
    if "adam" in n or "multi_tensor" in n or "foreach" in n:
        return "optimizer"
    if "memcpy" in n or "memset" in n:
        return "memcpy"
    return "elementwise"


def kernel_breakdown(fn) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """GPU time per kernel category, the 25 longest kernels, and launches per category, over one call of ``fn``."""
    cats: dict[str, float] = {}
    top: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            dt = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
            if dt <= 0 or ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            c = categorise(ev.key)
            cats[c] = cats.get(c, 0.0) + dt * 1e-6
            counts[c] = counts.get(c, 0) + ev.count
            top[ev.key[:120]] = dt * 1e-6
    except Exception as ex:
        cats["error"] = repr(ex)[:300]
    return cats, dict(sorted(top.items(), key=lambda kv: -kv[1])[:25]), counts


def run_steps(layers: int, seq: int, mb: int, full: bool, compiled: bool = False, accum: int = 1,
              shape: dict[str, int] | None = None) -> dict:
    """Steps of ``Llama(layers, **shape)`` (default: Llama-3.1-8B's widths): timings, kernel time by category,
    memory, clocks."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.device(DEV):
        torch.set_default_dtype(BF16)
        try:
            model = Llama(layers, full_recompute=full, **(shape or {}))
        finally:
            torch.set_default_dtype(torch.float32)
    if compiled:  # torchtitan's compile: each block compiled (one graph shared by identical blocks)
        for blk in model.blocks:
            blk.compile()
    for p in model.parameters():
        if p.dim() > 1:  # norm weights stay 1
            nn.init.normal_(p, std=0.02)
    params = sum(p.numel() for p in model.parameters())
    after_params = torch.cuda.memory_allocated()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    vocab = model.head.out_features
    ids = torch.randint(0, vocab, (mb, seq), device=DEV)
    labels = torch.randint(0, vocab, (mb, seq), device=DEV)

    def step() -> None:
        for _ in range(accum):  # gradient accumulation over ``accum`` microbatches
            model(ids, labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # creates optimizer state
    torch.cuda.synchronize()
    static = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3)
    # memory held after the forward (stored activations, logits, loss), before the backward
    torch.cuda.synchronize()
    before_fwd = torch.cuda.memory_allocated()
    loss = model(ids, labels)
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated()
    loss.backward()
    opt.zero_grad(set_to_none=True)
    # clocks and power sampled while steps run back to back for ~3 s
    smi_proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                 "-lms", "100"], stdout=subprocess.PIPE, text=True)
    t_end = time.time() + 3.0
    while time.time() < t_end:
        step()
        torch.cuda.synchronize()
    smi_proc.terminate()
    smi_out, _ = smi_proc.communicate(timeout=10)
    samples = [r.split(", ") for r in smi_out.strip().splitlines() if r.count(",") == 1]
    # forward+backward alone (no optimizer), to split the optimizer off
    fb = []
    for _ in range(3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        model(ids, labels).backward()
        e1.record()
        torch.cuda.synchronize()
        fb.append(e0.elapsed_time(e1) * 1e-3)
        opt.zero_grad(set_to_none=True)
    cats, top, counts = kernel_breakdown(step)
    out = {"layers": layers, "seq": seq, "microbatch": mb, "recompute": "full" if full else "none", "shape": shape,
           "compiled": compiled, "accum": accum,
           "params": params, "param_bytes": after_params - base, "static_bytes": static - base,
           "peak_bytes": peak - base, "activation_peak_bytes": peak - static, "reserved_peak_bytes": reserved,
           "step_s": sorted(times)[len(times) // 2], "step_all_s": times, "fwdbwd_s": sorted(fb)[1],
           "kernel_s_by_category": cats, "kernel_count_by_category": counts, "top_kernels_s": top,
           "after_forward_bytes": after_fwd - before_fwd, "clock_power_samples": samples}
    return out


def part_step() -> list[dict]:
    rows = []
    for layers, seq, mb, full in ((16, 8192, 1, False), (16, 8192, 1, True), (8, 4096, 2, False)):
        if left() < 50:
            break
        try:
            rows.append(run_steps(layers, seq, mb, full))
        except Exception as ex:
            rows.append({"layers": layers, "seq": seq, "full": full, "error": repr(ex)[:400]})
            torch.cuda.empty_cache()
    return rows


def part_mbsweep() -> list[dict]:
    """One step of 8 sequences of 4,096 tokens (4 layers) at microbatch 1, 2, 4 with gradient accumulation: what a
    larger microbatch buys on one GPU."""
    rows = []
    for mb in (1, 2, 4):
        if left() < 40:
            break
        try:
            rows.append(run_steps(4, 4096, mb, False, accum=8 // mb))
        except Exception as ex:
            rows.append({"microbatch": mb, "error": repr(ex)[:400]})
            torch.cuda.empty_cache()
    return rows


# One tensor-parallel rank of Llama-3.1-70B at TP 8 (its per-GPU widths: 8 query heads, 1 KV head, FFN 3584, a
# vocabulary shard of 16,032), without the TP collectives: a GEMM-heavier step on narrow shapes.
LLAMA70B_TP8_RANK = {"h": 8192, "heads": 8, "kv": 1, "ffn": 3584, "vocab": 16032}


def part_tp8rank() -> list[dict]:
    try:
        return [run_steps(16, 8192, 1, False, shape=LLAMA70B_TP8_RANK)]
    except Exception as ex:
        return [{"error": repr(ex)[:600]}]


def part_compiled() -> list[dict]:
    try:
        return [run_steps(16, 8192, 1, False, compiled=True)]
    except Exception as ex:
        return [{"error": repr(ex)[:600]}]


# ---------------------------------------------------------------------------------------------------------- moe
class MoE(nn.Module):
    """Dropless top-k MoE block (router, top-k, sort tokens by expert, grouped GEMMs, SwiGLU, weighted un-permute)."""

    def __init__(self, h: int, f: int, e: int, topk: int, sync: bool) -> None:
        super().__init__()
        self.e, self.topk, self.sync = e, topk, sync
        self.norm = nn.RMSNorm(h, eps=1e-6)
        self.router = nn.Linear(h, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, 2 * f, h) * 0.02)
        self.w2 = nn.Parameter(torch.randn(e, h, f) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        probs = self.router(y).float().softmax(-1)
        w, idx = probs.topk(self.topk, dim=-1)
        flat = idx.view(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.e)
        if self.sync:  # the host learns each expert's rows (Megatron's alltoall dispatcher; HF's per-expert loop)
            counts = torch.tensor(counts.tolist(), device=x.device)
        offs = counts.cumsum(0).to(torch.int32)
        xs = y.index_select(0, order // self.topk)
        a, g = torch._grouped_mm(xs, self.w1.transpose(-2, -1), offs=offs).chunk(2, dim=-1)
        o = torch._grouped_mm(F.silu(a) * g, self.w2.transpose(-2, -1), offs=offs)
        o = o * w.view(-1)[order, None].to(o.dtype)
        out = torch.zeros_like(y).index_add_(0, order // self.topk, o)
        return x + out


def moe_blocks(tokens: int, sync: bool) -> dict:
    h, f, e, topk = MOE["qwen3-30b-a3b"]
    with torch.device(DEV):
        torch.set_default_dtype(BF16)
        try:
            layers = nn.ModuleList(MoE(h, f, e, topk, sync) for _ in range(4))
        finally:
            torch.set_default_dtype(torch.float32)
    x0 = rnd(tokens, h, grad=True)

    def fb() -> None:
        for p in layers.parameters():  # no accumulation into the expert weights' gradients across repeats
            p.grad = None
        x = x0
        for m in layers:
            x = m(x)
        x.float().square().mean().backward()

    for _ in range(3):
        fb()
    torch.cuda.synchronize()
    walls = []
    for _ in range(7):
        t = time.perf_counter()
        fb()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t)
    cats, top, counts = kernel_breakdown(fb)
    return {"wall_s": sorted(walls)[3], "gpu_busy_s": sum(v for v in cats.values() if isinstance(v, float)),
            "kernel_s_by_category": cats, "kernels": sum(counts.values()), "layers": 4, "top": top}


def part_moe() -> dict:
    res: dict[str, object] = {}
    # host time of one eager op: many tiny launches, CPU-bound
    z = torch.randn(16, device=DEV)
    torch.cuda.synchronize()
    for n in (2000,):
        t = time.perf_counter()
        for _ in range(n):
            z.add_(1.0)
        host = (time.perf_counter() - t) / n
        torch.cuda.synchronize()
        res["host_s_per_add"] = host
    t = time.perf_counter()
    for _ in range(200):
        z.sum().item()
    res["host_roundtrip_item_s"] = (time.perf_counter() - t) / 200
    for tokens in (4096, 16384):
        for sync in (False, True):
            try:
                res[f"t{tokens}_{'sync' if sync else 'nosync'}"] = moe_blocks(tokens, sync)
            except Exception as ex:
                res[f"t{tokens}_{'sync' if sync else 'nosync'}"] = {"error": repr(ex)[:400]}
    return res


