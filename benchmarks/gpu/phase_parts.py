"""Forward and backward apart, and what each recompute granularity costs, for ``measure.py`` (part ``phases``).

The model of ``step_parts`` (Llama-3.1-8B's widths, 16 layers, 8,192 tokens; and one TP-8 rank of Llama-3.1-70B)
runs forward and backward with CUDA events between them, under four recompute modes switched on the same weights
and alternated repeat by repeat:

- ``none``: every block stores what its backward needs;
- ``full``: each block is a non-reentrant ``torch.utils.checkpoint`` region (its input kept, its forward rerun in
  backward) with PyTorch's default early stop; ``full_noearly`` the same without early stop
  (``set_checkpoint_early_stop(False)``); ``full_reentrant`` the reentrant variant (``use_reentrant=True``), which
  reruns the whole forward as Megatron-LM's ``CheckpointFunction`` does;
- ``mlp``: only the MLP sub-block (FC1, SwiGLU, FC2) is checkpointed, its normed input kept (Megatron-LM's
  ``--recompute-modules mlp``); ``mlp_reentrant`` the same region reentrant;
- ``norm``: only the two RMSNorms are checkpointed (Megatron-LM's ``layernorm``).

What comes back per mode: forward and backward seconds (medians), memory held after the forward, and, for ``none``,
kernel time by category of the forward alone and of the backward alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, fwd_bwd_once, left, phase_medians
from step_parts import LLAMA70B_TP8_RANK, Block, Llama, kernel_breakdown, rope
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

MODES = ("none", "full", "full_noearly", "full_reentrant", "mlp", "mlp_reentrant", "norm")


class PhaseBlock(Block):
    """``step_parts.Block`` with a recompute mode; ``none`` runs exactly ``Block.forward``."""

    mode = "none"

    def _attn(self, hn: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = hn.shape
        q, k, v = self.qkv(hn).split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q = rope(q.view(b, s, self.heads, self.hd), cos, sin).transpose(1, 2)
        k = rope(k.view(b, s, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, s, -1))

    def _mlp(self, hn: torch.Tensor) -> torch.Tensor:
        a, g = self.fc1(hn).chunk(2, dim=-1)
        return self.fc2(F.silu(a) * g)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.mode == "none":
            return super().forward(x, cos, sin)
        if self.mode == "full":
            return checkpoint(super().forward, x, cos, sin, use_reentrant=False)
        if self.mode == "full_noearly":
            with set_checkpoint_early_stop(False):
                return checkpoint(super().forward, x, cos, sin, use_reentrant=False)
        if self.mode == "full_reentrant":
            return checkpoint(super().forward, x, cos, sin, use_reentrant=True)
        norm = (lambda n, t: checkpoint(n, t, use_reentrant=False)) if self.mode == "norm" else (lambda n, t: n(t))
        x = x + self._attn(norm(self.n1, x), cos, sin)
        hn = norm(self.n2, x)
        if self.mode.startswith("mlp"):
            return x + checkpoint(self._mlp, hn, use_reentrant=self.mode == "mlp_reentrant")
        return x + self._mlp(hn)


def run_phases(layers: int, seq: int, shape: dict[str, int] | None = None, reps: int = 5,
               modes: tuple[str, ...] = MODES, compiled: bool = False) -> dict:
    torch.cuda.empty_cache()
    with torch.device(DEV):
        torch.set_default_dtype(BF16)
        try:
            model = Llama(layers, **(shape or {}))
            s = shape or {}
            model.blocks = torch.nn.ModuleList(
                PhaseBlock(s.get("h", 4096), s.get("heads", 32), s.get("kv", 8), s.get("ffn", 14336))
                for _ in range(layers))
        finally:
            torch.set_default_dtype(torch.float32)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    if compiled:  # torchtitan's compile: each block compiled, its checkpoint inside the compiled region
        for blk in model.blocks:
            blk.compile()
    vocab = model.head.out_features
    ids = torch.randint(0, vocab, (1, seq), device=DEV)
    labels = torch.randint(0, vocab, (1, seq), device=DEV)

    def set_mode(mode: str) -> None:
        for blk in model.blocks:
            blk.mode = mode

    def once() -> tuple[float, float, int]:
        return fwd_bwd_once(model, ids, labels)

    for mode in modes:  # warm-up: allocator, kernels, autotuning (and compilation)
        set_mode(mode)
        once()
        once()
    got: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
    for _ in range(reps):
        for mode in modes:
            set_mode(mode)
            got[mode].append(once())
    out: dict[str, object] = {"layers": layers, "seq": seq, "shape": shape, "compiled": compiled,
                              **phase_medians(got)}
    set_mode("none")
    held: list[torch.Tensor] = []

    def fwd() -> None:
        held.append(model(ids, labels))

    def bwd() -> None:
        held.pop().backward()

    for p in model.parameters():
        p.grad = None
    out["none_fwd_kernels"] = kernel_breakdown(fwd)[0]
    out["none_bwd_kernels"] = kernel_breakdown(bwd)[0]
    return out


def part_phases() -> list[dict]:
    rows = []
    for layers, seq, shape in ((16, 8192, None), (16, 8192, LLAMA70B_TP8_RANK), (8, 4096, None)):
        if left() < 40:
            break
        try:
            rows.append(run_phases(layers, seq, shape))
            torch.cuda.empty_cache()
        except Exception as ex:
            rows.append({"layers": layers, "seq": seq, "shape": shape, "error": repr(ex)[:600]})
            torch.cuda.empty_cache()
    return rows


def part_phases_compiled() -> list[dict]:
    """The same under ``torch.compile`` (each block, as torchtitan compiles): what a full checkpoint reruns when the
    partitioner, not the checkpoint's early stop, decides."""
    try:
        return [run_phases(16, 8192, None, modes=("none", "full", "full_noearly"), compiled=True)]
    except Exception as ex:
        return [{"layers": 16, "seq": 8192, "compiled": True, "error": repr(ex)[:600]}]

