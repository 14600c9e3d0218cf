"""FlexGen's published policies on its T4 machine (shardplan/data/offload_runs.json): predicted vs measured.

Targets (offload issue): every published prompt-512 policy within 25% of its measurement. FlexGen's own cost
model (experimental/cost_model.py) misses its OPT-175B run by 4.5× and its OPT-6.7B run by 2.4×.
The prompt-256 runs of FlexGen's benchmark suite (uncompressed) must hold the same bound: nothing was fitted
to them. The 4-bit compressed runs are reported by benchmarks/bench_offload.py, not asserted (see RESULTS.md).
"""


import pytest

from shardplan.costmodel.offload.evaluate import estimate_offload
from shardplan.costmodel.offload.policy import OffloadWorkload, default_capacities
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation.runs import flexgen_policy, load_records

RECORDS = load_records("offload_runs")


def predicted(rec: dict) -> float:
    system = get_system("gcp-t4")
    model = get_model(rec["model"]["name"].lower())
    work = OffloadWorkload(prompt_len=rec["workload"]["prompt_len"], gen_len=rec["workload"]["gen_len"])
    return estimate_offload(model, system, work, flexgen_policy(rec, model),
                            default_capacities(system)).metrics.tokens_per_s


def _cases(role: str, compressed: bool) -> list[dict]:
    return [r for r in RECORDS if r["role"] == role and ("compress" in r["parallel"]["system"]) == compressed]


@pytest.mark.parametrize("rec", _cases("target", False), ids=lambda r: r["model"]["name"])
def test_published_prompt_512_policies_within_25_percent(rec: dict) -> None:
    measured = rec["metrics"]["generation_throughput_tok_s"]
    assert predicted(rec) == pytest.approx(measured, rel=0.25)


@pytest.mark.parametrize("rec", [r for r in _cases("context", False) if r["workload"]["prompt_len"] == 256],
                         ids=lambda r: r["model"]["name"])
def test_benchmark_suite_prompt_256_policies_within_25_percent(rec: dict) -> None:
    measured = rec["metrics"]["generation_throughput_tok_s"]
    assert predicted(rec) == pytest.approx(measured, rel=0.25)


def test_better_than_flexgens_own_cost_model() -> None:
    """FlexGen's LP model is 4.5× off on OPT-175B and 2.4× off on OPT-6.7B; ours stays within ±25% on all three."""
    for rec in _cases("target", False):
        ratio = predicted(rec) / rec["metrics"]["generation_throughput_tok_s"]
        assert 0.75 <= ratio <= 1.25
    assert len(_cases("target", False)) == 3
