"""Where a published MoE layout's expert-parallel group sits, beside the cost model's error on it: the check that the
free planner's smaller or in-node EP groups do not rest on a cross-node all-to-all priced too slow (if it were, the
published cross-node layouts would read slow and the in-node ones right).

An EP group is ``etp·ep`` consecutive expert ranks (Megatron-Core orders expert ranks tp-ep-dp: parallel_state.py
@d98e8a6), so it stays inside one NVLink domain when ``etp·ep`` is at most the job system's ``gpus_per_node`` (a node,
or the NVL72 job's domain after ``hardware.domains.job_system``).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run


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
    """Hopper, Blackwell (B200/B300 and the NVL72 trays) or the GPU's own name."""
    name = run.system.gpu.name
    return "hopper" if name.startswith("h") else "blackwell" if name.startswith(("b", "gb")) else name


def ep_in_domain(run: OptimumRun, ep: int, etp: int | None) -> bool:
    """An EP group of ``ep`` ranks at expert TP ``etp`` (the attention TP where unset, Megatron's default) stays in
    one NVLink domain of the run's job system."""
    return (etp or run.layout.tp) * ep <= run.system.gpus_per_node


def moe_runs() -> list[OptimumRun]:
    """The optimum group's MoE runs the catalogs hold, the declared regressions left out."""
    runs = (parse_run(rec) for rec in load_records_tuned())
    return [r for r in runs if isinstance(r, OptimumRun) and r.model.moe is not None and not r.known_regression]


def placement_rows() -> list[PlacementRow]:
    """Every published MoE layout's placement and pinned error (``validation.runs.pinned_estimate``)."""
    from shardplan.validation.runs import pinned_estimate

    out = []
    for run in moe_runs():
        lay = run.layout
        rep = pinned_estimate(run.model, run.system, run.gpus, run.work, lay, run.stage_layers)
        err = 100.0 * (rep.metrics.tokens_per_s / run.gpus / run.measured_tokens_per_s_per_gpu - 1.0)
        out.append(PlacementRow(run.id, gpu_family(run), ep_in_domain(run, lay.ep, lay.etp),
                                lay.microbatch * run.work.seq_len / (lay.tp * lay.cp), err))
    return out
