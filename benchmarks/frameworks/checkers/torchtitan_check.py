"""torchtitan's own configuration code on shardplan's torchtitan exports (runs inside the torchtitan environment;
stdin: the manifest entries, stdout: one JSON line of results).

Per export:
1. ``ConfigManager().parse_args(["--job.config_file", FILE])``: the TOML loader, the dataclass/tyro parser and
   ``_validate_config``; then the same settings as the overrides the file's header prints (``--section.key value``)
   and the two must agree.
2. ``ParallelDims(...)`` with the plan's GPU count as world size (its ``_validate`` checks the degrees multiply to
   it and the expert TP rule), and the batch checks of ``Trainer.__init__`` (global batch a multiple of local
   batch × data-parallel degree) and ``build_pipeline_schedule`` (local batch a multiple of the microbatch).
3. torchtitan's ``pipeline_llm`` itself, run up to its module split (its source is executed without the lines that
   need a device mesh and the model: ``pipeline_module_split`` onwards), with the plan's layer count as
   ``model_args.n_layers``: the schedule class, the virtual-stage count and its validation, the default split
   ``generate_llm_fqn_per_model_part`` or the explicit ``module_fqns_per_model_part``. The layers each rank then
   builds (virtual stage ``s`` on rank ``s mod pp``, looped schedules) are compared with the plan's ``stage_layers``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import shlex
import textwrap
import types

from common import framework_error, run
from torchtitan.config import ConfigManager
from torchtitan.distributed import pipeline_parallel
from torchtitan.distributed.parallel_dims import ParallelDims

logging.disable(logging.WARNING)


def _error(e: BaseException) -> str:
    return framework_error(e, ("torchtitan", "<split>"))


def _split_fn():
    """``pipeline_llm`` cut before ``pipeline_module_split``, returning the module names per virtual stage."""
    src = textwrap.dedent(inspect.getsource(pipeline_parallel.pipeline_llm))
    cut = src.index("    stages, model_parts = pipeline_module_split(")
    src = src[:cut] + "    return module_names_per_stage\n"
    namespace = dict(vars(pipeline_parallel))
    exec(compile(src, "<split>", "exec"), namespace)
    return namespace["pipeline_llm"]


SPLIT = _split_fn()


def _overrides(text: str) -> list[str]:
    """The ``--section.key value`` words of the header's launch line."""
    lines = text.splitlines()
    line = next(ln for ln in lines if ln.startswith("#     --"))
    return shlex.split(line.lstrip("#").strip())


def _sections(cfg) -> dict:
    import dataclasses

    sections = ("parallelism", "training", "activation_checkpoint", "compile")
    return {s: dataclasses.asdict(getattr(cfg, s)) for s in sections}


def check(entry: dict) -> dict:
    plan, path = entry["plan"], entry["path"]
    out = {"case": entry["case"], "format": "torchtitan"}
    with open(path) as f:
        text = f.read()
    stage = "ConfigManager (TOML)"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            cfg = ConfigManager().parse_args(["--job.config_file", path])
            stage = "ConfigManager (header overrides)"
            flat = ConfigManager().parse_args(_overrides(text))
    except SystemExit:
        return out | {"status": "rejected", "stage": stage, "message": log.getvalue().strip()[-600:]}
    except Exception as e:
        return out | {"status": "rejected", "stage": stage, "message": _error(e)}
    a, b = _sections(cfg), _sections(flat)
    a["parallelism"].pop("module_fqns_per_model_part"), b["parallelism"].pop("module_fqns_per_model_part")
    if a != b:
        diff = {f"{s}.{k}": (a[s][k], b[s][k]) for s in a for k in a[s] if a[s][k] != b[s][k]}
        return out | {"status": "mismatch", "message": f"TOML and header overrides differ: {diff}"}
    p = cfg.parallelism
    world = plan["tp"] * plan["pp"] * plan["dp"] * plan["cp"]
    stage = "ParallelDims"
    try:
        dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                            ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world)
        stage = "Trainer batch checks"
        batch_degree = dims.dp_replicate * dims.dp_shard
        local, glob = cfg.training.local_batch_size, cfg.training.global_batch_size
        assert glob % (local * batch_degree) == 0, (  # train.py Trainer.__init__
            f"global batch size must be multiple of local batch size times data-parallel degree ({glob} % "
            f"({local} * {batch_degree}) != 0)")
        accumulation = glob // (local * batch_degree)
        out |= {"world_size": world, "gradient_accumulation_steps": accumulation}
        if dims.pp > 1:
            stage = "build_pipeline_schedule batch check"
            if local % p.pipeline_parallel_microbatch_size:
                raise ValueError(f"Batch size {local} must be divisible by microbatch_size "
                                 f"{p.pipeline_parallel_microbatch_size}.")
            out["pp_microbatches"] = local // p.pipeline_parallel_microbatch_size
            stage = "pipeline_llm (split)"
            args = types.SimpleNamespace(n_layers=entry["num_layers"])
            fake_dims = types.SimpleNamespace(pp=dims.pp, get_mesh=lambda name: None)
            parts = SPLIT(None, fake_dims, cfg, None, args, None, None)
            ranks = [sum(sum(m.startswith("layers.") for m in parts[s]) for s in range(r, len(parts), dims.pp))
                     for r in range(dims.pp)]
            names = [m for part in parts for m in part]
            want = [f"layers.{i}" for i in range(entry["num_layers"])]
            assert sorted(n for n in names if n.startswith("layers.")) == sorted(want), "layers lost or repeated"
            out |= {"torchtitan_stage_layers": ranks, "virtual_stages": len(parts)}
            want = entry.get("stage_layers") or plan.get("stage_layers")
            if want is not None and ranks != want:
                return out | {"status": "mismatch", "message": f"torchtitan builds {ranks} layers per rank, the plan "
                              f"costs {want}"}
            if len(parts) != dims.pp * plan["interleave"]:
                return out | {"status": "mismatch", "message": f"torchtitan makes {len(parts)} virtual stages, the "
                              f"plan {dims.pp} × {plan['interleave']}"}
    except Exception as e:
        return out | {"status": "rejected", "stage": stage, "message": _error(e)}
    if accumulation * (out.get("pp_microbatches") or 1) * plan["microbatch_size"] * batch_degree != \
            plan["global_batch"] or batch_degree * plan["cp"] * plan["tp"] * plan["pp"] != world:
        return out | {"status": "mismatch", "message": "batch or degrees differ from the plan"}
    return out | {"status": "accepted"}


def main() -> None:
    run(check, "torchtitan", _error)


if __name__ == "__main__":
    main()
