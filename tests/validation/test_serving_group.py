"""The ``serving`` validate group: published engine measurements with their sources, run through the planner."""

from __future__ import annotations

import statistics

from shardplan.validation.groups import GROUPS, run_validation
from shardplan.validation.runs import load_records


def test_every_record_cites_its_table_at_a_commit() -> None:
    recs = load_records("serving_runs")
    assert len(recs) == 60
    for r in recs:
        src = r["source"]
        assert src["commit"] in src["url"] and "perf-overview" in src["url"]
        assert r["metrics"]["output_tokens_per_s"] > 0 and r["parallel"]["tp"] in (1, 2, 8)


def test_group_runs_every_case_and_states_its_error() -> None:
    assert "serving" in GROUPS
    rep = run_validation(["serving"])
    rows = [r for r in rep.rows if r.group == "serving"]
    assert all(r.failure is None and r.predicted is not None for r in rows)
    errs = [abs(r.error_pct) for r in rows]
    # where the model stands (README): the single-GPU 8B on H100 within 17%, the group's mean below 25%
    h100_8b = [abs(r.error_pct) for r in rows if r.id.startswith("llama-3.1-8b-h100")]
    assert max(h100_8b) < 17.0
    assert statistics.mean(errs) < 25.0
    assert rep.summary["serving"].ran == 60


def test_latency_records_cite_the_dataset_at_a_commit_and_are_single_request_runs() -> None:
    recs = load_records("serving_latency_runs")
    assert len(recs) == 72 and len({r["id"] for r in recs}) == 72
    assert {r["model"]["name"] for r in recs} == {"llama-3.1-8b", "llama-3.1-70b"}
    assert {r["parallel"]["tp"] for r in recs} == {1, 2, 4, 8}
    for r in recs:
        src = r["source"]
        assert src["commit"] in src["url"] and src["url"].endswith("nim.csv") and src["locator"].startswith("line ")
        assert r["workload"]["concurrency"] == 1 and r["hardware"]["num_gpus"] == r["parallel"]["tp"]
        # a decode step cannot beat streaming the weights once: 16-bit (or FP8) bytes / HBM bandwidth
        params = 8.0e9 if r["model"]["name"] == "llama-3.1-8b" else 70.6e9
        per_param = 1.0 if r["workload"]["dtype"] == "fp8" else 2.0
        hbm = 3.35e12 if r["hardware"]["gpu"] == "H100-SXM" else 2.04e12  # datasheets: H100 SXM, A100 80GB SXM
        assert r["metrics"]["itl_ms"] / 1e3 > params * per_param / r["parallel"]["tp"] / hbm


def test_latency_groups_run_every_case_and_state_where_the_model_stands() -> None:
    """TTFT of compute-bound prompts (≥ 2,000 tokens) within 12% on average; short prompts are under-predicted (a
    per-request time at batch 1 the model lacks: README, 'Serving latency'). TPOT on H100, whose weight-streaming
    GEMMs run at their H200 measurement (``GpuSpec.gemm_stream``), within 8% on average and ±5% signed; on A100
    (not measured: the copy curve) every TPOT is still under-predicted."""
    rep = run_validation(["serving-ttft", "serving-tpot"])
    recs = {r["id"].removeprefix("nim-"): r for r in load_records("serving_latency_runs")}
    for g in ("serving-ttft", "serving-tpot"):
        assert rep.summary[g].ran == 72
        assert all(r.failure is None and r.infeasible is None for r in rep.rows if r.group == g)
    ttft = [r for r in rep.rows if r.group == "serving-ttft"]
    long = [abs(r.error_pct) for r in ttft if recs[r.id]["workload"]["input_len"] >= 2000]
    assert statistics.mean(long) < 12.0
    tpot = [abs(r.error_pct) for r in rep.rows if r.group == "serving-tpot"]
    assert statistics.mean(tpot) < 40.0 and max(tpot) < 65.0
    h100 = [r.error_pct for r in rep.rows if r.group == "serving-tpot" and recs[r.id]["hardware"]["gpu"] == "H100-SXM"]
    a100 = [r.error_pct for r in rep.rows if r.group == "serving-tpot" and recs[r.id]["hardware"]["gpu"] != "H100-SXM"]
    assert len(h100) == 48 and len(a100) == 24
    assert statistics.mean(map(abs, h100)) < 8.0 and abs(statistics.mean(h100)) < 5.0
    assert max(a100) < 0.0
