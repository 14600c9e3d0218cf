"""Error-band table and coverage from the validation groups (see ``costmodel.bands`` for the definition).

``band_table()`` runs the training, offload, serving and projection groups and returns what
``shardplan/data/error_bands.json`` ships (``benchmarks/error_bands.py`` writes it). ``band_coverage()`` says
what share of the measured values falls inside the band their prediction carries, and the median width.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from shardplan.costmodel.core.bands import (
    BAND_QUANTILE,
    MIN_CASES,
    MOE,
    OPTIMUM_JOB,
    case_key,
    compute_band_table,
    compute_optimum_table,
    coverage,
    generation,
    interval_for,
    lookup,
    shipped_table,
)
from shardplan.hardware import get_system
from shardplan.validation.groups import run_validation
from shardplan.validation.runs import _MODERN_SYSTEMS, ValidationReport, load_records

TRAIN_GROUPS = ("korthikanti-t5", "korthikanti-t4", "narayanan", "modern")
OFFLOAD_GROUPS = ("flexgen",)
SERVE_GROUPS = ("serving",)
NOTE = (f"Half-widths w (fractions) of the error band: exp(q)-1, q = the {BAND_QUANTILE:.0%} quantile of "
        "|ln(measured/predicted)| over the `shardplan validate` cases of the job (train: korthikanti-t5, "
        f"korthikanti-t4, narayanan, modern) per GPU generation (own entry from {MIN_CASES} cases, else 'all'), "
        "MoE models apart ('<generation>-moe', else 'moe' pooled, else the generation's); "
        "'calibrated': the same over the projection group (prediction after calibrating on a series' smallest "
        "runs); offload: the flexgen group; serve: the serving group (infer's output tokens/s); "
        f"{OPTIMUM_JOB}: [low, high] fractions, exp of the {(1 - BAND_QUANTILE) / 2:.1%} and "
        f"{(1 + BAND_QUANTILE) / 2:.1%} quantiles of ln(measured/predicted tokens/s) of the optimum group (the free "
        "planner's plan against the expert-tuned run of the same job; the publisher's known regressions left out), "
        "keyed as train, with the dense keys pooled too ('dense', which a dense plan reads before 'all'); run counts "
        "per key ('cases') and per pool ('pooled_cases'). Recompute: .venv/bin/python benchmarks/error_bands.py")


def case_generation(group: str, case_id: str) -> str:
    """The GPU generation a validation case ran on (the records' hardware, as the groups map it)."""
    if group in OFFLOAD_GROUPS:
        return generation(get_system("gcp-t4").gpu.name)  # FlexGen's machine (Sheng et al. 2023 §6)
    if group in SERVE_GROUPS:
        return _serving_generation()[case_id]
    if group != "modern":
        return generation("a100")  # Korthikanti 2022 and Narayanan 2021 ran on Selene (A100 80GB)
    gpu = {r["id"]: r["hardware"]["gpu"] for r in load_records("modern_training_runs")}[case_id]
    return generation(get_system(_MODERN_SYSTEMS[gpu]).gpu.name)


def case_is_moe(group: str, case_id: str) -> bool:
    """Whether a training validation case's model is an MoE (only the ``modern`` group has them)."""
    if group != "modern":
        return False
    return case_id in _modern_moe_ids()


@lru_cache(maxsize=1)
def _modern_moe_ids() -> frozenset[str]:
    from shardplan.validation.runs import _modern_model

    out = set()
    for r in load_records("modern_training_runs"):
        model = _modern_model(r)
        if model is not None and model.moe is not None:
            out.add(r["id"])
    return frozenset(out)


def _serving_generation() -> dict[str, str]:
    """Case id → generation of the serving group's records (their ``hardware.system`` preset)."""
    return {r["id"].removeprefix("trtllm-"): generation(get_system(r["hardware"]["system"]).gpu.name)
            for r in load_records("serving_runs")}


def optimum_band_rows() -> list[tuple[str, float, float]]:
    """``(key, measured, free-planned)`` tokens/s per GPU of the ``optimum`` group's tuned runs (``case_key``: GPU
    generation, MoE apart), leaving out runs the planner could not plan and the measurements their publisher lists as
    software regressions (``OptimumRow.known_regression``)."""
    from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run, run_optimum

    runs = {run.id: run for run in map(parse_run, load_records_tuned()) if isinstance(run, OptimumRun)}
    return [(case_key(generation(runs[r.id].system.gpu.name), runs[r.id].model.moe is not None), r.measured, r.free)
            for r in run_optimum().rows
            if r.id in runs and r.free is not None and r.measured > 0 and r.known_regression is None]


def _report() -> ValidationReport:
    return run_validation([*TRAIN_GROUPS, *OFFLOAD_GROUPS, *SERVE_GROUPS, "projection"])


def band_table(report: ValidationReport | None = None) -> dict[str, Any]:
    report = report or _report()
    ok = [r for r in report.rows if r.predicted is not None and r.predicted > 0]
    jobs = {**dict.fromkeys(TRAIN_GROUPS, "train"), **dict.fromkeys(OFFLOAD_GROUPS, "offload"),
            **dict.fromkeys(SERVE_GROUPS, "serve")}
    rows = [(jobs[r.group], case_key(case_generation(r.group, r.id), jobs[r.group] == "train"
                                     and case_is_moe(r.group, r.id)), r.measured, r.predicted)
            for r in ok if r.group in jobs]
    proj = [math.log(r.measured / r.predicted) for r in ok if r.group == "projection"]
    bands = compute_band_table(rows, projection=proj)
    bands[OPTIMUM_JOB] = compute_optimum_table(optimum_band_rows())
    return {"note": NOTE, "quantile": BAND_QUANTILE, "bands": bands}


def band_coverage(report: ValidationReport, table: dict[str, Any] | None = None) -> dict[str, dict[str, float]]:
    """Per kind of case (``train``: the training groups with their generation's band; ``projection``: the
    calibrated band; ``offload``: the flexgen group): share of measured values inside the band of their
    prediction, median width, cases. ``table``: the shipped one by default."""
    table = (table or shipped_table())["bands"]
    bands, off = table["train"], table["offload"]
    ok = [r for r in report.rows if r.predicted is not None and r.predicted > 0]
    kinds = {
        "train": [(r.measured, r.predicted, lookup(bands, case_generation(r.group, r.id), case_is_moe(r.group, r.id)))
                  for r in ok if r.group in TRAIN_GROUPS],
        "projection": [(r.measured, r.predicted, bands["calibrated"]) for r in ok if r.group == "projection"],
        "offload": [(r.measured, r.predicted, off.get(case_generation(r.group, r.id), off["all"]))
                    for r in ok if r.group in OFFLOAD_GROUPS],
    }
    serve = table.get("serve")
    if serve is not None:
        kinds["serve"] = [(r.measured, r.predicted, serve.get(case_generation(r.group, r.id), serve["all"]))
                          for r in ok if r.group in SERVE_GROUPS]
    out = {}
    for kind, cases in kinds.items():
        if cases:
            share, width = coverage(cases)
            out[kind] = {"inside_pct": 100 * share, "median_width_pct": 100 * width, "cases": len(cases)}
    if any(r.group == "optimum" for r in report.rows) and OPTIMUM_JOB in table:
        out["optimum"] = optimum_coverage(table)
    return out


def optimum_coverage(table: dict[str, Any] | None = None) -> dict[str, float]:
    """Share of the ``optimum`` group's measured tokens/s inside the interval at the optimum of their free plan
    (``optimum_band_rows``), the median interval width (percent of the prediction) and the cases. ``table``: the
    bands, the shipped ones by default."""
    entry = (table or shipped_table()["bands"])[OPTIMUM_JOB]
    rows = optimum_band_rows()
    spans = [interval_for(entry, key.removesuffix(f"-{MOE}"), key.endswith(f"-{MOE}")) for key, _, _ in rows]
    inside = [lo <= m / p - 1 <= hi for (_, m, p), (lo, hi) in zip(rows, spans, strict=True)]
    return {"inside_pct": 100 * sum(inside) / len(rows),
            "median_width_pct": 100 * float(np.median([hi - lo for lo, hi in spans])), "cases": len(rows)}
