"""Grid expansion: axes of request fields → points, each with the full planner request it stands for.

Every name is resolved and every request validated here, before any planning: bad input raises one
``ShardplanError``. A GPU count the hardware cannot form (not whole nodes, over its size) is not bad input
in a sweep across machines of different node sizes: that point becomes an infeasible row with the reason.

Requests are keyed canonically (SHA-256 of the request's JSON: model and system specs, workload, options),
so points that ask the same question (``dgx-h100,DGX-H100``, or serving points that differ only in the
request rate, which does not change the plan) are planned once.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from shardplan import errors
from shardplan.errors import ShardplanError

Kind = Literal["train", "infer"]
TRAIN_AXES = ("model", "hardware", "dtype", "seq_len", "global_batch", "gpus")
INFER_AXES = ("model", "hardware", "dtype", "prompt_len", "gen_len", "gpus", "request_rate")
PLAN_AXES = {"train": TRAIN_AXES, "infer": INFER_AXES[:-1]}
"""Axes that change the planner request (the request rate only changes what the plan is compared with)."""
REQUIRED = {"train": ("model", "hardware", "seq_len", "global_batch"),
            "infer": ("model", "hardware", "prompt_len", "gen_len")}
DEFAULTS: dict[str, list[Any]] = {"dtype": ["bf16"]}


@dataclass(frozen=True)
class Point:
    """One grid point: its labels (what the row shows) and the key of the request that answers it."""

    index: int
    labels: dict[str, Any]
    key: str | None = None
    reason: str | None = None  # set (and key None) when the point cannot be planned on this hardware


@dataclass
class Expansion:
    """The points of a grid, and each distinct request once (by key)."""

    kind: Kind
    points: list[Point]
    requests: dict[str, BaseModel] = field(default_factory=dict)


def build(cls: type[BaseModel], **values: Any) -> Any:
    """``cls(**values)``; pydantic's first error becomes one ``ShardplanError`` naming the option."""
    return errors.build(cls, dashed=True, **values)


def request_key(req: BaseModel) -> str:
    """Canonical key of a planner request: equal exactly when the requests are equal field by field."""
    return hashlib.sha256(req.model_dump_json().encode()).hexdigest()[:20]


def resolve_names(names: list[str], *, kind: Literal["model", "hardware"]) -> dict[str, Any]:
    """Every name resolved (catalog or file) before any work; the first unknown one is the error."""
    from shardplan.hardware import resolve_system
    from shardplan.models import resolve_model

    resolve = resolve_model if kind == "model" else resolve_system
    out = {}
    for name in names:
        try:
            out[name] = resolve(name)
        except ShardplanError as e:
            raise ShardplanError(str(e).removeprefix(f"{kind}: "), field=kind) from None
    return out


def _gpu_check(system: Any, n: int) -> str | None:
    from shardplan.costmodel.core.layouts import check_gpus

    try:
        check_gpus(system, n)
    except ShardplanError as e:
        return str(e.args[0])
    return None


def _laid_out(system: Any, n: int) -> tuple[Any, str | None]:
    """``system`` laid out for ``n`` GPUs (NVLink domains of a rack-scale system), or why ``n`` cannot run."""
    from shardplan.hardware.domains import job_system

    try:
        return job_system(system, n), None
    except ShardplanError as e:
        return system, str(e.args[0])


def _train_request(model: Any, system: Any, n: int, v: dict[str, Any], options: dict[str, Any]) -> BaseModel:
    from shardplan.costmodel.training.layout import TrainWorkload
    from shardplan.planner.training.request import TrainRequest

    work_opts = {k: options[k] for k in ("grad_dtype", "optimizer", "attention") if options.get(k) is not None}
    work = build(TrainWorkload, seq_len=v["seq_len"], global_batch=v["global_batch"], dtype=v["dtype"], **work_opts)
    req_opts = {k: options[k] for k in ("offload", "max_cp", "cross_node_tp", "time_limit_s") if k in options}
    return build(TrainRequest, model=model, system=system, num_gpus=n, workload=work, fixed_global_batch=True,
                 **req_opts)


def _infer_request(model: Any, system: Any, n: int, v: dict[str, Any], options: dict[str, Any]) -> BaseModel:
    from shardplan.costmodel.serving.cost import InferWorkload
    from shardplan.costmodel.serving.engines import with_engine_defaults
    from shardplan.planner.serving.request import InferRequest

    work_opts = {k: options[k] for k in ("weight_dtype", "kv_dtype") if options.get(k) is not None}
    work = build(InferWorkload, **with_engine_defaults(dict(prompt_len=v["prompt_len"], gen_len=v["gen_len"],
                                                            dtype=v["dtype"], **work_opts), system.gpu))
    req_opts = {k: options[k] for k in ("max_ttft_s", "max_tpot_s", "cross_node_tp", "time_limit_s")
                if options.get(k) is not None}
    return build(InferRequest, model=model, system=system, num_gpus=n, workload=work, **req_opts)


def expand(kind: Kind, axes: dict[str, list[Any]], options: dict[str, Any] | None = None) -> Expansion:
    """All points of the grid (the product of ``axes``, in ``TRAIN_AXES``/``INFER_AXES`` order, the GPU count
    varying fastest but for the request rate), each validated, with one request per distinct question.

    ``axes['gpus'] == [None]`` means one node of each hardware. ``options`` hold the scalar request fields
    (train: grad_dtype optimizer attention offload max_cp cross_node_tp time_limit_s; infer: weight_dtype
    kv_dtype max_ttft_s max_tpot_s cross_node_tp time_limit_s).
    """
    from shardplan.sweep.grid import check_size

    names = TRAIN_AXES if kind == "train" else INFER_AXES
    missing = [k for k in REQUIRED[kind] if not axes.get(k)]
    if missing:
        flag = missing[0].replace("_", "-")
        raise ShardplanError(f"give --{flag} (a value or a list) or put '{missing[0]}' in --grid", field=flag)
    axes = {k: axes.get(k) or DEFAULTS.get(k, [None]) for k in names}
    check_size(axes)
    models = resolve_names(axes["model"], kind="model")
    systems = resolve_names(axes["hardware"], kind="hardware")
    make = _train_request if kind == "train" else _infer_request
    out = Expansion(kind=kind, points=[])
    for combo in itertools.product(*(axes[k] for k in names)):
        v = dict(zip(names, combo, strict=True))
        model, system = models[v["model"]], systems[v["hardware"]]
        n = v["gpus"] or system.gpus_per_node
        labels = {"hardware": system.name, "gpu": system.gpu.name, "model": model.name, "num_gpus": n}
        labels |= {k: v[k] for k in names if k not in ("model", "hardware", "gpus")}
        system, reason = _laid_out(system, n)
        req = make(model, system, n, v, options or {})  # validates every point before any planning
        reason = reason or _gpu_check(system, n)
        if reason is not None:
            out.points.append(Point(len(out.points), labels, None, reason))
            continue
        key = request_key(req)
        out.requests.setdefault(key, req)
        out.points.append(Point(len(out.points), labels, key))
    return out
