"""Measured runs for ``shardplan calibrate``: the runs file (YAML or JSON), checked run by run.

Every measurement is turned into the quantity the fit works on, a step time in seconds, using the cost
model's FLOP count of exactly the layout named (``tokens_per_s``: ``B·s / step``; ``tflops_per_gpu``:
``FLOPs / (step · gpus)`` with model or hardware FLOPs). Each problem is one ``ShardplanError`` whose field
names the run (``runs[2] (my-run).measured.tflops_per_gpu``) and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.report import TrainReport
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec

GiB = 2**30
TIME_KEYS = ("step_time_s", "tokens_per_s", "tflops_per_gpu")


class LayoutIn(BaseModel):
    """A run's layout, with ``estimate train`` names; omitted = that command's defaults (dp: the rest)."""

    model_config = ConfigDict(extra="forbid")

    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: int | None = Field(None, ge=1)
    ep: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)
    microbatch: int = Field(1, ge=1)
    interleave: int = Field(1, ge=1)
    recompute: Recompute = Recompute.NONE
    recompute_layers: int | None = Field(None, ge=1)
    sequence_parallel: bool = False
    zero: int = Field(0, ge=0, le=3)


class MeasuredIn(BaseModel):
    """What was measured; at least one value. ``flops_convention`` says which FLOPs ``tflops_per_gpu`` counts."""

    model_config = ConfigDict(extra="forbid")

    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tflops_per_gpu: float | None = None
    flops_convention: Literal["model", "hardware"] = "model"
    peak_memory_gib: float | None = None


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    model: str
    gpus: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    dtype: str = "bf16"
    layout: LayoutIn = Field(default_factory=LayoutIn)
    measured: MeasuredIn


class RunsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs: list[dict[str, Any]]


@dataclass(frozen=True)
class Run:
    """One checked run: what the cost model needs to evaluate it, and its step time to match."""

    index: int
    name: str
    model: ModelSpec
    gpus: int
    workload: TrainWorkload
    layout: TrainLayout
    step_time_s: float | None  # measured, or derived from tokens/s or TFLOP/s
    peak_memory_bytes: float | None
    fingerprint: str

    @property
    def where(self) -> str:
        return f"runs[{self.index}] ({self.name})"


def _fingerprint(raw: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_runs_file(path: str | Path) -> list[dict[str, Any]]:
    """The ``runs:`` list of a YAML/JSON file (one ``ShardplanError`` per unreadable or malformed file)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ShardplanError(f"cannot read '{p}': {e.strerror or e}", field="runs") from None
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ShardplanError(f"'{p}' is not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: "
                             f"{str(e).splitlines()[0]}", field="runs") from None
    if not isinstance(data, dict) or "runs" not in data:
        raise ShardplanError(f"'{p}' must hold a mapping with a 'runs:' list", field="runs")
    try:
        return RunsFile.model_validate(data).runs
    except ValidationError as e:
        raise ShardplanError(f"'{p}': {e.errors()[0]['msg']}", field="runs") from None


def _positive(value: float | None, where: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ShardplanError(f"must be a positive finite number (got {value})", field=where)


def check_run(index: int, raw: Any, system: SystemSpec, resolve_model: Any) -> tuple[Run, TrainReport]:
    """Validate one run against ``system``; returns it with the base system's estimate of it."""
    where = f"runs[{index}]"
    if not isinstance(raw, dict):
        raise ShardplanError("must be a mapping (model, gpus, global_batch, seq_len, layout, measured)", field=where)
    name = str(raw.get("id") or raw.get("model") or index)
    where = f"runs[{index}] ({name})"
    try:
        run = RunIn.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ShardplanError(err["msg"].removeprefix("Value error, "), field=f"{where}.{loc}") from None
    m = run.measured
    for key in (*TIME_KEYS, "peak_memory_gib"):
        _positive(getattr(m, key), f"{where}.measured.{key}")
    if all(getattr(m, k) is None for k in (*TIME_KEYS, "peak_memory_gib")):
        raise ShardplanError(f"needs one of {', '.join(TIME_KEYS)}, peak_memory_gib", field=f"{where}.measured")
    try:
        spec = resolve_model(run.model)
    except ShardplanError as e:
        raise ShardplanError(str(e).removeprefix("model: "), field=f"{where}.model") from None
    lay = run.layout
    inner = lay.tp * lay.pp * lay.cp
    dp = lay.dp if lay.dp is not None else run.gpus // inner
    if inner * dp != run.gpus:
        raise ShardplanError(f"tp·pp·dp·cp = {lay.tp}·{lay.pp}·{dp}·{lay.cp} = {inner * dp} ≠ gpus ({run.gpus})",
                             field=f"{where}.layout")
    layout = TrainLayout(tp=lay.tp, pp=lay.pp, dp=dp, ep=lay.ep, cp=lay.cp, microbatch=lay.microbatch,
                         interleave=lay.interleave, recompute=lay.recompute, recompute_layers=lay.recompute_layers,
                         sequence_parallel=lay.sequence_parallel,
                         zero_stage=lay.zero)
    try:
        work = TrainWorkload(seq_len=run.seq_len, global_batch=run.global_batch, dtype=run.dtype)
        report = estimate_training(spec, system, run.gpus, work, layout)
    except ValidationError as e:
        raise ShardplanError(e.errors()[0]["msg"].removeprefix("Value error, "), field=f"{where}.dtype") from None
    except ShardplanError as e:
        raise ShardplanError(str(e), field=f"{where}.layout") from None
    step = _measured_step(m, report, run, system, where)
    mem = None if m.peak_memory_gib is None else m.peak_memory_gib * GiB
    cap = system.gpu.memory_bytes
    if mem is not None and mem > cap:
        raise ShardplanError(f"{m.peak_memory_gib:g} GiB is above the GPU's {cap / GiB:.1f} GiB",
                             field=f"{where}.measured.peak_memory_gib")
    return Run(index, name, spec, run.gpus, work, layout, step, mem, _fingerprint(raw)), report


def _measured_step(m: MeasuredIn, report: TrainReport, run: RunIn, system: SystemSpec, where: str) -> float | None:
    """The measured step time (from whichever quantity was given), checked against the GPU's peak."""
    metrics = report.metrics
    if metrics is None:
        return None
    base_step = metrics.step_time_s
    hw_flops = metrics.tflops_per_gpu * 1e12 * base_step * run.gpus  # executed FLOPs per step (cost model)
    model_flops = metrics.mfu * base_step * run.gpus * system.gpu.peak(run.dtype)
    if m.step_time_s is not None:
        key, step = "step_time_s", m.step_time_s
    elif m.tokens_per_s is not None:
        key, step = "tokens_per_s", run.global_batch * run.seq_len / m.tokens_per_s
    elif m.tflops_per_gpu is not None:
        flops = model_flops if m.flops_convention == "model" else hw_flops
        key, step = "tflops_per_gpu", flops / (m.tflops_per_gpu * 1e12 * run.gpus)
    else:
        return None
    peak = system.gpu.peak(run.dtype)
    implied = hw_flops / (step * run.gpus)
    if implied > peak:
        raise ShardplanError(f"implies {implied / 1e12:.0f} TFLOP/s per GPU executed, above the {run.dtype} peak of "
                             f"{peak / 1e12:.0f} TFLOP/s of {system.gpu.name}", field=f"{where}.measured.{key}")
    return step


def load_runs(path_or_list: str | Path | list[dict[str, Any]], system: SystemSpec) -> list[tuple[Run, TrainReport]]:
    """Check every run of a file (or a list of run mappings); an empty list is an error."""
    from shardplan.models import resolve_model

    raws = path_or_list if isinstance(path_or_list, list) else read_runs_file(path_or_list)
    if not raws:
        raise ShardplanError("the list is empty: give at least one measured run", field="runs")
    return [check_run(i, raw, system, resolve_model) for i, raw in enumerate(raws)]
