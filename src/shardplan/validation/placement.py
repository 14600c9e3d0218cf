"""Where a published MoE layout's expert-parallel group sits, beside the cost model's error on it: the check that the
free planner's smaller or in-node EP groups do not rest on a cross-node all-to-all priced too slow (if it were, the
published cross-node layouts would read slow and the in-node ones right).

An EP group's ranks stand ``etp`` apart (Megatron-Core orders expert ranks tp-ep-dp, tp being the expert TP:
parallel_state.py@d98e8a6), so it stays inside one NVLink domain (a node, or the NVL72 job's domain after
``hardware.domains.job_system``) when all its members share one: the cost model's own rule for where the EP
all-to-all runs (``comm.members_per_node``).
The split is read off end-to-end errors, so scale and software stack confound it (benchmarks/RESULTS.md, wave 46).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core.bands import generation
from shardplan.costmodel.core.comm import members_per_node
from shardplan.hardware.spec import SystemSpec
from shardplan.validation.optimum import OptimumRun, error_pct, load_records_tuned, parse_run

# GPU generations (``bands.generation``) by family
FAMILIES = {"h100": "hopper", "h200": "hopper", "b200": "blackwell", "b300": "blackwell"}


@dataclass(frozen=True)
class PlacementRow:
    """One published MoE layout: its GPU family, whether its EP group stays in one NVLink domain, the tokens a rank
    feeds a layer per microbatch (microbatch · seq / (tp · cp)) and the pinned error, % (+: predicted faster)."""

    id: str
    family: str
    inside: bool
    tokens: float
    pinned_error_pct: float


def gpu_family(run: OptimumRun) -> str:
    """Hopper, Blackwell (GB200/GB300 with their dies) or the GPU's generation."""
    gen = generation(run.system.gpu.name)
    return FAMILIES.get(gen, gen)


def ep_in_domain(system: SystemSpec, ep: int, etp: int) -> bool:
    """An EP group of ``ep`` ranks at expert TP ``etp`` stays in one NVLink domain of ``system``."""
    return bool(members_per_node(system, np.asarray(ep), np.asarray(etp)) == ep)


def moe_runs() -> list[OptimumRun]:
    """The optimum group's MoE runs the catalogs hold, the declared regressions left out."""
    runs = (parse_run(rec) for rec in load_records_tuned())
    return [r for r in runs if isinstance(r, OptimumRun) and r.model.moe is not None and not r.known_regression]


def placement_rows() -> list[PlacementRow]:
    """Every published MoE layout's placement and pinned error (``validation.runs.pinned_estimate``)."""
    from shardplan.validation.runs import pinned_estimate

    out: list[PlacementRow] = []
    for run in moe_runs():
        lay = run.layout
        rep = pinned_estimate(run.model, run.system, run.gpus, run.work, lay, run.stage_layers)
        err = error_pct(rep.metrics.tokens_per_s / run.gpus, run.measured_tokens_per_s_per_gpu)
        assert err is not None
        out.append(PlacementRow(run.id, gpu_family(run), ep_in_domain(run.system, lay.ep, lay.expert_tp),
                                lay.microbatch * run.work.seq_len / (lay.tp * lay.cp), err))
    return out
