"""The "optimum" validation group: record parsing, the FLOP convention used to convert published TFLOP/s,
and the planner's optimum against the published layout."""

import json

import pytest

from shardplan.models import get_model
from shardplan.validation.optimum import (
    OptimumRow,
    OptimumRun,
    evaluate_run,
    parse_run,
    source_flops_per_token,
    summarise,
    tuned_record,
)
from shardplan.validation.runs import load_records


def test_source_flops_per_token_is_nvidias_llama_formula() -> None:
    """dgxc-benchmarking README: 12·L·h²·(1 + g/a + s/h) + 18·L·F·h + 6·V·h per token (Llama 3.1 8B, s = 8192)."""
    L, h, a, g, F, V, s = 32, 4096, 32, 8, 14336, 128256, 8192
    expected = 12 * L * h * h * (1 + g / a + s / h) + 18 * L * F * h + 6 * V * h
    assert abs(source_flops_per_token(get_model("llama-3.1-8b"), s) / expected - 1) < 1e-9


def test_dgxc_llama8b_mfu_matches_published_tokens() -> None:
    """The README's 59.37% MFU of 989 TFLOP/s and its 10,152.8 tokens/s per GPU are the same run under that
    convention: converting one into the other lands within 0.5%."""
    rec = next(r for r in load_records("optimum_runs")["runs"] if r["id"] == "dgxc-v25.01-llama-31-8b-8gpu-h100-bf16")
    tflops = rec["metrics"]["mfu"] * 989e12
    tokens = tflops / source_flops_per_token(get_model("llama-3.1-8b"), rec["workload"]["seq_len"])
    assert abs(tokens / rec["metrics"]["tokens_per_s_per_gpu"] - 1) < 0.005


def test_parse_run_keeps_the_published_layout() -> None:
    rec = next(r for r in load_records("optimum_runs")["runs"] if r["id"] == "dgxc-v25.01-llama-31-70b-64gpu-h100-bf16")
    run = parse_run(json.loads(json.dumps(rec)))
    assert isinstance(run, OptimumRun)
    lay = run.layout
    assert (lay.tp, lay.pp, lay.cp, lay.dp, lay.interleave, lay.zero_stage) == (4, 4, 2, 2, 5, 1)
    assert run.work.global_batch == 128 and run.work.seq_len == 8192 and run.gpus == 64


def test_free_plan_is_at_least_as_fast_as_the_published_layout_when_that_fits() -> None:
    """The planner searches a space containing the published layout (TP4 PP4 CP2, interleave 5): where that layout
    fits under the memory headroom the planner keeps, its optimum cannot be slower."""
    from shardplan.costmodel.training.evaluate import estimate_training

    rec = next(r for r in load_records("optimum_runs")["runs"] if r["id"] == "dgxc-v25.01-llama-31-70b-64gpu-h100-bf16")
    run = parse_run(rec)
    assert isinstance(run, OptimumRun)
    mem = estimate_training(run.model, run.system, run.gpus, run.work, run.layout).memory
    assert mem.total_bytes <= mem.capacity_bytes - mem.headroom_bytes
    row = evaluate_run(run)
    assert row.pinned is not None and row.free is not None and row.pinned_fits
    assert row.free >= row.pinned * (1 - 1e-6)


def test_summary_counts_the_band() -> None:
    def row(err: float) -> OptimumRow:
        return OptimumRow(id="x", model="m", gpus=8, hardware="dgx-h100", dtype="bf16", measured=100.0,
                          derived_from_tflops=False, pinned=100 + err, pinned_error_pct=err, pinned_layout="",
                          pinned_fits=True, free=100 + err, free_error_pct=err, free_layout="")

    s = summarise([row(-12.0), row(-10.0), row(0.0), row(15.0), row(16.0)])
    assert s.free_within_band == 3 and abs(s.free_mean_signed_pct - 1.8) < 1e-9
    assert abs(s.pinned_h100_mape_pct - 10.6) < 1e-9


def test_why_faster_names_the_removed_costs_largest_first() -> None:
    from types import SimpleNamespace

    from shardplan.validation.optimum import why_faster

    def metrics(pipeline: float, bubble: float, dp: float) -> SimpleNamespace:
        zero = dict(tp_exposed_s=0.0, cp_exposed_s=0.0, ep_exposed_s=0.0, pp_exposed_s=0.0, zero3_exposed_s=0.0,
                    optimizer_s=0.01, host_sync_s=0.0)
        return SimpleNamespace(pipeline_s=pipeline, bubble_s=bubble, dp_exposed_s=dp, **zero)

    # published: 10 s pipeline of which 1.5 s bubble, 0.4 s DP; free: 8.2 s with 0.2 s bubble, no DP exposure
    text = why_faster(metrics(10.0, 1.5, 0.4), metrics(8.2, 0.2, 0.0))
    assert text == "bubble -1.30 s, compute+recompute -0.50 s, DP sync -0.40 s"
    # with each layout's stages and plan, compute splits: the published run recomputes 1 s per microbatch on its
    # slowest stage over its 4 microbatches (4 s of its 8.5 s compute; the bubble holds the fill and drain); the
    # free plan recomputes nothing but its kernels take 8.0 s against 4.5 s — the saving is removed work
    stage = SimpleNamespace
    pinned = ([stage(fwd_time_s=1.0, bwd_time_s=3.0, recompute_time_s=1.0)],
              SimpleNamespace(num_microbatches=4, pp=2, interleave=1))
    free = ([stage(fwd_time_s=1.0, bwd_time_s=2.0, recompute_time_s=0.0)],
            SimpleNamespace(num_microbatches=4, pp=1, interleave=1))
    text = why_faster(metrics(10.0, 1.5, 0.4), metrics(8.2, 0.2, 0.0), pinned_detail=pinned, free_detail=free)
    assert text == "recompute -4.00 s, bubble -1.30 s, DP sync -0.40 s"
    # two ranks at 3 and 5 s per microbatch (an LM head on the last): the first waits 1 s a microbatch above the
    # mean, 4 s over 4 microbatches; a split that balances them (4 and 4 s) removes that wait, not kernel time
    pinned = ([stage(fwd_time_s=1.0, bwd_time_s=2.0, recompute_time_s=0.0),
               stage(fwd_time_s=1.5, bwd_time_s=3.5, recompute_time_s=0.0)],
              SimpleNamespace(num_microbatches=4, pp=2, interleave=1))
    free = ([stage(fwd_time_s=1.3, bwd_time_s=2.7, recompute_time_s=0.0)] * 2,
            SimpleNamespace(num_microbatches=4, pp=2, interleave=1))
    text = why_faster(metrics(10.0, 1.5, 0.4), metrics(8.2, 0.2, 0.0), pinned_detail=pinned, free_detail=free)
    assert text == "stage imbalance -4.00 s, bubble -1.30 s, DP sync -0.40 s"


def test_a_claim_names_the_memory_it_rests_on() -> None:
    """A free plan faster through removed recompute (or fewer stages) rests on fitting: its explanation gives its
    peak against what it may fill (GPU memory less headroom) and the published layout's peak, by hand here, and on
    MPT-7B at 8k on 8 H100 (llm-foundry's full recompute removed) as the free plan's own memory table gives them."""
    from types import SimpleNamespace

    from shardplan.units import GiB
    from shardplan.validation.optimum import memory_note

    free = SimpleNamespace(total_bytes=60 * GiB, capacity_bytes=80 * GiB, headroom_bytes=8 * GiB)
    assert memory_note(SimpleNamespace(total_bytes=50.5 * GiB), free) == (
        "; peak 60.0 of 72.0 GiB usable (published layout 50.5 GiB)")
    row = evaluate_run(parse_run(tuned_record("llmfoundry-mpt-7b-8gpu-seq8192-h100-bf16")))
    assert row.why_free_faster is not None and row.why_free_faster.startswith("recompute -")
    peak, usable = map(float, row.why_free_faster.split("; peak ")[1].split(" GiB")[0].split(" of "))
    assert peak <= usable  # the free plan fits what it may fill; a 7B model's 8k activations without recompute
    assert peak > 30.0  # (32 layers x 8192 x 4096 x 34 bytes = 34 GiB, Korthikanti et al. 2022 eq. 1) are in it


def test_a_gpu_without_a_preset_is_listed_not_evaluated_on_another_gpu() -> None:
    """torchtitan's Grand Teton H100s (96 GB HBM2e, 500 W) are not the 700 W H100 SXM 80GB of dgx-h100."""
    rec = next(r for r in load_records("modern_training_runs") if r["id"] == "torchtitan-llama3.1-8b-8gpu-fsdp-bf16")
    why = parse_run(rec)
    assert isinstance(why, str) and "Grand Teton H100" in why and "500 W" in why and "no preset" in why


def test_every_catalogued_gpu_name_finds_its_preset() -> None:
    """A held-back record on any GPU the catalog has is evaluated on that GPU's preset (H200 before H20: prefixes)."""
    from shardplan.validation.optimum import _system

    expect = {"H100-SXM-80GB": "dgx-h100", "H200": "hgx-h200", "H20": "hgx-h20", "H800": "dgx-h800", "B300": "dgx-b300",
              "GB300": "gb300-nvl72", "A100-SXM4-40GB": "dgx-a100-40gb", "MI300X": "mi300x-8", "MI325X": "mi325x-8"}
    for gpu, name in expect.items():
        system = _system(gpu)
        assert system is not None and system.name == name, gpu


def test_a_claim_resting_on_the_published_layouts_own_prediction_says_so() -> None:
    """Every free plan more than 15% above a tuned run names why. Where the free plan barely beats the model's own
    prediction of the published layout (Qwen3-30B-A3B fp8cs on 16 H100: that layout is itself predicted far above
    its measurement), the reason is that prediction, with both numbers."""
    row = evaluate_run(parse_run(tuned_record("mbridge-25.11-qwen3-30b-a3b-16gpu-h100-fp8cs")))
    assert row.pinned is not None and row.free is not None and row.free > 1.15 * row.measured
    assert row.free <= 1.15 * row.pinned and row.why_free_faster is not None
    assert f"{100 * (row.pinned / row.measured - 1):+.0f}%" in row.why_free_faster


def test_layout_text_names_per_rank_recompute_uneven_splits_folding_and_offload() -> None:
    """The validate table names a layout in full: a partial recompute count, per-rank counts that differ, an uneven
    pipeline split, folded experts' own TP and offload shares (issue 11: every row names its layout in full)."""
    from shardplan.validation.optimum import layout_text

    assert layout_text(4, 4, 2, 1, 1, 1, 8, "full", 1, rc_layers=[1, 0, 0, 0], stage_layers=[19, 21, 21, 19]) == (
        "TP4 PP4 DP2 CP1 mb1 v8 rc=full:1/0/0/0 Z1 layers=19/21/21/19")
    assert layout_text(4, 4, 2, 1, 1, 1, 8, "full", 1, rc_layers=[19, 21, 21, 19],
                       stage_layers=[19, 21, 21, 19]) == "TP4 PP4 DP2 CP1 mb1 v8 rc=full Z1 layers=19/21/21/19"
    assert layout_text(2, 8, 16, 1, 32, 1, 4, "full", 1, rc_layers=3, etp=1, offload=(0.3, 0.0, 0.1)) == (
        "TP2 PP8 DP16 CP1 EP32 ETP1 mb1 v4 rc=full:3 Z1 off=o30%a10%")
    assert layout_text(1, 4, 2, 1, 1, 1, 1, "full", 1, rc_layers=[20] * 4, stage_layers=[20] * 4) == (
        "TP1 PP4 DP2 CP1 mb1 rc=full Z1")  # every layer recomputed, even split
    assert layout_text(1, 1, 8, 1, 1, 2, 1, "none", 3, offload=(0.001, 0.0, 0.0)) == "TP1 PP1 DP8 CP1 mb2 Z3 off=o0.1%"
    assert layout_text(1, 1, 8, 1, 1, 2, 1, "none", 3) == "TP1 PP1 DP8 CP1 mb2 Z3"


def test_summary_gives_two_target_figures_without_the_publishers_regressions() -> None:
    """A row whose measurement its publisher lists as a software regression counts in the figures over all rows and
    is left out of their "without regressions" twins: by hand, H100 MAPE (10 + 150) / 2 = 80 and 10 without."""
    def row(err: float, regression: str | None = None) -> OptimumRow:
        return OptimumRow(id="x", model="m", gpus=8, hardware="dgx-h100", dtype="bf16", measured=100.0,
                          derived_from_tflops=False, pinned=100 + err, pinned_error_pct=err, pinned_layout="",
                          pinned_fits=True, free=100 + err, free_error_pct=err, free_layout="",
                          known_regression=regression)

    s = summarise([row(-10.0), row(150.0, "https://example.invalid/issue")])
    assert s.regressions == 1
    assert s.pinned_h100_mape_pct == pytest.approx(80.0) and s.free_mean_signed_pct == pytest.approx(70.0)
    assert s.pinned_h100_mape_without_regressions_pct == pytest.approx(10.0)
    assert s.free_mean_signed_without_regressions_pct == pytest.approx(-10.0)


def test_tuned_record_finds_a_modern_run_the_optimum_file_names_and_rejects_an_unknown_id() -> None:
    # lives in modern_training_runs.json and is named in optimum_runs.json's already_in_modern
    rec = tuned_record("automodel-gpt-oss-120b-64gpu-bf16")
    assert rec["parallel"]["ep"] == 64 and rec["metrics"]["tokens_per_s_per_gpu"] == 7626
    assert tuned_record("mbridge-26.04.01-gpt-oss-120b-64gpu-b200-bf16")["parallel"]["ep"] == 8  # optimum_runs.json
    with pytest.raises(KeyError, match="no tuned run 'no-such-run'"):
        tuned_record("no-such-run")


def test_layout_text_names_a_selective_module_set_other_than_megatrons_default() -> None:
    from shardplan.validation.optimum import layout_text

    assert layout_text(1, 1, 16, 1, 8, 1, 1, "selective", 1, rc_modules=("moe", "layernorm")) == (
        "TP1 PP1 DP16 CP1 EP8 mb1 rc=selective[moe+layernorm] Z1")
    # Megatron's default (core_attn alone, or no list) reads as before
    for default in (None, ["core_attn"]):
        assert layout_text(1, 1, 16, 1, 8, 1, 1, "selective", 1, rc_modules=default) == (
            "TP1 PP1 DP16 CP1 EP8 mb1 rc=selective Z1")


def test_the_optimum_row_names_the_published_recipes_recompute_modules() -> None:
    # Megatron-Bridge Nemotron-3 Nano H100 FP8-CS (v0.4.0 NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1):
    # recompute_modules moe, layernorm, core_attn (moe_act inside moe), which the row must show, not bare
    # "rc=selective"; the free plan recomputes another set, and the two strings must differ
    row = evaluate_run(parse_run(tuned_record("mbridge-26.04.01-nemotron3-nano-16gpu-h100-fp8")))
    assert "rc=selective[moe+layernorm+core_attn]" in row.pinned_layout
    assert row.free_layout is not None and row.free_layout != row.pinned_layout
