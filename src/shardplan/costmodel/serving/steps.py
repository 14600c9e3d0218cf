"""Pipeline stages of a serving replica and the time of one step through them (many layouts at once)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.layouts import StageShape, layer_kind_names, model_kind_counts, representative_stages
from shardplan.costmodel.core.ops import Op, PhaseCost
from shardplan.costmodel.serving import layers as O
from shardplan.models.spec import ModelSpec


def serving_kinds(model: ModelSpec) -> list[str]:
    """The embedding, each layer kind the model has (``core.layouts``), the head."""
    return ["embedding", *layer_kind_names(model), "head"]


# --- pipeline stages -----------------------------------------------------------------------------------
def stage_shapes(model: ModelSpec, pp: np.ndarray) -> list[StageShape]:
    """vLLM's split (``get_pp_indices``): ⌊L/pp⌋ layers each, the remainder added to stages pp−2, pp−3, …"""
    L, p = model.num_layers, pp.astype(float)
    base, extra = np.floor(L / p), np.mod(L, p)
    n_first = np.where(p == 1, L, base + (extra >= p - 1))
    n_mid = base + (extra >= 1)
    n_last = base
    return representative_stages(model, p, n_first, n_mid, n_last)


# --- time ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PhaseTimes:
    """Per-kind ops and sums of one step, plus stage and whole-pass times."""

    step: O.Step
    ops: dict[str, list]
    sums: dict[str, PhaseCost]
    stage_s: list[np.ndarray]  # per representative stage, compute + collectives of one step
    total_s: np.ndarray  # Σ over all stages
    p2p_s: np.ndarray  # one stage-to-stage send of the step's activations


def phase_times(ctx: O.InferCtx, step: O.Step, shapes: list[StageShape], tp: np.ndarray, pp: np.ndarray
                ) -> PhaseTimes:
    """Ops of one step per layer kind, each representative stage's time, the whole pass and one p2p hop."""
    m = ctx.model
    kinds = serving_kinds(m)
    ops = {k: O.BUILDERS[k](ctx, step) for k in kinds}
    sums = {k: PhaseCost.of(ops[k], step.tokens) for k in kinds}
    stage_s = [sum(sh.count(k) * sums[k].time for k in kinds) for sh in shapes]
    counts = {"embedding": 1.0, **model_kind_counts(m), "head": 1.0}
    total = sum(counts[k] * sums[k].time for k in kinds)
    crosses = tp * pp > ctx.system.gpus_per_node
    p2p = np.where(pp > 1, comm.p2p_time(ctx.system, O.ACT_BYTES * step.tokens * m.hidden_size, crosses), 0.0)
    return PhaseTimes(step, ops, sums, stage_s, total, p2p)


def blend(a: PhaseTimes, b: PhaseTimes, f: np.ndarray, step: O.Step) -> PhaseTimes:
    """The long-run average of two kinds of step: ``a`` in a share ``f`` of the steps, ``b`` in the rest (same
    kinds and ops, every time, FLOP and byte count averaged); ``step`` is the average step it stands for."""
    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return f * x + (1 - f) * y

    ops = {k: [Op(x.name, x.kind, mix(x.flops, y.flops), mix(x.nbytes, y.nbytes), mix(x.time, y.time), x.dim,
                  x.selective) for x, y in zip(a.ops[k], b.ops[k], strict=True)] for k in a.ops}
    sums = {k: PhaseCost(*(mix(getattr(a.sums[k], n), getattr(b.sums[k], n)) for n in PhaseCost.__dataclass_fields__))
            for k in a.sums}
    return PhaseTimes(step, ops, sums, [mix(x, y) for x, y in zip(a.stage_s, b.stage_s, strict=True)],
                      mix(a.total_s, b.total_s), mix(a.p2p_s, b.p2p_s))


def beat(ph: PhaseTimes, shapes: list[StageShape]) -> np.ndarray:
    """The slowest stage's time for one step."""
    return np.max(np.stack([np.where(s.exists, t, 0.0) for s, t in zip(shapes, ph.stage_s, strict=True)]), axis=0)


def pipelined(ph: PhaseTimes, shapes: list[StageShape], pp: np.ndarray, passes: np.ndarray) -> np.ndarray:
    """Time for ``passes`` steps to flow through the stages (first one end to end, the rest one per beat)."""
    hop = np.where(pp > 1, ph.p2p_s, 0.0)
    return ph.total_s + (pp - 1) * hop + (passes - 1) * (beat(ph, shapes) + hop)
