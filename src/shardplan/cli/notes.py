"""Notes for stderr (``shardplan: note: …``) gathered while a command runs and printed only when it succeeds, so
that a failing command still prints exactly one error line."""

from __future__ import annotations

import sys

_PENDING: list[str] = []


def note(text: str) -> None:
    """Queue one note (one line) for stderr."""
    if text not in _PENDING:
        _PENDING.append(" ".join(text.split()))


def flush(*, ok: bool) -> None:
    """Print the queued notes (when the command succeeded) and forget them."""
    lines = list(_PENDING)
    _PENDING.clear()
    if ok:
        for line in lines:
            print(f"shardplan: note: {line}", file=sys.stderr)


def hardware_note(name: str) -> None:
    """A bare GPU name builds a generic PCIe node: say so, and name the system presets with that GPU."""
    from shardplan.hardware import GPUS, SYSTEMS

    key = name.strip().lower()
    if key in SYSTEMS or key not in GPUS:
        return
    presets = [s.name for s in SYSTEMS.values() if s.gpu.name == GPUS[key].name]
    hint = f"; for a real machine use a system preset: {', '.join(presets[:3])}" if presets else \
        " (no system preset has this GPU; describe the machine in a YAML file)"
    note(f"'{name}' is a GPU, not a system: planning on a generic node of 8 on PCIe Gen4 with typical, unmeasured "
         f"links{hint}")


def context_note(spec: object, tokens: int) -> None:
    """Sequences longer than the model's trained context are planned as asked, with a note."""
    limit = getattr(spec, "max_position_embeddings", None)
    if limit is not None and tokens > limit:
        note(f"{tokens:,} tokens per sequence exceed {getattr(spec, 'name', 'the model')}'s max_position_embeddings "
             f"({limit:,}); the cost model assumes the model runs them (e.g. with RoPE scaling)")
