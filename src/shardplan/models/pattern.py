"""Layer patterns: which token mixer and which feed-forward each layer has.

``ModelSpec.layer_pattern`` is a short list of run-length codes, repeated over the layers:
``"S*5", "F"`` is Gemma 3 (five sliding-window layers, then one global), ``"L*3", "F"`` Qwen3-Next.
A code is a mixer letter (``Mixer``: F S C L M N), optionally an MLP letter (``MlpSlot``: d e n;
absent: dense or MoE by ``MoESpec.first_dense_layers``/``layer_freq``), optionally ``*n`` repeats.
Everything here is O(pattern length · MoE period), never O(num_layers).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from shardplan.models.kinds import Mixer, MlpSlot

LayerKind = tuple[Mixer, MlpSlot]
_CODE = re.compile(r"^([FSCLMN])([den]?)(?:\*([1-9][0-9]*))?$")


def parse_code(code: str) -> tuple[Mixer, MlpSlot | None, int]:
    """``"Mn*3"`` → (MAMBA, NONE, 3); raises ValueError naming the allowed form."""
    match = _CODE.match(code.strip())
    if match is None:
        raise ValueError(f"layer code '{code}' must be a mixer letter (F S C L M N), an optional MLP letter "
                         "(d dense, e MoE, n none) and an optional *count, e.g. 'S*5' or 'Mn'")
    mixer, mlp, count = match.groups()
    return Mixer(mixer), MlpSlot(mlp) if mlp else None, int(count or 1)


def period(pattern: Sequence[str]) -> list[tuple[Mixer, MlpSlot | None]]:
    """One period of the pattern, expanded (its length is the sum of the run counts)."""
    out: list[tuple[Mixer, MlpSlot | None]] = []
    for code in pattern:
        mixer, mlp, n = parse_code(code)
        out.extend([(mixer, mlp)] * n)
    return out


def compress(kinds: Sequence[str]) -> tuple[str, ...]:
    """Run-length codes for a per-layer list of codes, folded to its shortest repeating period."""
    n = len(kinds)
    p = next(p for p in range(1, n + 1) if n % p == 0 and list(kinds) == list(kinds[:p]) * (n // p))
    runs: list[list[object]] = []
    for k in kinds[:p]:
        if runs and runs[-1][0] == k:
            runs[-1][1] = int(str(runs[-1][1])) + 1
        else:
            runs.append([k, 1])
    return tuple(f"{k}*{c}" if c != 1 else str(k) for k, c in runs)


def moe_at(i: int, first_dense: int, freq: int) -> bool:
    """The MoE layout rule: layer i is MoE iff i ≥ first_dense and (i − first_dense) % freq == 0."""
    return i >= first_dense and (i - first_dense) % freq == 0


def kind_counts(pattern: Sequence[str] | None, num_layers: int, default: Mixer, *, has_moe: bool,
                first_dense: int = 0, freq: int = 1) -> Counter[LayerKind]:
    """How many layers of each (mixer, MLP) kind the model has.

    Layers before ``first_dense`` are counted one by one; the rest repeat with period lcm(pattern, freq).
    """
    per = period(pattern) if pattern else [(default, None)]
    P = len(per)

    def kind(i: int) -> LayerKind:
        mixer, mlp = per[i % P]
        if mlp is None:
            mlp = MlpSlot.MOE if has_moe and moe_at(i, first_dense, freq) else MlpSlot.DENSE
        return mixer, mlp

    head = min(num_layers, first_dense)
    counts: Counter[LayerKind] = Counter(kind(i) for i in range(head))
    rest = num_layers - head
    if rest <= 0:
        return counts
    cycle = math.lcm(P, freq if has_moe else 1)
    full, rem = divmod(rest, cycle)
    if full:
        one = Counter(kind(head + j) for j in range(cycle))
        for k, v in one.items():
            counts[k] += v * full
    counts.update(kind(head + full * cycle + j) for j in range(rem))
    return counts


def kind_at(pattern: Sequence[str] | None, i: int, default: Mixer) -> tuple[Mixer, MlpSlot | None]:
    """Mixer (and explicit MLP slot, if any) of layer ``i``."""
    per = period(pattern) if pattern else [(default, None)]
    return per[i % len(per)]
