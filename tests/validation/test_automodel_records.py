"""NeMo AutoModel's MoE benchmark runs as its source builds them: parameters and Adam moments in bf16 with no fp32
master, gradients reduced in fp32 (components/moe/parallelizer.py) and kept in bf16, and its round-robin gate."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run

AUTOMODEL_MOE = [r for r in load_records_tuned() if r["id"].startswith("automodel-") and "llama" not in r["id"]]


def test_every_automodel_moe_record_trains_in_bf16_without_a_master() -> None:
    ran = 0
    for rec in AUTOMODEL_MOE:
        assert rec["software"]["moe_balanced_routing"] is True
        run = parse_run(rec)
        if not isinstance(run, OptimumRun):
            continue  # Nemotron 3 Super: its LatentMoE layers are not in the catalog
        ran += 1
        w = run.work
        assert (w.grad_dtype, w.grad_reduce_dtype, w.optimizer_state_bytes) == ("bf16", "fp32", 4.0)
    assert ran == 7


def test_nemotron_nano_memory_by_hand() -> None:
    """Under ZeRO-3 over 8 ranks with EP 8, every parameter a GPU keeps is sharded alike: bf16 weights (2 B), bf16
    gradients (2 B) and the two bf16 Adam moments (4 B), so the optimizer holds twice the weights' bytes (an fp32
    master and moments would hold six times). The published layout, which ran on 80 GB H100s, now fits."""
    rec = next(r for r in AUTOMODEL_MOE if r["id"] == "automodel-nemotron-v3-nano-30b-8gpu-bf16")
    run = parse_run(rec)
    assert isinstance(run, OptimumRun)
    rep = estimate_training(run.model, run.system, run.gpus, run.work, run.layout)
    st = rep.stages[0]
    assert st.gradients_bytes == pytest.approx(st.weights_bytes, rel=1e-9)
    assert st.optimizer_bytes == pytest.approx(2 * st.weights_bytes, rel=1e-9)
    assert rep.memory.total_bytes <= rep.memory.capacity_bytes


def test_the_free_plan_keeps_what_a_record_states() -> None:
    """A record that states a software field its framework also fixes keeps its own value in the free plan, which
    applies the framework (``validation.stacks.stack_stated``, ``frameworks.framework_system``): here an AutoModel MoE
    record restated with the alltoall dispatcher, where AutoModel's own default is DeepEP."""
    import copy

    from shardplan.costmodel.training.frameworks import framework_system

    rec = copy.deepcopy(next(r for r in AUTOMODEL_MOE if r["id"] == "automodel-qwen3-30b-a3b-8gpu-bf16"))
    rec["software"]["ep_dispatcher"] = "alltoall"
    run = parse_run(rec)
    assert isinstance(run, OptimumRun)
    assert run.system.software.ep_dispatcher == "alltoall"
    assert framework_system(run.system, run.framework, run.model).software.ep_dispatcher == "alltoall"
    unstated = run.system.model_copy(update={"software": run.system.software.model_copy()})
    unstated.software._stated = frozenset()
    assert framework_system(unstated, run.framework, run.model).software.ep_dispatcher == "deepep"
