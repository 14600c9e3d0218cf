"""``estimate_inference``: validation errors, infeasible results with reasons and fixes, SLO reporting."""

from __future__ import annotations

import pytest

from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
from shardplan.costmodel.serving.report import estimate_inference
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

W = InferWorkload(prompt_len=2048, gen_len=256)


def _est(model: str, gpus: int, lay: InferLayout, **kw):
    return estimate_inference(get_model(model), get_system("dgx-h100"), gpus, W, lay, **kw)


@pytest.mark.parametrize(("model", "gpus", "lay", "field"), [
    ("llama-3.1-70b", 3, InferLayout(tp=3, replicas=1), "tp"),  # 3 does not divide 64 heads
    ("llama-3.1-70b", 8, InferLayout(tp=4, replicas=1), "tp"),  # 4 GPUs of 8
    ("llama-3.1-70b", 8, InferLayout(tp=8, ep=2), "ep"),  # dense model
    ("mixtral-8x7b", 8, InferLayout(tp=2, replicas=4, ep=3), "ep"),
    ("llama-3.1-8b", 1, InferLayout(batch=0), "batch"),
])
def test_bad_layouts_name_the_field(model: str, gpus: int, lay: InferLayout, field: str) -> None:
    with pytest.raises(ShardplanError) as e:
        _est(model, gpus, lay)
    assert e.value.field == field


def test_batch_over_the_kv_pool_is_infeasible_with_fixes() -> None:
    rep = _est("llama-3.1-70b", 4, InferLayout(tp=4, batch=1000))
    assert rep.status == "infeasible"
    assert rep.reason.startswith("KV cache: batch 1000")
    assert rep.suggestions[0].startswith(f"--batch {rep.metrics.max_batch_size}") or any(
        s.startswith("--batch") for s in rep.suggestions)


def test_weights_over_memory_is_infeasible() -> None:
    rep = _est("llama-3.1-405b", 1, InferLayout(tp=1, batch=1))
    assert rep.status == "infeasible"
    assert rep.reason.startswith("GPU memory")
    assert rep.memory.kv_cache_tokens == 0


def test_max_batch_is_tight() -> None:
    rep = _est("llama-3.1-70b", 4, InferLayout(tp=4), max_batch=True)
    b = rep.plan.batch_size
    assert rep.status == "feasible" and b == rep.metrics.max_batch_size > 1
    assert _est("llama-3.1-70b", 4, InferLayout(tp=4, batch=b)).status == "feasible"
    assert _est("llama-3.1-70b", 4, InferLayout(tp=4, batch=b + 1)).status == "infeasible"


def test_slo_is_reported_not_enforced() -> None:
    rep = _est("llama-3.1-8b", 1, InferLayout(batch=8), max_tpot_s=1e-4)
    assert rep.status == "feasible" and rep.slo is not None and rep.slo.met is False
