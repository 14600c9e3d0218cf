"""Error bands on predictions, from the residuals of the shipped validation (``shardplan validate``).

A band of half-width ``w`` around a predicted step time ``t`` is ``[t/(1+w), t·(1+w)]`` (and the same for
tokens/s): symmetric on a log axis, printed as "±w". ``w`` for a job and GPU generation is
``exp(q) − 1`` where ``q`` is the 85th percentile of ``|ln(measured/predicted)|`` over the validation cases of
that job on that generation (``BAND_QUANTILE``; fewer than ``MIN_CASES`` cases: all generations pooled). Training
keys MoE models apart (``<generation>-moe``, else ``moe`` pooled over generations): their published runs miss by
more, and a dense plan should not carry their band nor an MoE plan the dense one. A
calibrated system uses the band measured on calibrated predictions instead: its own leave-one-out band
(``Calibration.band_pct``, ≥ 3 runs), or else the band of the ``projection`` validation group (predictions
after calibrating on a series' one or two smallest runs). Calibration narrows the band only as far as those
measurements show it does.

Jobs with validation cases: ``train`` (step time, throughput), ``offload`` (FlexGen generation throughput) and
``serve`` (``infer``'s output tokens/s: the ``serving`` group, TensorRT-LLM's published saturation throughput on
H100/H200). The serving records publish throughput only, so TTFT and TPOT carry no band. A calibration is fitted
to training step times, so serving and offload keep their generation's band on a calibrated system.

A plan the planner chose also carries the interval at the optimum (``optimum_band``): where the measured throughput
of the expert-tuned run of the same job fell against the planner's own prediction, asymmetric because an optimiser's
picks err in one direction (the ``optimum`` validation group; see ``OPTIMUM_JOB``).

The table lives in ``shardplan/data/error_bands.json``; ``compute_band_table`` recomputes it from validation
rows (``benchmarks/error_bands.py`` writes it; a test checks the shipped file against a fresh run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from shardplan.hardware.spec import PARAMETERS, Calibration, SystemSpec

BAND_QUANTILE = 0.85  # aims at ≥ 80% coverage of the validation cases with some margin
MIN_CASES = 8  # a generation with fewer validation cases uses the pooled band
_TIME_DEFAULTS = {p: getattr(Calibration(), p) for p in PARAMETERS if p != "memory_overhead_bytes"}
GENERATIONS = ("a100", "h100", "h200", "b200", "b300", "mi300", "v100", "t4")
# GPUs sold under another name with a generation's die and tensor rates: the H800 SXM is the H100 SXM with NVLink cut
# to 400 GB/s and FP64 to 1 TFLOPS (NVIDIA H800 datasheet; hardware.gpus.H800_SXM), which the system spec carries.
SAME_DIE = {"h800": "h100"}


def generation(gpu_name: str) -> str:
    """The GPU generation a band is keyed by: a100, h100, h200, b200 (GB200 too), b300 (GB300 too), … or ``other``."""
    name = gpu_name.lower()
    name = next((g for alias, g in SAME_DIE.items() if alias in name), name)
    return next((g for g in GENERATIONS if g in name), "other")


def half_width(log_ratios: Sequence[float], quantile: float = BAND_QUANTILE) -> float:
    """``exp(q) − 1`` for ``q`` the ``quantile`` of ``|ln(measured/predicted)|``."""
    return float(math.exp(np.quantile(np.abs(np.asarray(log_ratios, dtype=float)), quantile)) - 1)


MOE = "moe"  # key suffix (and pooled key) of the MoE models' training bands


def case_key(gen: str, moe: bool) -> str:
    """The band-table key of a case or prediction: its generation, ``<generation>-moe`` for an MoE model."""
    return f"{gen}-{MOE}" if moe else gen


DENSE = "dense"  # pooled key of the dense models' intervals at the optimum


def _first_key(entry: dict[str, Any], gen: str, moe: bool) -> str:
    """The table key a prediction reads: an MoE model its own MoE key, else the pooled MoE key, else its
    generation's; a dense model its generation's, else the pooled dense key (the intervals at the optimum have one);
    then every case's."""
    return next(k for k in ([case_key(gen, True), MOE, gen] if moe else [gen, DENSE]) + ["all"] if k in entry)


def compute_band_table(rows: Iterable[tuple[str, str, float, float]], *, projection: Sequence[float] = (),
                       quantile: float = BAND_QUANTILE, min_cases: int = MIN_CASES) -> dict[str, Any]:
    """Band half-widths (fractions) per job and key from ``(job, key, measured, predicted)`` rows of time-like
    quantities (step time, or throughput: the log ratio only changes sign), the key a generation or
    ``case_key``'s MoE key; ``projection`` holds the projection group's ``ln(measured/predicted)``. Besides
    ``all`` (every case) and the keys with enough cases, ``moe`` pools the MoE keys of a job."""
    by: dict[str, dict[str, list[float]]] = {}
    for job, gen, measured, predicted in rows:
        by.setdefault(job, {}).setdefault(gen, []).append(math.log(measured / predicted))
    table: dict[str, Any] = {}
    for job, gens in by.items():
        pooled = [x for xs in gens.values() for x in xs]
        entry = {"all": half_width(pooled, quantile)}
        moe = [x for g, xs in gens.items() if g.endswith(f"-{MOE}") for x in xs]
        if len(moe) >= min_cases:
            entry[MOE] = half_width(moe, quantile)
        entry.update({g: half_width(xs, quantile) for g, xs in sorted(gens.items()) if len(xs) >= min_cases})
        if projection and job == "train":
            entry["calibrated"] = half_width(projection, quantile)
        table[job] = {k: round(v, 4) for k, v in entry.items()}
        table[job]["cases"] = {g: len(xs) for g, xs in sorted(gens.items())}
    return table


@lru_cache(maxsize=1)
def shipped_table() -> dict[str, Any]:
    return json.loads(resources.files("shardplan.data").joinpath("error_bands.json").read_text())


def lookup(entry: dict[str, Any], gen: str, moe: bool = False) -> float:
    """A job's band for a generation and model class: its own key, else (MoE) the pooled MoE band, else the
    generation's, else every case's."""
    return float(entry[_first_key(entry, gen, moe)])


def calibrated(system: SystemSpec) -> bool:
    """Whether the system file carries a fitted calibration (any time parameter off its default)."""
    cal = system.calibration
    return any(getattr(cal, name) != default for name, default in _TIME_DEFAULTS.items())


def band(system: SystemSpec, job: str = "train", *, moe: bool = False) -> float | None:
    """Half-width (fraction) of the band for predictions of ``job`` on ``system`` (``moe``: of an MoE model);
    None if the table has no job."""
    entry = shipped_table()["bands"].get(job)
    if entry is None:
        return None
    w = lookup(entry, generation(system.gpu.name), moe)
    cal = system.calibration
    # a calibration is fitted to training runs: it speaks for training predictions only
    if job == "train" and calibrated(system):
        if cal.band_pct is not None:
            w = cal.band_pct / 100  # the system's own leave-one-out band: it replaces the generation's
        elif entry.get("calibrated") is not None:
            # measured on calibrated predictions of the projection series, nearly all dense: it speaks for a dense
            # model; an MoE plan keeps the wider of it and the MoE band (nothing shows calibration narrows that)
            w = max(float(entry["calibrated"]), w) if moe else float(entry["calibrated"])
    return w


# The band at the optimum: what a plan the planner chose is worth against the best measured run of the same job.
# The symmetric band above is measured on published layouts (the expert's choice, priced as given); an optimiser
# picks the layouts the model is most optimistic about, so its own picks miss in one direction more than the model
# does on a layout picked elsewhere (the optimiser's curse: Smith and Winkler 2006, Management Science 52(3)). The
# ``optimum`` validation group measures that directly: the free planner's tokens/s per GPU against the expert-tuned
# run of the same model, GPU count, batch, sequence, hardware and datatype. The interval is the central
# ``BAND_QUANTILE`` of ln(measured/predicted) there, as fractions of the prediction, per generation and model class.
OPTIMUM_JOB = "train-optimum"
OPTIMUM_QUANTILES = ((1 - BAND_QUANTILE) / 2, (1 + BAND_QUANTILE) / 2)


def interval(log_ratios: Sequence[float], quantiles: tuple[float, float] = OPTIMUM_QUANTILES) -> list[float]:
    """``[exp(q_lo) − 1, exp(q_hi) − 1]`` for the ``quantiles`` of ``ln(measured/predicted)``: how far below and above
    the prediction the measured values lie (fractions; the low end negative when measurements fall short)."""
    q = np.quantile(np.asarray(log_ratios, dtype=float), quantiles)
    return [round(float(math.exp(q[0]) - 1), 4), round(float(math.exp(q[1]) - 1), 4)]


def compute_optimum_table(rows: Iterable[tuple[str, float, float]], *, min_cases: int = MIN_CASES) -> dict[str, Any]:
    """Intervals at the optimum from ``(key, measured, predicted)`` throughput rows (``case_key`` keys): ``all``,
    ``moe`` and ``dense`` (the MoE and the other keys pooled, from ``min_cases``) and every key with ``min_cases``
    rows, plus the counts of the keys (``cases``) and of the pools (``pooled_cases``)."""
    by: dict[str, list[float]] = {}
    for key, measured, predicted in rows:
        by.setdefault(key, []).append(math.log(measured / predicted))
    pools = {"all": [x for xs in by.values() for x in xs],
             MOE: [x for k, xs in by.items() if k.endswith(f"-{MOE}") for x in xs],
             DENSE: [x for k, xs in by.items() if not k.endswith(f"-{MOE}") for x in xs]}
    entry: dict[str, Any] = {k: interval(xs) for k, xs in pools.items() if k == "all" or len(xs) >= min_cases}
    entry.update({k: interval(xs) for k, xs in sorted(by.items()) if len(xs) >= min_cases})
    entry["cases"] = {k: len(xs) for k, xs in sorted(by.items())}
    entry["pooled_cases"] = {k: len(xs) for k, xs in pools.items()}
    return entry


def interval_for(entry: dict[str, Any], gen: str, moe: bool = False) -> list[float]:
    """The interval at the optimum for a generation and model class, read in ``lookup``'s key order."""
    return list(entry[_first_key(entry, gen, moe)])


def optimum_band(system: SystemSpec, *, moe: bool = False) -> tuple[list[float], int] | None:
    """The interval at the optimum for a plan on ``system`` (``moe``: of an MoE model) and the number of tuned runs
    it comes from (its key's, or its pool's); None when the table has none or the system is calibrated (the
    intervals were measured on the shipped presets, not on a calibrated system)."""
    entry = shipped_table()["bands"].get(OPTIMUM_JOB)
    if entry is None or calibrated(system):
        return None
    key = _first_key(entry, generation(system.gpu.name), moe)
    return list(entry[key]), int(entry["cases"].get(key) or entry.get("pooled_cases", {}).get(key, 0))


def around(value: float, w: float | None) -> list[float] | None:
    """``[value/(1+w), value·(1+w)]``, or None without a band."""
    return None if w is None else [value / (1 + w), value * (1 + w)]


def within(value: float, fractions: list[float], *, time: bool = False) -> list[float]:
    """``[low, high]`` of a throughput whose measured/predicted ratio lies in ``1 + fractions`` (``time``: of a
    step time, which moves the other way)."""
    lo, hi = fractions
    return [value / (1 + hi), value / (1 + lo)] if time else [value * (1 + lo), value * (1 + hi)]


def covered(measured: float, predicted: float, w: float) -> bool:
    """Whether ``measured`` lies in the band of half-width ``w`` around ``predicted``."""
    return abs(math.log(measured / predicted)) <= math.log1p(w) + 1e-12


def coverage(cases: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """(share of ``(measured, predicted, w)`` cases inside their band, median band width 2w)."""
    rows = list(cases)
    if not rows:
        return float("nan"), float("nan")
    inside = sum(covered(m, p, w) for m, p, w in rows)
    return inside / len(rows), float(np.median([2 * w for _, _, w in rows]))
