"""Where FlexGen's ``--percent`` puts a model's weight bytes (FMInference/FlexGen@19753bc ``flexgen/flex_opt.py``).

FlexGen places whole tensors, not bytes. ``init_weight_list`` (l.92-131) walks one of its layers' tensors in order,
takes each tensor's midpoint in that layer's cumulative size as a percentage, and puts the tensor on the first tier
whose cumulative share exceeds it, the tiers in the order disk, CPU, GPU (``get_choice`` over
``[w_disk_percent, w_cpu_percent, w_gpu_percent]``, l.82-101). Its layers for OPT: the input embedding (token table
v×h, position table (s + 2)×h with s = ``max_seq_len`` 2048, ``opt_config.py`` l.21), each decoder layer's attention
(q, k, v, out h×h, each followed by its bias, then the layer norm's weight and bias) and MLP (fc1 f×h, its bias, fc2
h×f, its bias, the layer norm's two vectors) as two layers, and the output embedding (the final layer norm's two
vectors, then the token table again) (l.152-157, 216-223, 284-305, 480-493). So ``--percent 20 80`` puts on the GPU
each attention's output projection with its bias and layer norm, each MLP's fc2 bias and layer norm, and the position
table, and on the CPU q, k, v, fc1, fc2, their other biases and both token tables: 8.2% of OPT-30B's weight bytes, not
20%.
"""

from __future__ import annotations

import numpy as np

from shardplan.models.spec import ModelSpec

FLEXGEN_MAX_SEQ_LEN = 2048  # flexgen/opt_config.py OptConfig.max_seq_len, every OPT size


def _templates(model: ModelSpec) -> list[tuple[np.ndarray, float]]:
    """FlexGen's OPT layers as (tensor sizes in order, how many of that layer the model has)."""
    h, f, v = float(model.hidden_size), float(model.ffn_hidden_size), float(model.vocab_size)
    return [(np.array([v * h, (FLEXGEN_MAX_SEQ_LEN + 2) * h]), 1.0),  # input embedding
            (np.array([h * h, h] * 4 + [h, h]), float(model.num_layers)),  # attention
            (np.array([f * h, f, h * f, h, h, h]), float(model.num_layers)),  # MLP
            (np.array([h, h, v * h]), 1.0)]  # output embedding


def _placed(model: ModelSpec, gpu_pct: np.ndarray, cpu_pct: np.ndarray) -> np.ndarray:
    """Shares of the weight bytes on (GPU, CPU, disk), one row per ``--percent`` pair, under ``init_weight_list``'s
    midpoint rule: a tensor goes to disk below the disk percentage, to the CPU below disk + CPU, else to the GPU
    (``get_choice``)."""
    disk_pct = 100.0 - gpu_pct - cpu_pct
    got = np.zeros((gpu_pct.size, 3))
    for sizes, count in _templates(model):
        mid = 100.0 * (np.cumsum(sizes) - sizes / 2) / sizes.sum()
        on_disk = mid[None, :] < disk_pct[:, None]
        on_cpu = ~on_disk & (mid[None, :] < (disk_pct + cpu_pct)[:, None])
        on_gpu = ~on_disk & ~on_cpu
        got += count * np.stack([(on_gpu * sizes).sum(1), (on_cpu * sizes).sum(1), (on_disk * sizes).sum(1)], axis=1)
    return got / got.sum(axis=1, keepdims=True)


def flexgen_weight_split(model: ModelSpec, gpu_pct: float, cpu_pct: float) -> tuple[float, float, float]:
    """Shares of the weight bytes FlexGen puts on GPU, CPU and disk for ``--percent gpu_pct cpu_pct …`` (the rest of
    100 on disk), summed over every layer of an OPT-shaped ``model`` (hidden h, FFN f, vocab v)."""
    share = _placed(model, np.array([float(gpu_pct)]), np.array([float(cpu_pct)]))[0]
    return float(share[0]), float(share[1]), float(share[2])


# Two placements closer than this share of the weight bytes are one (they differ in where a few vectors or the
# position table go)
SAME_PLACEMENT = 1e-3


def flexgen_candidates(model: ModelSpec, split: tuple[float, float, float], count: int | None = 1
                       ) -> list[tuple[int, int, tuple[float, float, float]]]:
    """The integer ``--percent`` weights pairs (GPU, CPU; disk the rest) whose whole-tensor placements come nearest
    (least bytes moved between tiers) to the byte shares ``split`` = (GPU, CPU, disk): one pair per distinct placement
    (within ``SAME_PLACEMENT``), the one with the least on disk and then nearest the shares, nearest placement first,
    each with the shares it gives; ``count`` of them (None: every distinct placement)."""
    g, c = np.meshgrid(np.arange(101.0), np.arange(101.0), indexing="ij")
    ok = g + c <= 100.0
    g, c = g[ok], c[ok]
    got = _placed(model, g, c)
    want = np.asarray(split, dtype=float)
    miss = np.abs(got - want).sum(axis=1) / 2
    near = np.abs(g / 100 - want[0]) + np.abs(c / 100 - want[1])
    out: list[tuple[int, int, tuple[float, float, float]]] = []
    for i in np.lexsort((near, 100.0 - g - c, np.round(miss, 9))):
        if any(np.abs(got[i] - np.array(shares)).sum() / 2 < SAME_PLACEMENT for _, _, shares in out):
            continue
        out.append((int(g[i]), int(c[i]), (float(got[i, 0]), float(got[i, 1]), float(got[i, 2]))))
        if count is not None and len(out) == count:
            break
    return out
