"""``validate --group moe-natural``: MoE training with a learned router early in training, against the cost model.

The cost model prices dropless routing as random per token (Megatron's ``moe_router_force_load_balancing``, which
the performance recipes set): the busiest EP rank carries ``core.routing.ep_imbalance`` times the mean. A learned
router on real data, early in training, loads some experts far more. The functional runs of Megatron-Bridge's model
verification cards (``data/natural_routing_runs.json``) ran so, with per-step NaN and large-gradient checks and
logging as well; the group shows their gap to the model on the published layouts. It is not a target the model is
fitted to.
"""

from __future__ import annotations

from typing import Any

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.validation.optimum import OptimumRun, parse_run
from shardplan.validation.runs import Case, load_records


def natural_routing_cases() -> list[Case]:
    out = []
    data: Any = load_records("natural_routing_runs")
    for record in data["runs"]:
        run = parse_run(record)
        if not isinstance(run, OptimumRun):
            continue

        def predict(run: OptimumRun = run) -> float:
            rep = estimate_training(run.model, run.system, run.gpus, run.work, run.layout)
            return rep.metrics.tokens_per_s / run.gpus

        out.append(Case("moe-natural", run.id, "tokens_per_s_per_gpu", run.measured_tokens_per_s_per_gpu, predict))
    return out
