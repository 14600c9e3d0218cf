"""The ``validate`` groups by name, and running them: each case predicted, errors summarised per group."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from shardplan.validation.ab import ab_cases
from shardplan.validation.memory import memory_cases
from shardplan.validation.natural import natural_routing_cases
from shardplan.validation.projection import projection
from shardplan.validation.runs import (
    Case,
    CaseResult,
    GroupSummary,
    ValidationReport,
    flexgen,
    korthikanti_t4,
    korthikanti_t5,
    modern,
    narayanan,
    vllm_kv,
)
from shardplan.validation.serving import latency_cases, serving_cases


def optimum() -> list[Case]:
    """The free planner's tokens/s per GPU on expert-tuned published runs (``validation.optimum``)."""
    from shardplan.validation.optimum import run_optimum

    out = []
    for row in run_optimum().rows:
        def predict(row: Any = row) -> float:
            if row.free is None:
                raise ValueError(row.failure or "no prediction")
            return float(row.free)

        out.append(Case("optimum", row.id, "tokens_per_s_per_gpu", row.measured, predict))
    return out


GROUPS: dict[str, Callable[[], list[Case]]] = {
    "korthikanti-t5": korthikanti_t5,
    "korthikanti-t4": korthikanti_t4,
    "narayanan": narayanan,
    "modern": modern,
    "optimum": optimum,
    "memory": memory_cases,
    "moe-natural": natural_routing_cases,
    "ab": ab_cases,
    "vllm-kv": vllm_kv,
    "flexgen": flexgen,
    "projection": projection,
    "serving": serving_cases,
    "serving-ttft": lambda: latency_cases("ttft_s"),
    "serving-tpot": lambda: latency_cases("tpot_s"),
}


def run_validation(groups: list[str] | None = None) -> ValidationReport:
    """Run every case of the selected groups (all by default) and summarise the errors per group."""
    rows: list[CaseResult] = []
    for name, make in GROUPS.items():
        if groups and name not in groups:
            continue
        for case in make():
            try:
                out = case.predict()
                pred, why = (float(out[0]), out[1]) if isinstance(out, tuple) else (float(out), None)
                rows.append(CaseResult(group=case.group, id=case.id, quantity=case.quantity, measured=case.measured,
                                       predicted=pred, error_pct=100 * (pred - case.measured) / case.measured,
                                       infeasible=why))
            except ValueError as e:  # an infeasible or invalid case is reported, not fatal
                rows.append(CaseResult(group=case.group, id=case.id, quantity=case.quantity, measured=case.measured,
                                       predicted=None, error_pct=None, failure=str(e)))
    summary = {}
    for g in dict.fromkeys(r.group for r in rows):
        signed = [r.error_pct for r in rows if r.group == g and r.error_pct is not None]
        errs = [abs(e) for e in signed]
        n = sum(1 for r in rows if r.group == g)
        summary[g] = GroupSummary(cases=n, ran=len(errs), mape_pct=sum(errs) / len(errs) if errs else None,
                                  median_abs_pct=statistics.median(errs) if errs else None,
                                  max_abs_pct=max(errs) if errs else None,
                                  mean_signed_pct=sum(signed) / len(signed) if signed else None,
                                  infeasible=sum(1 for r in rows if r.group == g and r.infeasible))
    return ValidationReport(rows=rows, summary=summary)
