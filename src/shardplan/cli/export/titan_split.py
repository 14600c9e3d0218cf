"""How torchtitan splits layers over pipeline stages, and the settings that make its split the plan's.

torchtitan (``distributed/pipeline_parallel.py``, ``pipeline_llm`` and ``generate_llm_fqn_per_model_part``, v0.2)
counts the embedding as ``first_stage_less_layers`` layers and the output as ``last_stage_less_layers`` (both 1 by
default), deals ``L + first + last`` "effective layers" evenly over the virtual stages (the remainder to the first
ones) and places virtual stage ``s`` on rank ``s mod pp`` (looped schedules). Left at the defaults, 80 layers on
4 stages become 20/21/20/19, where the cost model splits layers evenly and gives the extras of an uneven split to
the middle stages (``costmodel/stages.py``). ``pipeline_settings`` finds explicit allowances (and
``layers_per_stage`` for interleaved schedules) under which torchtitan's split equals the plan's, and falls back to
the explicit ``module_fqns_per_model_part`` lists when none exists.
"""

from __future__ import annotations

from typing import Any


def plan_layers_per_rank(num_layers: int, pp: int) -> list[int]:
    """Layers on each pipeline rank as the cost model counts them: ``L // pp`` each, extras to middle ranks first,
    then the first rank, then the last (costmodel/stages.py ``stage_shapes``)."""
    if pp == 1:
        return [num_layers]
    base, extra = divmod(num_layers, pp)
    ranks = [base] * pp
    middles = list(range(1, pp - 1))
    for r in middles[:extra]:
        ranks[r] += 1
    spill = max(extra - len(middles), 0)
    ranks[0] += spill >= 1
    ranks[-1] += spill >= 2
    return ranks


def titan_split(num_stages: int, num_layers: int, first_less: int, last_less: int) -> list[int] | None:
    """Transformer layers per virtual stage as ``generate_llm_fqn_per_model_part`` deals them; None where
    torchtitan raises or drops layers."""
    if num_stages == 1:
        return [num_layers]
    effective = num_layers + first_less + last_less
    if num_stages > effective:
        return None
    per, extra = divmod(effective, num_stages)
    if per == 0 or first_less > per or last_less > per:
        return None
    out, current = [], 0
    for s in range(num_stages):
        share = per + (s < extra)
        want = share - first_less if s == 0 else share - last_less if s == num_stages - 1 else share
        take = max(0, min(want, num_layers - current))
        out.append(take)
        current += take
    return out if current == num_layers else None


def per_rank(split: list[int], pp: int) -> list[int]:
    """Layers per rank when virtual stage ``s`` runs on rank ``s mod pp``."""
    return [sum(split[s] for s in range(r, len(split), pp)) for r in range(pp)]


def _matches(ranks: list[int], plan: list[int]) -> bool:
    """Same first and last rank, and the same middle ranks up to order (the plan costs the heaviest middle)."""
    return ranks[0] == plan[0] and ranks[-1] == plan[-1] and sorted(ranks[1:-1]) == sorted(plan[1:-1])


def pipeline_settings(num_layers: int, pp: int, v: int) -> dict[str, Any]:
    """``[parallelism]`` keys under which torchtitan puts the plan's layer counts on every rank, ``v`` chunks each."""
    plan = plan_layers_per_rank(num_layers, pp)
    stages = pp * v
    for first, last in ((1, 1), (0, 0), (1, 0), (0, 1), (2, 2), (2, 0), (0, 2), (2, 1), (1, 2)):
        if v == 1:
            per_stage = None
            split = titan_split(stages, num_layers, first, last)
        else:  # interleaved: pipeline_llm makes ceil((L + first + last) / layers_per_stage) virtual stages
            per_stage = -(-(num_layers + first + last) // stages)
            if -(-(num_layers + first + last) // per_stage) != stages:
                continue
            split = titan_split(stages, num_layers, first, last)
        if split is None or min(split) < 1 or not _matches(per_rank(split, pp), plan):
            continue
        out: dict[str, Any] = {}
        if per_stage is not None:
            out["pipeline_parallel_layers_per_stage"] = per_stage
        return out | {"pipeline_parallel_first_stage_less_layers": first,
                      "pipeline_parallel_last_stage_less_layers": last}
    return {"module_fqns_per_model_part": module_fqns(plan, v)}


def module_fqns(plan: list[int], v: int) -> list[list[str]]:
    """Explicit module names per virtual stage: rank ``r``'s layers in ``v`` near-equal chunks, virtual stage
    ``c·pp + r`` holding chunk ``c`` of rank ``r``, embedding first and norm/output last."""
    pp = len(plan)
    counts = [[n // v + (c < n % v) for c in range(v)] for n in plan]
    out, current = [], 0
    for c in range(v):
        for r in range(pp):
            names = [f"layers.{i}" for i in range(current, current + counts[r][c])]
            current += counts[r][c]
            out.append(names)
    out[0].insert(0, "tok_embeddings")
    out[-1] += ["norm", "output"]
    return out
