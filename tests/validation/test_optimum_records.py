"""The "optimum" validation group's records: each published run reaches the cost model with the stack its publisher
ran (recipe, container, launch line), on its own GPU's preset, at the layout it printed."""

import json
from dataclasses import replace

import pytest

from shardplan.validation.optimum import (
    OptimumRun,
    load_records_tuned,
    parse_run,
    tuned_record,
)
from shardplan.validation.runs import load_records


def test_gb200_256_gpus_run_as_four_nvlink_domains_of_64() -> None:
    """Megatron-Bridge's launcher puts 256 GPUs (64 trays of 4) in segments of 16 trays: 4 domains of 64."""
    run = parse_run(tuned_record("mbridge-25.11-qwen3-235b-a22b-256gpu-gb200-bf16"))
    assert isinstance(run, OptimumRun)
    assert run.system.name == "gb200-nvl72" and run.system.gpus_per_node == 64 and run.gpus == 256
    assert run.layout.ep == 32 and run.layout.pp == 8


def test_moe_shape_is_the_catalog_model_of_exactly_that_shape() -> None:
    rec = tuned_record("mbridge-25.11-gpt-oss-120b-64gpu-gb200-bf16")
    run = parse_run(rec)
    assert isinstance(run, OptimumRun) and run.model.name == "gpt-oss-120b"
    odd = json.loads(json.dumps(rec))
    odd["model"]["hf_or_shape"]["num_experts"] = 64  # no catalog model has this shape: not evaluated
    assert parse_run(odd) == "model GPT OSS 120B is not in the catalog"


def test_expert_tp_folds_to_what_divides_the_ranks() -> None:
    """Qwen3-235B on 256 H100 at TP2 PP8 EP32: etp·ep must divide tp·dp = 32, so etp = 1 (Megatron-Bridge's
    qwen3_moe recipe sets expert_tensor_parallel_size = 1)."""
    run = parse_run(tuned_record("mbridge-26.04.01-qwen3-235b-a22b-256gpu-h100-fp8"))
    assert isinstance(run, OptimumRun) and (run.layout.tp, run.layout.ep, run.layout.etp) == (2, 32, 1)


def test_only_runs_with_missing_physics_are_left_out() -> None:
    """Every tuned run parses but the ten whose GPU (500 W H100 variants) or model (Nemotron 3 Super's
    LatentMoE) the catalogs lack, each with its reason."""
    left = {r["id"]: why for r in load_records_tuned() if isinstance(why := parse_run(r), str)}
    assert len(left) == 10
    assert sum("H100" in why and "no preset" in why for why in left.values()) == 9
    assert [k for k, why in left.items() if "LatentMoE" in why] == ["automodel-nemotron-v3-super-120b-64gpu-bf16"]


def test_stack_software_follows_the_recorded_container() -> None:
    """Transformer Engine prefers cuDNN attention on Hopper from v1.8 (first in NeMo 24.07 containers): a NeMo
    24.03 record runs flash-attn 2, a 24.09 one cuDNN; torchtitan runs flash-attn 2 and no userbuffers; a NeMo
    config with ``ub_tp_comm_overlap false`` keeps the share rule."""
    from shardplan.hardware.spec import AttentionKernel
    from shardplan.validation.stacks import stack_attention, stack_tp_overlap

    def rec(container: str, notes: list[str] | None = None, title: str = "NeMo") -> dict:
        return {"source": {"title": title, "url": "", "container_or_version": container}, "notes": notes or []}

    assert stack_attention(rec("NeMo24.03.01.framework")) == AttentionKernel.FLASH2
    assert stack_attention(rec("nvcr.io/nvidia/nemo:24.09")) == AttentionKernel.CUDNN
    assert stack_attention(rec("", title="torchtitan benchmarks")) == AttentionKernel.FLASH2
    assert stack_tp_overlap(rec("nemo:24.09")) == "userbuffers"
    assert stack_tp_overlap(rec("nemo:24.09", ["ub_tp_comm_overlap false."])) == "share"
    assert stack_tp_overlap(rec("", title="torchtitan benchmarks")) == "share"


def test_interleaved_sends_overlap_where_the_launcher_turns_it_on() -> None:
    """NeMo's perf configs and Megatron-Bridge run ``overlap_p2p_comm`` with interleaving; torchtitan, llm-foundry
    and AutoModel have no such flag. A Megatron-Bridge interleaved run's pipeline sends then cost only their fill and
    drain: the same layout with blocking sends is slower by exactly the sends the overlap hides."""
    import dataclasses

    from shardplan.costmodel.training.evaluate import estimate_training
    from shardplan.validation.stacks import stack_p2p_overlap

    def rec(title: str) -> dict:
        return {"source": {"title": title, "url": "", "container_or_version": ""}, "notes": []}

    assert stack_p2p_overlap(rec("NeMo Framework performance benchmarks"))
    assert stack_p2p_overlap(rec("NVIDIA Megatron-Bridge performance summary"))
    assert not stack_p2p_overlap(rec("torchtitan benchmarks"))
    assert not stack_p2p_overlap(rec("MosaicML llm-foundry, MPT Training Benchmarks"))
    assert not stack_p2p_overlap(rec("NeMo AutoModel performance summary"))
    assert not stack_p2p_overlap(rec("The Llama 3 Herd of Models (Llama Team, AI @ Meta), arXiv 2407.21783"))
    for record in load_records_tuned():  # every interleaved record of an NVIDIA stack overlaps (URLs name llama3.1)
        if (record["parallel"].get("vp") or 1) > 1 and not record["id"].startswith(("automodel", "llama3-paper")):
            assert stack_p2p_overlap(record), record["id"]
    run = parse_run(tuned_record("mbridge-26.04.01-llama3-70b-64gpu-h100-fp8"))
    assert isinstance(run, OptimumRun) and run.layout.interleave > 1 and run.system.software.overlap_p2p_comm
    over = estimate_training(run.model, run.system, run.gpus, run.work, run.layout).metrics
    blocking = dataclasses.replace(run, system=run.system.model_copy(update={"software": run.system.software.model_copy(
        update={"overlap_p2p_comm": False})}))
    block = estimate_training(blocking.model, blocking.system, blocking.gpus, blocking.work, blocking.layout).metrics
    assert block.step_time_s > over.step_time_s
    assert block.pp_exposed_s > over.pp_exposed_s


def test_moe_recipe_settings_reach_the_stack() -> None:
    """Megatron-Bridge v0.1.0rc4 ran DeepSeek-V3 on H100 with DeepEP, the combined-1F1B all-to-all overlap and
    recompute_modules ['mla_up_proj', 'mlp'] (scripts/performance/run_script.py); a record without settings keeps
    Megatron-Core's defaults."""
    run = parse_run(tuned_record("mbridge-25.09-deepseek-v3-1024gpu-h100-fp8"))
    assert isinstance(run, OptimumRun)
    sw = run.system.software
    assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.ep_delay_wgrad) == ("deepep", True, True)
    assert str(run.layout.recompute) == "selective" and run.layout.recompute_modules == ("mla_up_proj", "mlp")
    # the Qwen3-30B-A3B H100 card's recipe overlaps without delaying the weight gradients (qwen3_moe.py:41-42)
    card = parse_run(tuned_record("mbcard-qwen3-30b-a3b-16gpu-h100-bf16-perf"))
    assert isinstance(card, OptimumRun)
    assert (card.system.software.ep_comm_overlap, card.system.software.ep_delay_wgrad) == (True, False)
    plain = parse_run(tuned_record("mbridge-25.09-qwen3-235b-a22b-256gpu-h100-fp8"))
    assert isinstance(plain, OptimumRun)
    sw = plain.system.software
    assert (sw.ep_dispatcher, sw.ep_comm_overlap, plain.layout.recompute_modules) == ("alltoall", False, None)


def test_a_table_row_runs_the_recipe_of_the_release_that_wrote_it() -> None:
    """DeepSeek-V3 MXFP8 on 256 B200: the 26.04 table's PP 16, EP 8 row is v0.4.0's recipe (HybridEP, no overlap,
    recompute mla_up_proj; layout_map (16, 1): embedding + 4 layers, 14 × 4, 1 layer + MTP + loss); the 26.04.01 row's
    PP 8, V 2, EP 32 is v0.4.2's DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (DeepEP, moe_a2a_overlap with delayed
    weight gradients, recompute mla_up_proj and mlp; pp_layout 'Et*4|(t*4|)*14tmL': 8 layers a rank, 5 on the last)."""
    old = parse_run(tuned_record("mbridge-26.04-deepseekv3-256gpu-b200-mxfp8"))
    new = parse_run(tuned_record("mbridge-26.04.01-deepseekv3-256gpu-b200-mxfp8"))
    assert isinstance(old, OptimumRun) and isinstance(new, OptimumRun)
    assert (old.layout.pp, old.layout.ep, old.layout.interleave, old.stage_layers) == (16, 8, 1, [4] * 15 + [1])
    assert (old.system.software.ep_comm_overlap, old.layout.recompute_modules) == (False, ("mla_up_proj",))
    assert (new.layout.pp, new.layout.ep, new.layout.interleave, new.stage_layers) == (8, 32, 2, [8] * 7 + [5])
    sw = new.system.software
    assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.ep_delay_wgrad) == ("deepep", True, True)
    assert set(new.layout.recompute_modules or ()) == {"mla_up_proj", "mlp"}
    assert old.measured_tokens_per_s_per_gpu == 2815 and new.measured_tokens_per_s_per_gpu == 3328


def test_the_26_06_b300_rows_run_their_release_recipes() -> None:
    """Megatron-Bridge v0.5.0 (26.06) moved the B300 Qwen3-30B-A3B MXFP8 recipe to the model card's knobs (HybridEP
    with the all-to-all overlapped and weight gradients delayed, full-iteration CUDA graphs with an expert capacity
    factor: no host sync), while its gpt-oss-120b B300 recipe (EP 8, MBS 4, HybridEP, TE graphs of attention and
    router only) stays eager in 26.04.01 (BF16) and 26.06 (MXFP8): the dropless sync stays and nothing overlaps."""
    qwen_old = parse_run(tuned_record("mbridge-26.04.01-qwen3-30b-a3b-8gpu-b300-mxfp8"))
    qwen = parse_run(tuned_record("mbridge-26.06-qwen3-30b-a3b-8gpu-b300-mxfp8"))
    assert isinstance(qwen_old, OptimumRun) and isinstance(qwen, OptimumRun)
    assert qwen.system.name == "dgx-b300" and (qwen.layout.ep, qwen.layout.microbatch) == (8, 8)
    sw = qwen.system.software
    assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.ep_delay_wgrad, sw.moe_host_sync) == ("deepep", True, True, False)
    assert (qwen_old.system.software.ep_comm_overlap, qwen_old.system.software.moe_host_sync) == (False, True)
    assert (qwen_old.measured_tokens_per_s_per_gpu, qwen.measured_tokens_per_s_per_gpu) == (30720, 40769)
    for rid, dtype, measured in (("mbridge-26.04.01-gpt-oss-120b-64gpu-b300-bf16", "bf16", 15232),
                                 ("mbridge-26.06-gpt-oss-120b-64gpu-b300-mxfp8", "fp8", 18534)):
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and run.system.name == "dgx-b300" and run.work.dtype == dtype
        assert (run.layout.ep, run.layout.microbatch, run.layout.recompute_modules) == (8, 4, None)
        assert (run.system.software.ep_dispatcher, run.system.software.ep_comm_overlap) == ("deepep", False)
        assert run.system.software.moe_host_sync and run.measured_tokens_per_s_per_gpu == measured


def test_the_model_zoo_2026_rows_run_their_launch_lines() -> None:
    """Megatron-MoE-ModelZoo@e865051's Qwen3-235B-A22B rows beyond its H100 table: GB200 BF16 (EP 8, PP 8), GB200
    MXFP8 at 128k (TP 4, CP 4, EP 32, VPP 12), GB300 MXFP8 (EP 64, no pipeline; and the earlier EP 32, PP 4, MBS 2
    row of 020b813, NVIDIA's report's 974) and the H100 launch script's 320 TFLOP/s. Each launch line's knobs
    (sbatch_benchmarking.sh: --tp-comm-overlap for BF16 only, A2A_OVERLAP=1 adds --delay-wgrad-compute, TE graphs of
    router/preprocess only keep the dropless sync); tokens/s from the TFLOP/s at Megatron-LM's 148.0 (4k) and 734.7
    (128k) GFLOP per token."""
    expect = {  # id: (system, gpus, dtype, tp, pp, cp, ep, vpp, overlap, tp method, TFLOP/s, GFLOP per token)
        "mzoo-qwen3-235b-a22b-256gpu-gb200-bf16-ep8": ("gb200-nvl72", 256, "bf16", 1, 8, 1, 8, 1, False,
                                                       "userbuffers", 750, 148.0),
        "mzoo-qwen3-235b-a22b-128gpu-gb200-mxfp8-seq128k": ("gb200-nvl72", 128, "fp8", 4, 4, 4, 32, 12, False,
                                                            "share", 1150, 734.7),
        "mzoo-qwen3-235b-a22b-64gpu-gb300-mxfp8-ep64": ("gb300-nvl72", 64, "fp8", 1, 1, 1, 64, 1, True,
                                                        "userbuffers", 1055, 148.0),
        "mzoo-qwen3-235b-a22b-256gpu-gb300-mxfp8-ep32": ("gb300-nvl72", 256, "fp8", 1, 4, 1, 32, 1, False,
                                                         "userbuffers", 974, 148.0),
        "mzoo-qwen3-235b-a22b-256gpu-h100-bf16-ep32-2026": ("dgx-h100", 256, "bf16", 2, 8, 1, 32, 4, True,
                                                            "userbuffers", 320, 148.0),
    }
    for rid, (system, gpus, dtype, tp, pp, cp, ep, vpp, overlap, method, tflops, gflop) in expect.items():
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and (run.system.name, run.gpus, run.work.dtype) == (system, gpus, dtype)
        lay, sw = run.layout, run.system.software
        assert (lay.tp, lay.pp, lay.cp, lay.ep, lay.interleave) == (tp, pp, cp, ep, vpp)
        assert lay.microbatch == (2 if rid.endswith("gb300-mxfp8-ep32") else 1)
        assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.ep_delay_wgrad) == ("deepep", overlap, overlap)
        assert sw.moe_host_sync and sw.tp_overlap_method == method
        assert run.measured_tokens_per_s_per_gpu == pytest.approx(tflops * 1e3 / gflop, abs=0.06)
        assert sw.fp8_scaling == ("mxfp8" if dtype == "fp8" else "current")


def test_the_model_zoo_mixtral_row_is_its_script_and_runtime_table() -> None:
    """Mixtral 8x22B on 128 H100 (Megatron-MoE-ModelZoo run_mixtral_8x22B.sh, 'around 465 TFLOPS' with forced
    balancing): runtime.conf's TP 2 PP 8 EP 8 VPP 7, MBS 1, GBS 256; NCCL all-to-all dispatcher, dropless; bf16 with
    --tp-comm-overlap. Tokens/s from Megatron-LM's FLOP count by hand: per layer 6(h(q+2kv) + qh) + 6qs + 18hF·topk,
    plus 6hV."""
    h, q, kv, s, f, topk, layers, vocab = 6144, 6144, 1024, 4096, 16384, 2, 56, 32000
    flop = layers * (6 * (h * (q + 2 * kv) + q * h) + 6 * q * s + 18 * h * f * topk) + 6 * h * vocab
    run = parse_run(tuned_record("mzoo-mixtral-8x22b-128gpu-h100-bf16"))
    assert isinstance(run, OptimumRun) and (run.system.name, run.gpus, run.work.dtype) == ("dgx-h100", 128, "bf16")
    assert run.model.moe is not None and (run.model.moe.num_experts, run.model.moe.experts_per_token) == (8, 2)
    lay, sw = run.layout, run.system.software
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.interleave, lay.microbatch) == (2, 8, 8, 8, 7, 1)
    assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.moe_host_sync, sw.tp_overlap_method) == (
        "alltoall", False, True, "userbuffers")
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(465e12 / flop, abs=0.06)


def test_the_nemotron_3_nano_blackwell_rows_run_the_tables_recipe() -> None:
    """Nemotron 3 Nano on 8 B300 and 8 GB200 (26.06) and 8 B200 (26.04.01), MXFP8: BASE_NEMOTRON_3_NANO_CONFIG
    (EP 8, TP 1, HybridEP, TE graphs of attention, Mamba, router and preprocess only: the dropless sync stays) with
    MBS 4 on B300 and 2 on the others; bf16 gradient reduction, forced balancing."""
    for rid, system, mb, measured in (("mbridge-26.06-nemotron3-nano-8gpu-b300-mxfp8", "dgx-b300", 4, 37316),
                                      ("mbridge-26.06-nemotron3-nano-8gpu-gb200-mxfp8", "gb200-nvl72", 2, 33522),
                                      ("mbridge-26.04.01-nemotron3-nano-8gpu-b200-mxfp8", "dgx-b200", 2, 32768)):
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and (run.system.name, run.gpus, run.work.dtype) == (system, 8, "fp8")
        lay, sw = run.layout, run.system.software
        assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.microbatch, lay.recompute_modules) == (1, 1, 8, 8, mb, None)
        assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.moe_host_sync, sw.fp8_scaling) == (
            "deepep", False, True, "mxfp8")
        assert run.work.global_batch == 512 and run.measured_tokens_per_s_per_gpu == measured


def test_the_26_08_rows_run_their_release_recipes() -> None:
    """Megatron-Bridge's 26.08 table (docs/performance-summary.md at v0.6.0), MXFP8 on GB200/GB300: each row parses
    to the printed layout, global batch and tokens/s, on the table's system, with the v0.6.0 recipe's dispatcher and
    overlap (full-iteration graphs, sync-free, except Nemotron 3 Nano's eager dispatch)."""
    rows = {  # id: (system, gpus, tp, pp, vp, ep, mb, gbs, tokens/s, overlapped)
        "mbridge-26.08-deepseekv3-256gpu-gb300-mxfp8": ("gb300-nvl72", 256, 1, 2, 8, 32, 1, 4096, 6288, True),
        "mbridge-26.08-deepseekv3-256gpu-gb200-mxfp8": ("gb200-nvl72", 256, 1, 4, 4, 64, 1, 4096, 4912, True),
        "mbridge-26.08-gpt-oss-120b-64gpu-gb300-mxfp8": ("gb300-nvl72", 64, 1, 1, 1, 16, 4, 1280, 33024, True),
        "mbridge-26.08-gpt-oss-120b-64gpu-gb200-mxfp8": ("gb200-nvl72", 64, 1, 1, 1, 64, 4, 1280, 28672, True),
        "mbridge-26.08-qwen3-30b-a3b-8gpu-gb300-mxfp8": ("gb300-nvl72", 8, 1, 1, 1, 8, 8, 512, 44544, True),
        "mbridge-26.08-qwen3-30b-a3b-8gpu-gb200-mxfp8": ("gb200-nvl72", 8, 1, 1, 1, 8, 4, 512, 39936, True),
        "mbridge-26.08-qwen3-235b-a22b-256gpu-gb300-mxfp8": ("gb300-nvl72", 256, 1, 4, 12, 32, 2, 8192, 8816, True),
        "mbridge-26.08-qwen3-235b-a22b-256gpu-gb200-mxfp8": ("gb200-nvl72", 256, 1, 8, 3, 32, 1, 8192, 7280, True),
        "mbridge-26.08-nemotron3-nano-8gpu-gb300-mxfp8": ("gb300-nvl72", 8, 1, 1, 1, 8, 4, 512, 39936, False),
    }
    for rid, (system, gpus, tp, pp, vp, ep, mb, gbs, measured, overlapped) in rows.items():
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and (run.system.name, run.gpus, run.work.dtype) == (system, gpus, "fp8"), rid
        lay, sw = run.layout, run.system.software
        assert (lay.tp, lay.pp, lay.interleave, lay.ep, lay.microbatch) == (tp, pp, vp, ep, mb), rid
        assert (sw.ep_dispatcher, sw.ep_comm_overlap, sw.moe_host_sync, sw.fp8_scaling) == (
            "deepep", overlapped, not overlapped, "mxfp8"), rid
        assert run.work.global_batch == gbs and run.measured_tokens_per_s_per_gpu == measured, rid


def test_mlperf_mi355x_runs_are_evaluated_on_their_own_gpu() -> None:
    """MLPerf Training v5.1 llama31_8b on 8× MI355X (AMD, Dell, Supermicro, GigaComputing): TP1 PP1 DP8, microbatch 2,
    global batch 32, sequence 8192, fp8; measured 29.8k–31.4k tokens/s per GPU (median tracked throughput of the
    result logs). The model, on the MI355X's datasheet peaks with the MI325X's measured fractions, lands within 15%."""
    from shardplan.costmodel.training.evaluate import estimate_training

    for rid in ("mlperf-v5.1-amd-llama3.1-8b-8gpu-mi355x-fp8", "mlperf-v5.1-dell-llama3.1-8b-8gpu-mi355x-fp8"):
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and run.system.name == "mi355x-8" and run.work.dtype == "fp8"
        assert (run.layout.tp, run.layout.pp, run.layout.dp, run.layout.microbatch) == (1, 1, 8, 2)
        met = estimate_training(run.model, run.system, run.gpus, run.work, run.layout).metrics
        assert abs(met.tokens_per_s / run.gpus / run.measured_tokens_per_s_per_gpu - 1) < 0.15


def test_mlperf_llama31_8b_runs_parse_to_their_configs_and_logs() -> None:
    """MLPerf Training v5.1 llama31_8b beyond the MI355X (mlcommons/training_results_v5.1@441d65f): each run's layout,
    global batch and precision as its config_*.sh and MLLOG keys give them, on its own GPU's preset; tokens/s from
    the median logged step time (NVIDIA's code) or throughput (AMD's), × 8192 per sample."""
    rows = {  # id: (system, gpus, tp, cp, dp, mb, gbs, dtype, tokens/s)
        "mlperf-v5.1-nvidia-llama3.1-8b-8gpu-gb200-fp4": ("gb200-nvl72", 8, 1, 1, 8, 2, 16, "fp4", 40386),
        "mlperf-v5.1-nvidia-llama3.1-8b-512gpu-gb200-fp8": ("gb200-nvl72", 512, 2, 4, 64, 1, 64, "fp8", 11524),
        "mlperf-v5.1-nvidia-llama3.1-8b-72gpu-gb300-fp8": ("gb300-nvl72", 72, 1, 2, 36, 1, 36, "fp8", 27701),
        "mlperf-v5.1-dell-llama3.1-8b-8gpu-b300-fp8": ("dgx-b300", 8, 1, 1, 8, 2, 16, "fp8", 29902),
        "mlperf-v5.1-amd-llama3.1-8b-8gpu-mi350x-fp8": ("mi350x-8", 8, 1, 1, 8, 2, 32, "fp8", 25499),
        "mlperf-v5.1-hpe-llama3.1-8b-64gpu-h200-fp8": ("hgx-h200", 64, 1, 2, 32, 1, 32, "fp8", 11604),
        "mlperf-v5.1-university-of-florida-llama3.1-8b-256gpu-b200-fp8": ("dgx-b200", 256, 1, 2, 128, 1, 128, "fp8",
                                                                           18538),
    }
    for rid, (system, gpus, tp, cp, dp, mb, gbs, dtype, measured) in rows.items():
        run = parse_run(tuned_record(rid))
        assert isinstance(run, OptimumRun) and (run.system.name, run.gpus, run.work.dtype) == (system, gpus, dtype), rid
        lay = run.layout
        assert (lay.tp, lay.pp, lay.cp, lay.dp, lay.microbatch) == (tp, 1, cp, dp, mb), rid
        assert (run.work.seq_len, run.work.global_batch) == (8192, gbs), rid
        assert run.measured_tokens_per_s_per_gpu == measured, rid


@pytest.mark.parametrize("rid", ["dgxc-v25.01-nemotron-4-340b-128gpu-h100-bf16",
                                 "nemo-24.07-nemotron-340b-128gpu-h100-fp8"])
def test_nemotron4_340b_recipe_optimizer_in_bf16_fits_its_published_layout(rid: str) -> None:
    """The DGX Cloud Nemotron-4 340B recipe runs NeMo's distributed Adam with ``dtype: bf16`` and
    ``grad_sync_dtype: bf16`` (nemotron4-340b-synth.yaml @ 143b90dd), as NeMo 24.07's launcher config did
    (NeMo-Framework-Launcher tag 24.07, conf/training/nemotron/nemotron_340b.yaml): bf16 moments and no fp32 master
    (NeMo stores none where the optimizer dtype is the model's), a bf16 gradient buffer. By hand, per parameter on a
    GPU of TP 8, PP 8, DP 2: weights 2 B, gradients 2 B, moments 4 B / DP 2 = 2 B, so the three are equal; with
    Megatron's defaults (fp32 gradients, 12 B of state) the published layout would not fit an 80 GB H100, which it
    ran on. Under fp8 (16-bit primary weights) Transformer Engine keeps each layer weight's fp8 and transposed copies
    as well, 2 B more per layer parameter (memory.cached_weight_bytes): Nemotron-4 340B's layer (hidden 18432, 96
    query and 8 KV heads of 192, squared-ReLU FFN 73728, two LayerNorm1p with biases) holds 3,454,009,344 linear
    weights ÷ TP 8 plus 73,728 norm parameters, 12 layers on the first stage."""
    from shardplan.costmodel.training.evaluate import estimate_training

    rec = tuned_record(rid)
    run = parse_run(rec)
    assert isinstance(run, OptimumRun)
    assert run.work.grad_dtype == "bf16" and run.work.optimizer_bytes_per_param == 4
    rep = estimate_training(run.model, run.system, run.gpus, run.work, run.layout)
    first = rep.stages[0]
    cached = 2 * 12 * (3_454_009_344 // 8 + 73_728) if run.work.dtype == "fp8" else 0
    assert first.weights_bytes - cached == first.gradients_bytes == first.optimizer_bytes
    assert rep.status == "feasible" and rep.memory.total_bytes <= rep.memory.capacity_bytes
    megatron = run.work.model_copy(update={"grad_dtype": "fp32", "optimizer_bytes_per_param": None})
    over = estimate_training(run.model, run.system, run.gpus, megatron, run.layout)
    assert over.memory.total_bytes > over.memory.capacity_bytes


def test_recipe_activation_offload_reaches_the_published_layout() -> None:
    """Megatron-Bridge's GB200 Llama 3 70B FP8 recipe (v0.4.0 LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2) offloads the
    activations of 40 of the 80 layers to the Grace host (``cpu_offloading_num_layers``): the record says so, the
    layout carries it (0.5), and with it the published FSDP layout at microbatch 2 fits the GPU it ran on (without it
    the model holds every layer's activations on the GPU, over 185 GB)."""
    from shardplan.costmodel.training.evaluate import estimate_training

    rid = "mbridge-26.04.01-llama3-70b-64gpu-gb200-fp8"
    rec = next(r for r in load_records("optimum_runs")["runs"] if r["id"] == rid)
    run = parse_run(rec)
    assert isinstance(run, OptimumRun) and run.layout.offload_activations == 0.5
    rep = estimate_training(run.model, run.system, run.gpus, run.work, run.layout)
    assert rep.status == "feasible" and rep.memory.cpu_bytes > 0
    kept = estimate_training(run.model, run.system, run.gpus, run.work, replace(run.layout, offload_activations=0.0))
    assert kept.status == "infeasible"


def test_the_qwen3_30b_dropless_regression_is_the_publishers_own_report() -> None:
    """Megatron-Bridge issue #1998 reports 25.11's dropless Qwen3-30B on H100 at half of 25.09's token-drop rate: the
    record says so, and the two records (the same parallel layout; 25.09 token-drop with an inferred fp8 recipe)
    show the factor of two it reports."""
    recs = {r["id"]: r for r in load_records_tuned()}
    run = parse_run(recs["mbridge-25.11-qwen3-30b-a3b-16gpu-h100-fp8cs"])
    assert isinstance(run, OptimumRun)
    assert run.known_regression == "https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/1998"
    before = recs["mbridge-25.09-qwen3-30b-a3b-16gpu-h100-fp8"]
    assert before["parallel"] == {**before["parallel"], **{k: recs[run.id]["parallel"][k] for k in
                                                           ("tp", "pp", "ep", "vp", "microbatch")}}
    ratio = before["metrics"]["tokens_per_s_per_gpu"] / run.measured_tokens_per_s_per_gpu
    assert 1.9 < ratio < 2.1
    assert all(r.get("known_regression") is None for rid, r in recs.items() if rid != run.id)


def test_gpt_oss_h100_record_runs_the_release_recipes_microbatch() -> None:
    """Megatron-Bridge 25.11's H100 gpt-oss-120b row prints MBS 4 / GA 2, the Blackwell rows' values (DP 64 × 4 × 2 =
    512), which at its PP 4 (DP 16) make 128 sequences, not its 512; the release recipe (v0.2.0) keeps the base's
    micro_batch_size=1, GA 32. The record carries the recipe's, and the published layout then fits (at MBS 4 the
    model put it at 94 GiB)."""
    from shardplan.costmodel.training.evaluate import estimate_training

    rec = tuned_record("mbridge-25.11-gpt-oss-120b-64gpu-h100-bf16")
    p = rec["parallel"]
    assert p["dp"] * p["microbatch"] * p["grad_accum"] == rec["workload"]["global_batch_sequences"]
    run = parse_run(rec)
    assert isinstance(run, OptimumRun) and run.layout.microbatch == 1
    mem = estimate_training(run.model, run.system, run.gpus, run.work, run.layout).memory
    assert mem.total_bytes <= mem.capacity_bytes - mem.headroom_bytes


def test_the_model_zoo_qwen3_next_run_is_its_launch_line() -> None:
    """Megatron-MoE-ModelZoo's Qwen3-Next-80B-A3B on 128 H100 (best_practice/qwen3/run_next_80b.sh: PP 4, VPP 3, TP 1,
    EP 32, GBS 256, selective recompute of moe_act, shared_experts, layernorm; 2.2 s a step), priced at its layout
    in `modern`: its Gated DeltaNet layers reach the Gated DeltaNet core at FLA's measured times."""
    from shardplan.validation.runs import load_records, modern_setup

    (rec,) = [r for r in load_records("modern_training_runs") if r["id"] == "mzoo-qwen3-next-80b-a3b-128gpu-h100-bf16"]
    setup = modern_setup(rec)
    assert setup is not None
    model, system, n, work, lay, _quantity, measured = setup
    assert (model.name, system.name, n) == ("qwen3-next-80b-a3b", "dgx-h100", 128)
    assert (lay.tp, lay.pp, lay.interleave, lay.ep, lay.dp, lay.microbatch) == (1, 4, 3, 32, 32, 1)
    assert lay.recompute_modules == ("layernorm", "moe_act", "shared_experts")
    assert work.global_batch * work.seq_len / n / 2.2 == pytest.approx(measured, abs=0.1)
