
"""Golden: KV-cache token slots of the vLLM paper's Table 1 (Kwon et al. 2023), within 10 %."""

from __future__ import annotations

import pytest

from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
from shardplan.costmodel.serving.report import estimate_inference
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation.runs import load_records

RECORDS = load_records("inference_runs")  # vLLM paper Table 1, shipped in shardplan/data
SETUP = {"vllm-paper-OPT-13B": ("opt-13b", "dgx-a100-40gb", 1), "vllm-paper-OPT-66B": ("opt-66b", "dgx-a100-40gb", 4),
         "vllm-paper-OPT-175B": ("opt-175b", "dgx-a100-80gb", 8)}


@pytest.mark.parametrize("record", RECORDS, ids=[r["id"] for r in RECORDS])
def test_vllm_table1_kv_slots(record: dict) -> None:
    name, system, tp = SETUP[record["id"]]
    rep = estimate_inference(get_model(name), get_system(system), tp, InferWorkload(prompt_len=512, gen_len=128),
                             InferLayout(tp=tp, batch=1))
    assert rep.memory.kv_cache_tokens == pytest.approx(record["metrics"]["max_kv_cache_token_slots"], rel=0.10)
    # the paper's parameter sizes (GB as printed) within 10 % too
    total_weights = rep.memory.weights_bytes * tp
    assert total_weights / 1e9 == pytest.approx(record["metrics"]["parameter_memory_gb"], rel=0.10)
