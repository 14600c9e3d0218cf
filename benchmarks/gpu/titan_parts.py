"""torchtitan's Llama block and its activation checkpointing, for ``measure.py`` (part ``titan``).

The block follows torchtitan's Llama 3 model (torchtitan@9dec370 torchtitan/models/llama/model.py, the commit of
its published H100 report): separate wq, wk, wv, wo, w1, w3, w2 projections, the composite RMSNorm in fp32
(models/norms.py ``RMSNorm``), the rotary as a complex product in fp32 (``apply_rotary_emb``), ``repeat_kv``, SDPA
(flash), ``w2(silu(w1(x)) * w3(x))``, and the fp32 cross entropy of train.py. Three modes on the same weights,
alternated repeat by repeat:

- ``none``;
- ``full``: each block a non-reentrant ``torch.utils.checkpoint`` region (torchtitan's full AC at that commit:
  ``ptd_checkpoint_wrapper(module, preserve_rng_state=False)``, early stop on);
- ``op``: torchtitan's per-op selective AC (parallelisms/parallelize_llama.py ``_save_list`` and
  ``_custom_policy``): the outputs of every odd ``aten.mm`` and of SDPA are saved, everything else is rerun.

What comes back per mode: forward and backward seconds (medians) and the memory held after the forward; for ``none``,
kernel time by category, the longest kernels and launches per category of the forward and of the backward.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, fwd_bwd_once, left, phase_medians
from step_parts import kernel_breakdown
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

MODES = ("none", "full", "op")
_SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default}


def _op_sac_context():  # type: ignore[no-untyped-def]
    """torchtitan's ``_custom_policy``: save the outputs of the ops in the save list, except every second mm."""
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class RMSNorm(nn.Module):
    def __init__(self, h: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(3).type_as(x)


class TitanBlock(nn.Module):
    mode = "none"

    def __init__(self, h: int, heads: int, kv: int, ffn: int, hd: int = 128) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, hd
        self.attention_norm, self.ffn_norm = RMSNorm(h), RMSNorm(h)
        self.wq, self.wk = nn.Linear(h, heads * hd, bias=False), nn.Linear(h, kv * hd, bias=False)
        self.wv, self.wo = nn.Linear(h, kv * hd, bias=False), nn.Linear(heads * hd, h, bias=False)
        self.w1, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def _block(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        xn = self.attention_norm(x)
        q = rotary(self.wq(xn).view(b, s, self.heads, self.hd), freqs)
        k = rotary(self.wk(xn).view(b, s, self.kv, self.hd), freqs)
        v = self.wv(xn).view(b, s, self.kv, self.hd)
        rep = self.heads // self.kv  # repeat_kv: expand and reshape
        k = k[:, :, :, None, :].expand(b, s, self.kv, rep, self.hd).reshape(b, s, self.heads, self.hd)
        v = v[:, :, :, None, :].expand(b, s, self.kv, rep, self.hd).reshape(b, s, self.heads, self.hd)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        hn = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        if self.mode == "full":
            return checkpoint(self._block, x, freqs, use_reentrant=False, preserve_rng_state=False)
        if self.mode == "op":
            return checkpoint(self._block, x, freqs, use_reentrant=False, preserve_rng_state=False,
                              context_fn=_op_sac_context)
        return self._block(x, freqs)


class Titan(nn.Module):
    def __init__(self, layers: int, h: int = 4096, heads: int = 32, kv: int = 8, ffn: int = 14336,
                 vocab: int = 128256, hd: int = 128) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(TitanBlock(h, heads, kv, ffn, hd) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.output = nn.Linear(h, vocab, bias=False)
        self.hd = hd

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.hd, 2, device=ids.device, dtype=torch.float32) / self.hd))
        freqs = torch.polar(torch.ones(s, self.hd // 2, device=ids.device),
                            torch.outer(torch.arange(s, device=ids.device, dtype=torch.float32), inv))
        freqs = freqs[None, :, None, :]
        x = self.tok_embeddings(ids)
        for blk in self.layers:
            x = blk(x, freqs)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))


def run_titan(layers: int, seq: int, reps: int = 5) -> dict:
    torch.cuda.empty_cache()
    with torch.device(DEV):
        torch.set_default_dtype(BF16)
        try:
            model = Titan(layers)
        finally:
            torch.set_default_dtype(torch.float32)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    vocab = model.output.out_features
    ids = torch.randint(0, vocab, (1, seq), device=DEV)
    labels = torch.randint(0, vocab, (1, seq), device=DEV)

    def once(mode: str) -> tuple[float, float, int]:
        for blk in model.layers:
            blk.mode = mode
        return fwd_bwd_once(model, ids, labels)

    for mode in MODES:
        once(mode)
        once(mode)
    got: dict[str, list[tuple[float, float, int]]] = {m: [] for m in MODES}
    for _ in range(reps):
        for mode in MODES:
            got[mode].append(once(mode))
    out: dict[str, object] = {"layers": layers, "seq": seq, **phase_medians(got)}
    # kernel time by category and the longest kernels of the plain forward and backward
    for blk in model.layers:
        blk.mode = "none"
    held: list[torch.Tensor] = []
    out["none_fwd_kernels"] = kernel_breakdown(lambda: held.append(model(ids, labels)))
    out["none_bwd_kernels"] = kernel_breakdown(lambda: held.pop().backward())
    return out


def part_titan() -> list[dict]:
    rows = []
    for layers, seq in ((16, 8192), (8, 4096)):
        if left() < 40:
            break
        try:
            rows.append(run_titan(layers, seq))
            torch.cuda.empty_cache()
        except Exception as ex:
            rows.append({"layers": layers, "seq": seq, "error": repr(ex)[:600]})
            torch.cuda.empty_cache()
    return rows
