"""The infeasible-fix search for the smallest GPU count: the memory floor (``fit_bound``) never rejects a layout
that fits, and skipping what it rejects leaves the answer of the brute-force search (every layout of every GPU
count costed in full, ``prune=False``) unchanged."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.fit_bound import may_fit, memory_floor
from shardplan.costmodel.training.layout import Recompute, TrainWorkload
from shardplan.costmodel.training.space import enumerate_layouts
from shardplan.costmodel.training.table import build_train_table
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.training.explain import _min_gpus
from shardplan.planner.training.request import TrainRequest, space_request


def _req(model: str, n: int, seq: int, batch: int, system: str = "dgx-h100", **kw) -> TrainRequest:
    return TrainRequest(model=get_model(model), system=get_system(system), num_gpus=n,
                        workload=TrainWorkload(seq_len=seq, global_batch=batch, **kw.pop("work", {})), **kw)


# Dense, MoE with MLA, sliding-window and tied embeddings, linear attention, chunked attention with MoE every other
# layer, dropout (OPT), fp8, offload off: each a table where some rows fit and some do not.
SOUND = [
    _req("llama-3.1-70b", 8, 32768, 16),
    _req("deepseek-v3", 64, 4096, 256, zero_stage=1, sequence_parallel=True),
    _req("gemma-3-27b", 8, 65536, 8),
    _req("qwen3-next-80b-a3b", 8, 32768, 16),
    _req("llama-4-scout", 8, 8192, 64),
    _req("opt-30b", 8, 8192, 32, work={"dtype": "fp8"}),
    _req("mixtral-8x7b", 16, 8192, 32, offload="off"),
    # fp8 primary weights on Blackwell hold 1 B a layer weight, under the 16 bits the floor's weights count
    _req("llama-3.1-405b", 32, 8192, 64, system="dgx-b200", work={"dtype": "fp8"}),
    _req("qwen3-30b-a3b", 8, 16384, 32, system="dgx-b200", work={"dtype": "fp8", "mtp_layers": 1}),  # MoE, MTP
]


@pytest.mark.parametrize("req", SOUND, ids=lambda r: f"{r.model.name}-{r.num_gpus}")
def test_the_floor_is_below_every_rows_memory_and_keeps_every_row_that_fits(req: TrainRequest) -> None:
    rows = enumerate_layouts(req.model, req.workload, space_request(req)).rows
    offload = req.offload != "off"
    table = build_train_table(req.model, req.system, req.workload, rows, allow_offload=offload)
    gpu_lb, all_lb = memory_floor(req.model, req.system, req.workload, table.rows)
    host_per_gpu = table.cost.host_bytes_per_node / req.system.gpus_per_node
    assert (gpu_lb <= table.cost.peak_memory * (1 + 1e-9)).all()
    assert (all_lb <= (table.cost.peak_memory + host_per_gpu) * (1 + 1e-9)).all()
    keep = may_fit(req.model, req.system, req.workload, table.rows, allow_offload=offload)
    assert table.fits.any() and (~keep).any()  # the case tests something on both sides
    assert not (table.fits & ~keep).any()


INFEASIBLE = [
    _req("llama-3.1-405b", 8, 8192, 64),  # fits on more nodes
    _req("mixtral-8x22b", 1, 32768, 8, offload="off"),  # one GPU; no offload
    _req("llama-3.1-70b", 8, 131072, 8, tp=1),  # a pin kept while GPUs are added
    _req("llama-3.1-8b", 8, 2**20, 8, tp=1, cp=1),  # 1M-token logits on one GPU: no count fits
    _req("qwen3-30b-a3b", 1, 65536, 4, recompute=Recompute.NONE, system="dgx-a100-80gb"),  # recompute pinned
    _req("gemma-3-27b", 1, 131072, 8),  # sliding-window pattern, tied embeddings
]


@pytest.mark.parametrize("req", INFEASIBLE, ids=lambda r: f"{r.model.name}-{r.num_gpus}")
def test_the_pruned_search_finds_what_the_brute_force_search_finds(req: TrainRequest) -> None:
    brute = _min_gpus(req, prune=False)
    assert brute != "time"
    assert _min_gpus(req, prune=True) == brute


def test_the_reported_request_is_answered_with_one_cost_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """deepseek-v3 at 1M tokens on 8 GPUs (issue 15: minutes and gigabytes): every count below 64 GPUs is rejected
    by the memory floor without a cost table; 64 is costed and does not fit (the loss holds the 1M-token sequence's
    logits at 6 B each, bf16 beside fp32: memory.LOSS_BYTES_PER_LOGIT), 128 and then 96 are costed and fit, with
    context parallelism across nodes and a pipeline (TP 4 · CP 8 · PP 3 on 12 nodes): three tables, not one per
    count from 8."""
    import shardplan.costmodel.training.table as table_mod

    built: list[int] = []
    real = table_mod.build_train_table

    def spy(*args: object, **kwargs: object) -> object:
        built.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table_mod, "build_train_table", spy)
    found = _min_gpus(_req("deepseek-v3", 8, 2**20, 10_000_000))
    assert found is not None and found[0] == 96 and "TP=4 PP=3 DP=1 CP=8" in found[1]
    assert len(built) == 3
