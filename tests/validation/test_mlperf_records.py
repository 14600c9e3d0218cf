"""MLPerf Training records (GPT-3 175B v3.0/v4.0/v4.1, Llama 3.1 405B v5.0/v5.1): they parse into the layout of the
submission's config file, and their measured throughput agrees with independent numbers from the same logs and NVIDIA's
tables."""

import pytest

from shardplan.models import get_model
from shardplan.validation.optimum import OptimumRun, parse_run, tuned_record
from shardplan.validation.runs import load_records, modern_setup

_BY_ID = {r["id"]: r for r in load_records("modern_training_runs")}

# (TP, PP, CP, VP, MICRO_BATCH_SIZE) as the cited config_*.sh sets them, DP = GPUs / (TP·PP·CP), GBS as logged.
_CONFIG = {
    # training_results_v3.0 NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_64x8x128x4x8_mbs1.sh and
    # ..._96x8x128x4x8_mbs1.sh (MBS 1, MINIBS 128) with config_common.sh INTERLEAVED_PIPELINE=12
    "mlperf-v3.0-gpt3-175b-512gpu-h100-fp8": ((4, 8, 1, 12, 1), 16, 2048, "dgx-h100"),
    "mlperf-v3.0-gpt3-175b-768gpu-h100-fp8": ((4, 8, 1, 12, 1), 24, 3072, "dgx-h100"),
    # training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/config_DGXH100_64x8x128x4x8_mbs2.sh
    "mlperf-v4.0-gpt3-175b-512gpu-h100-fp8": ((4, 8, 1, 4, 2), 16, 2304, "dgx-h100"),
    # ... config_DGXH100_1344x8x6x4x6_mbs1_cg.sh (TP 4, PP 6, INTERLEAVED_PIPELINE 8, MBS 1, MINIBS 6)
    "mlperf-v4.0-gpt3-175b-10752gpu-h100-fp8": ((4, 6, 1, 8, 1), 448, 2688, "dgx-h100"),
    # training_results_v4.1 .../eos_n32_ngc24.09_nemo/config_DGXH100_32x8x256x4x8_mbs2.sh
    "mlperf-v4.1-gpt3-175b-256gpu-h100-fp8": ((4, 8, 1, 6, 2), 8, 2048, "dgx-h100"),
    # ... eos_n64_ngc24.09_nemo/config_DGXH100_64x8x128x4x8_mbs2.sh
    "mlperf-v4.1-gpt3-175b-512gpu-h100-fp8": ((4, 8, 1, 6, 2), 16, 2048, "dgx-h100"),
    # ... b200_n8_preview_nemo/config_DGXB200_8x8x1024x4x8_mbs2_cg.sh
    "mlperf-v4.1-gpt3-175b-64gpu-b200-fp8": ((4, 8, 1, 6, 2), 2, 2048, "dgx-b200"),
    # training_results_v5.0 NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/
    # config_DGXH100_64x8x288xtp8pp8cp2.sh
    "mlperf-v5.0-llama3.1-405b-512gpu-h100-fp8": ((8, 8, 2, 8, 1), 4, 1152, "dgx-h100"),
    # ... tyche_ngpu256_ngc25.04_nemo/config_GB200_64x4x112xtp4pp8cp2_cg.sh
    "mlperf-v5.0-llama3.1-405b-256gpu-gb200-fp8": ((4, 8, 2, 8, 1), 4, 448, "gb200-nvl72"),
    # ... tyche_ngpu512_ngc25.04_nemo/config_GB200_128x4x112xtp4pp8cp2_cg_dplast.sh
    "mlperf-v5.0-llama3.1-405b-512gpu-gb200-fp8": ((4, 8, 2, 8, 1), 8, 896, "gb200-nvl72"),
    # Nebius/benchmarks/llama31_405b/implementations/nebius_soperator_8xH200_n64_ngc25.01_nemo/
    # config_DGXH200_64x8x144xtp4pp8cp2.sh, and n128 .../config_DGXH200_128x8x72xtp4pp8cp2.sh
    "mlperf-v5.0-llama3.1-405b-512gpu-h200-fp8": ((4, 8, 2, 8, 1), 8, 1152, "hgx-h200"),
    "mlperf-v5.0-llama3.1-405b-1024gpu-h200-fp8": ((4, 8, 2, 8, 1), 16, 1152, "hgx-h200"),
    # training_results_v5.1 NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.09_nemo/
    # config_GB200_128x4x144xtp4pp8cp2_cg_fp4.sh (NVFP4),
    # theia_ngpu512_ngc25.09_nemo/config_GB300_128x4x72xtp2pp8cp2_cg_fp4.sh,
    # hsg_ngpu2560/config_GB200_640x4x24xtp4pp8cp2_cg_fp4.sh, hsg_ngpu5120/config_GB200_1280x4x16xtp4pp8cp2_cg_fp4.sh
    "mlperf-v5.1-llama3.1-405b-512gpu-gb200-fp4": ((4, 8, 2, 8, 1), 8, 1152, "gb200-nvl72"),
    "mlperf-v5.1-llama3.1-405b-512gpu-gb300-fp4": ((2, 8, 2, 8, 1), 16, 1152, "gb300-nvl72"),
    "mlperf-v5.1-llama3.1-405b-2560gpu-gb200-fp4": ((4, 8, 2, 8, 1), 40, 960, "gb200-nvl72"),
    "mlperf-v5.1-llama3.1-405b-5120gpu-gb200-fp4": ((4, 8, 2, 8, 1), 80, 1280, "gb200-nvl72"),
}
_FP4 = {"mlperf-v5.1-llama3.1-405b-512gpu-gb200-fp4", "mlperf-v5.1-llama3.1-405b-512gpu-gb300-fp4",
        "mlperf-v5.1-llama3.1-405b-2560gpu-gb200-fp4", "mlperf-v5.1-llama3.1-405b-5120gpu-gb200-fp4"}


def test_every_mlperf_record_is_checked_here() -> None:
    assert {i for i in _BY_ID if i.startswith("mlperf-")} == set(_CONFIG)


@pytest.mark.parametrize("rid", sorted(_CONFIG))
def test_optimum_parses_the_submission_config_layout(rid: str) -> None:
    (tp, pp, cp, vp, mbs), dp, gbs, system = _CONFIG[rid]
    rec = tuned_record(rid)  # named in optimum_runs.json already_in_modern
    run = parse_run(rec)
    assert isinstance(run, OptimumRun)
    lay = run.layout
    assert (lay.tp, lay.pp, lay.cp, lay.interleave, lay.microbatch, lay.dp) == (tp, pp, cp, vp, mbs, dp)
    assert lay.sequence_parallel and lay.zero_stage == 1 and str(lay.recompute) == "none"
    assert run.work.global_batch == gbs and run.work.dtype == ("fp4" if rid in _FP4 else "fp8")
    assert run.system.name.startswith(system)
    # Apex DistributedFusedAdam grad_sync_dtype bf16 (GPT-3), Megatron DDP grad_reduce_in_fp32=False (Llama 3.1)
    assert run.work.grad_reduce_dtype == "bf16"
    # the logged gradient_accumulation_steps closes the batch: GA · MBS · DP = GBS
    assert rec["parallel"]["grad_accum"] * mbs * dp == gbs


@pytest.mark.parametrize("rid", sorted(_CONFIG))
def test_modern_group_runs_the_same_layout(rid: str) -> None:
    (tp, pp, cp, vp, mbs), dp, _, system = _CONFIG[rid]
    setup = modern_setup(_BY_ID[rid])
    assert setup is not None
    _, sys_spec, n, _, lay, quantity, _ = setup
    assert (lay.tp, lay.pp, lay.cp, lay.interleave, lay.microbatch, lay.dp) == (tp, pp, cp, vp, mbs, dp)
    assert dp * tp * pp * cp == n
    assert sys_spec.name.startswith(system) and quantity == "tokens_per_s_per_gpu"
    # TP_COMM_OVERLAP=False in the v5.1 NVFP4 configs (config_common_fp4.sh): no userbuffers for those
    assert sys_spec.software.tp_overlap_method == ("share" if rid in _FP4 else "userbuffers")


def test_mlperf_405b_uses_the_mixtral_vocabulary() -> None:
    """The benchmark's README: Llama 3.1 405B with the Mixtral 8x22B tokenizer (V = 32768) instead of Llama 3's."""
    run = parse_run(_BY_ID["mlperf-v5.0-llama3.1-405b-512gpu-h100-fp8"])
    base = get_model("llama-3.1-405b")
    assert isinstance(run, OptimumRun) and run.model.vocab_size == 32768 and base.vocab_size == 128256
    assert (run.model.num_layers, run.model.hidden_size, run.model.ffn_hidden_size) == (
        base.num_layers, base.hidden_size, base.ffn_hidden_size)


def test_405b_step_median_agrees_with_the_logged_samples_per_second() -> None:
    """Two keys of the same logs: the record's tokens/s (median of tracked_stats train_step_time) and the block-level
    tracked_stats 'throughput' of eos-dfw_n64_ngc25.01_nemo result_0..2 (20.855, 20.831, 20.845 samples/s of 8192
    tokens; median 20.845) agree within 0.5%."""
    measured = _BY_ID["mlperf-v5.0-llama3.1-405b-512gpu-h100-fp8"]["metrics"]["tokens_per_s_per_gpu"]
    assert abs(measured / (20.845 * 8192 / 512) - 1) < 0.005


def test_405b_model_flops_match_the_submission_constant() -> None:
    """config_common_405b.sh (v5.1) sets MODEL_TFLOP_PER_SAMPLE=21508 for an 8192-token sample; NVIDIA's FLOP
    convention (source_flops_per_token: attention non-causal, logits once) on the record's model gives the same
    within 0.5% (the constant itself matches Llama 3's vocabulary, 21507.5; the Mixtral one is 0.36% lower): the
    catalog shape (126 layers, h 16384, FFN 53248, GQA 128/8) is the benchmark's."""
    from shardplan.validation.optimum import source_flops_per_token

    run = parse_run(_BY_ID["mlperf-v5.1-llama3.1-405b-512gpu-gb200-fp4"])
    assert isinstance(run, OptimumRun)
    assert abs(source_flops_per_token(run.model, 8192) * 8192 / 1e12 / 21508 - 1) < 0.005


def test_gpt3_matches_nemo_table_for_the_same_layout() -> None:
    """MLPerf v4.1 on 512 H100 (TP 4, PP 8, VP 6, MBS 2, GBS 2048; NeMo 24.09) and NeMo's published 24.07 table row
    with the same layout and batch (825 tokens/s per GPU) are within 5% of each other."""
    mlperf = _BY_ID["mlperf-v4.1-gpt3-175b-512gpu-h100-fp8"]
    table = _BY_ID["nemo-24.07-gpt3-175b-512gpu-h100-fp8"]
    assert (table["parallel"]["tp"], table["parallel"]["pp"], table["parallel"]["vp"],
            table["parallel"]["microbatch"], table["workload"]["global_batch_sequences"]) == (4, 8, 6, 2, 2048)
    ratio = mlperf["metrics"]["tokens_per_s_per_gpu"] / table["metrics"]["tokens_per_s_per_gpu"]
    assert 1.0 < ratio < 1.05


def test_megatron_gradient_buffer_takes_the_reduction_dtype() -> None:
    """Megatron-Core's DDP keeps its gradient buffer in fp32 only with ``grad_reduce_in_fp32`` (else the parameters'
    bf16): NVIDIA's MLPerf v5.1 Llama 3.1 405B on GB300 sets it False (pretrain.py), so its TP 2 / PP 8 layout holds
    bf16 gradients, 2 B per parameter like its weights, and fits the 288 GB GPU it ran on (with fp32 gradients the
    model would put it over); another stack's reduction dtype stays the reduction only. Its weights are 16-bit
    (FP8_PARAM_GATHER=False in config_common_fp4.sh), so beside them Transformer Engine keeps each layer weight's
    NVFP4 row- and column-wise copies, 2 × 0.5625 B (memory.cached_weight_bytes): Llama 3.1 405B's layer holds
    3,187,671,040 linear weights (hidden 16384, 8 KV heads of 128, FFN 53248) ÷ TP 2 plus two 16384-wide norms, 15
    layers on the first stage."""
    from shardplan.costmodel.training.evaluate import estimate_training

    rec = tuned_record("mlperf-v5.1-llama3.1-405b-512gpu-gb300-fp4")
    run = parse_run(rec)
    assert isinstance(run, OptimumRun) and run.work.grad_dtype == "bf16"
    rep = estimate_training(run.model, run.system, run.gpus, run.work, run.layout)
    cached = 2 * 0.5625 * 15 * (3_187_671_040 // 2 + 2 * 16384)
    assert rep.stages[0].gradients_bytes == pytest.approx(rep.stages[0].weights_bytes - cached, rel=1e-12)
    assert rep.memory.total_bytes <= rep.memory.capacity_bytes
    # a record whose fp32 default would hide the rule: llm-foundry reduces in bf16 here and keeps its fp32 gradients
    mpt = parse_run(tuned_record("llmfoundry-mpt-70b-64gpu-seq2048-a100-bf16"))
    assert isinstance(mpt, OptimumRun) and mpt.work.grad_dtype == "fp32" and mpt.work.grad_reduce_dtype == "bf16"
    fp32 = run.work.model_copy(update={"grad_dtype": "fp32", "grad_reduce_dtype": "fp32"})
    over = estimate_training(run.model, run.system, run.gpus, fp32, run.layout)
    assert over.memory.total_bytes > over.memory.capacity_bytes  # with fp32 gradients it would not fit
