"""Megatron-LM arguments: every flag exists in Megatron-LM (with the right arity and choices), goldens, layouts."""

from __future__ import annotations

import dataclasses
import re

import pytest
from export_plans import CORNERS, GPT3, LLAMA70, check_golden, load, target

from shardplan.cli.export import export_train
from shardplan.cli.export.megatron import moe_layer_freq, pipeline_layout, stage_layers
from shardplan.errors import ShardplanError
from shardplan.models import resolve_model

FLAGS = load("megatron_flags.json")


def parse(text: str) -> list[tuple[str, list[str]]]:
    """(flag, values) per non-comment line, split as `xargs` would."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, *values = line.split()
        out.append((flag, values))
    return out


def test_fixture_names_its_source() -> None:
    assert FLAGS["source"].startswith("https://github.com/NVIDIA/Megatron-LM/blob/" + FLAGS["commit"])
    assert len(FLAGS["flags"]) > 800 and "--tensor-model-parallel-size" in FLAGS["flags"]


def test_every_flag_exists_with_its_arity_and_choices(any_plan) -> None:
    name, t = any_plan
    text = export_train("megatron", t).text
    args = parse(text)
    assert args, name
    for flag, values in args:
        assert flag in FLAGS["flags"], f"{name}: {flag} is not a Megatron-LM argument"
        kind = FLAGS["flags"][flag]
        if kind == "switch":
            assert values == [], f"{flag} takes no value"
        elif kind == "value":
            assert len(values) == 1, f"{flag} takes one value, got {values}"
        else:
            assert values, f"{flag} takes a list"
        for v in values:
            if flag in FLAGS["choices"]:
                assert v in FLAGS["choices"][flag], f"{flag} {v} not in {FLAGS['choices'][flag]}"
    flags = [f for f, _ in args]
    assert len(flags) == len(set(flags)), "a flag is repeated"


@pytest.mark.parametrize("name", ["gpt3-175b", "llama-3.1-70b"])
def test_golden(name: str) -> None:
    t = {"gpt3-175b": GPT3, "llama-3.1-70b": LLAMA70}[name]
    check_golden(f"{name}.megatron.args", export_train("megatron", t, file_name="megatron.args").text)


def test_gpt3_korthikanti_recipe_reads_back() -> None:
    args = dict((f, v[0] if v else None) for f, v in parse(export_train("megatron", GPT3).text))
    assert args["--tensor-model-parallel-size"] == "8" and args["--pipeline-model-parallel-size"] == "8"
    assert args["--num-layers-per-virtual-pipeline-stage"] == "4"  # 96 layers / (8 stages × 3 chunks)
    assert args["--recompute-granularity"] == "selective" and "--sequence-parallel" in args
    assert args["--micro-batch-size"] == "1" and args["--global-batch-size"] == "64"
    assert "--use-distributed-optimizer" not in args and "--overlap-grad-reduce" not in args  # DP = 1


def test_zero2_maps_to_megatron_fsdp_and_says_so() -> None:
    text = export_train("megatron", LLAMA70).text
    args = dict((f, v[0] if v else None) for f, v in parse(text))
    assert args["--data-parallel-sharding-strategy"] == "optim_grads"
    assert "--use-megatron-fsdp" in args and args["--ckpt-format"] == "fsdp_dtensor"
    assert "# ZeRO-2 has no Megatron flag of its own" in text
    assert args["--context-parallel-size"] == "2" and args["--num-query-groups"] == "8"


def test_launch_line_uses_xargs_and_the_file_name() -> None:
    text = export_train("megatron", GPT3, file_name="gpt3.args").text
    assert "grep -v '^#' gpt3.args | CUDA_DEVICE_MAX_CONNECTIONS=1 xargs torchrun --nnodes 8 --nproc-per-node 8" in text


@pytest.mark.parametrize(("layers", "pp"), [(96, 8), (126, 16), (61, 16), (80, 3), (7, 7), (10, 1)])
def test_stage_layers_sum_and_spread(layers: int, pp: int) -> None:
    counts = stage_layers(layers, pp)
    assert sum(counts) == layers and max(counts) - min(counts) <= 1
    if pp > 2 and layers % pp and layers % pp <= pp - 2:
        assert counts[0] == counts[-1] == layers // pp  # the remainder goes to middle stages first


def _megatron_parse_layout(layout: str) -> list[str]:
    """Megatron's PipelineParallelLayerLayout.parse_str_to_list, reduced to strings."""
    s = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), s)
    return s.split("|")


@pytest.mark.parametrize(("layers", "pp", "v"), [(126, 16, 2), (61, 16, 1), (80, 3, 1), (30, 4, 3)])
def test_pipeline_layout_string(layers: int, pp: int, v: int) -> None:
    stages = _megatron_parse_layout(pipeline_layout(layers, pp, v))
    assert len(stages) == pp * v
    assert stages[0].startswith("E") and stages[-1].endswith("L")
    assert sum(s.count("t") for s in stages) == layers
    per_rank = [sum(stages[c * pp + r].count("t") for c in range(v)) for r in range(pp)]
    assert per_rank == stage_layers(layers, pp)


def test_uneven_pipeline_uses_the_layout_flag() -> None:
    args = dict((f, v) for f, v in parse(export_train("megatron", CORNERS["llama-405b-uneven"]).text))
    assert "--pipeline-model-parallel-layout" in args and "--num-layers-per-virtual-pipeline-stage" not in args


def test_moe_layer_pattern_matches_the_model() -> None:
    t = CORNERS["deepseek-v3-ep"]
    pattern = moe_layer_freq(t)
    assert re.fullmatch(r"[,\d\[\]\(\)\+\*]+", pattern)  # what Megatron's _eval_pattern accepts
    layers = eval(pattern)  # the same evaluation Megatron does
    assert len(layers) == t.model.num_layers and sum(layers) == t.model.num_moe_layers and layers[:3] == [0, 0, 0]
    assert moe_layer_freq(CORNERS["mixtral-offload"]) is None


def test_moe_mla_fp8_partial_recompute() -> None:
    args = dict((f, v) for f, v in parse(export_train("megatron", CORNERS["deepseek-v3-ep"]).text))
    assert args["--expert-model-parallel-size"] == ["16"] and args["--moe-shared-expert-intermediate-size"] == ["2048"]
    assert "--multi-latent-attention" in args and args["--fp8-format"] == ["hybrid"]
    assert args["--recompute-method"] == ["block"] and args["--recompute-num-layers"] == ["2"]
    assert "--fp8-param-gather" in args  # fp8 primary weights: no cached fp8 copy beside 16-bit weights


def test_fp8_primary_weights_only_where_priced_and_runnable() -> None:
    """ZeRO-0 cannot run --fp8-param-gather (Megatron asserts the distributed optimizer), nor does a plan priced with
    16-bit primary weights get it: both hold Transformer Engine's cached fp8 copies in their memory instead
    (memory.cached_weight_bytes), so neither writes the flag."""
    base = CORNERS["deepseek-v3-ep"]
    zero0 = dataclasses.replace(base, plan=base.plan.model_copy(update={"zero_stage": 0}))
    sixteen = dataclasses.replace(base, fp8_param_gather=False)
    for t in (zero0, sixteen):
        out = export_train("megatron", t)
        assert "--fp8-param-gather" not in dict(parse(out.text))
        assert not any("fp8" in n and "copy" in n for n in out.notes)


def test_offload_flags() -> None:
    args = dict((f, v) for f, v in parse(export_train("megatron", CORNERS["mixtral-offload"]).text))
    assert {"--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--use-distributed-optimizer"} <= set(args)
    assert args["--optimizer-offload-fraction"] == ["1"] and args["--activation-offload-fraction"] == ["0.5"]


def test_weight_offload_is_refused_naming_the_option() -> None:
    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, dp=8, num_microbatches=1, global_batch=8, zero_stage=1,
               weights=0.5)
    with pytest.raises(ShardplanError, match="offload-weights") as e:
        export_train("megatron", t)
    assert e.value.field == "export"


def test_interleave_with_too_few_microbatches_is_refused() -> None:
    t = target("llama-3.1-8b", num_gpus=8, seq_len=4096, pp=8, num_microbatches=4, global_batch=4, interleave=2)
    with pytest.raises(ShardplanError, match="at least PP=8 microbatches"):
        export_train("megatron", t)


def test_unknown_format_names_the_command_it_belongs_to() -> None:
    with pytest.raises(ShardplanError, match="shardplan infer"):
        export_train("vllm", GPT3)


def test_layout_counts_the_mtp_layers_where_megatron_requires_them() -> None:
    # Megatron's PipelineParallelLayerLayout.validate_layer_layout (commit d98e8a64): the layout holds exactly
    # --mtp-num-layers "m" entries, after every decoder layer, all in the last virtual stage of one rank;
    # the framework check (benchmarks/frameworks) found the layout without them rejected
    # 61 layers on PP 16: an uneven split, so the layout flag is written; the plan priced the checkpoint's MTP layer
    t = dataclasses.replace(CORNERS["deepseek-v3-ep"], mtp_layers=1)
    args = dict((f, v) for f, v in parse(export_train("megatron", t).text))
    assert args["--mtp-num-layers"] == ["1"] and t.model.mtp_layers == 1
    stages = _megatron_parse_layout(args["--pipeline-model-parallel-layout"][0])
    flat = "".join(stages)
    assert flat.count("m") == 1 and flat.count("t") == 61
    assert flat.index("m") > flat.rindex("t") and stages[-1].endswith("mL")
    assert all("m" not in s for s in stages[:-1])
    assert pipeline_layout(4, 2, 1, [2, 2]) == "Et*2|t*2L"  # no MTP: nothing added


def test_mtp_layers_are_written_only_when_the_plan_priced_them() -> None:
    # TrainWorkload.mtp_layers is what the cost model priced; the checkpoint's MTP layer alone is not trained
    out = export_train("megatron", CORNERS["deepseek-v3-ep"])
    flags = dict(parse(out.text))
    assert "--mtp-num-layers" not in flags and "m" not in flags["--pipeline-model-parallel-layout"][0]
    assert any("--mtp-layers 1" in n for n in out.notes)


@pytest.mark.parametrize(("kernel", "backend"), [("flash", "auto"), ("cudnn", "auto"), ("flash2", "flash"),
                                                 ("flash3", "flash"), ("unfused", "unfused")])
def test_attention_backend_is_the_kernel_the_plan_was_costed_with(kernel: str, backend: str) -> None:
    # Megatron-LM enums.py AttnBackend / language_module.py: flash = flash-attn via TE, auto = TE's choice (cuDNN on
    # Hopper+ from TE 1.8); a cuDNN-costed H100 plan must never run Megatron's unfused s² softmax path.
    t = target("llama-3.1-8b", num_gpus=8, seq_len=8192, attention=kernel, hardware="dgx-h100", tp=1, pp=1, dp=8,
               microbatch_size=1, num_microbatches=4, global_batch=32)
    args = export_train("megatron", t).text.split()
    assert args[args.index("--attention-backend") + 1] == backend


def test_a_triton_costed_plan_is_not_exported_to_megatron() -> None:
    """Megatron-LM's --attention-backend has no Triton FlashAttention (llm-foundry's kernel): one clear line, not a
    plan that runs another kernel than the one it was costed with."""
    from shardplan.errors import ShardplanError

    t = target("llama-3.1-8b", num_gpus=8, seq_len=8192, attention="triton", hardware="dgx-h100", tp=1, pp=1, dp=8,
               microbatch_size=1, num_microbatches=4, global_batch=32)
    with pytest.raises(ShardplanError, match="no triton attention backend"):
        export_train("megatron", t)


def test_recompute_modules_are_written_as_megatron_takes_them() -> None:
    """A plan's selective module set becomes ``--recompute-modules`` (a list argument at d98e8a6); Megatron's
    default set (core_attn) writes nothing beyond ``--recompute-granularity selective``."""
    plan = CORNERS["mixtral-offload"].plan.model_copy(update={"recompute_modules": ["core_attn", "layernorm",
                                                                                     "moe_act"]})
    args = dict(parse(export_train("megatron", dataclasses.replace(CORNERS["mixtral-offload"], plan=plan)).text))
    assert args["--recompute-granularity"] == ["selective"]
    assert args["--recompute-modules"] == ["core_attn", "layernorm", "moe_act"]
    assert FLAGS["flags"]["--recompute-modules"] == "list"
    assert "--recompute-modules" not in dict(parse(export_train("megatron", GPT3).text))


@pytest.mark.parametrize(("dispatcher", "overlap", "pp", "v", "want"), [
    ("alltoall", False, 1, 1, (["alltoall"], False)),
    ("deepep", False, 1, 1, (["flex", "deepep"], False)),
    ("deepep", True, 1, 1, (["flex", "deepep"], True)),
    ("alltoall", True, 2, 1, (["alltoall"], False)),  # Megatron needs VPP with PP > 1: the plan priced it exposed
    ("alltoall", True, 2, 2, (["alltoall"], True)),
])
def test_moe_dispatcher_and_overlap_are_the_ones_the_plan_was_costed_with(dispatcher, overlap, pp, v, want) -> None:
    import dataclasses

    t = dataclasses.replace(target("mixtral-8x7b", num_gpus=16, seq_len=4096, hardware="dgx-h100", tp=1, pp=pp,
                                   dp=16 // pp, ep=8 // pp, microbatch_size=1, num_microbatches=8, global_batch=128,
                                   interleave=v), ep_dispatcher=dispatcher, ep_comm_overlap=overlap)
    e = export_train("megatron", t)
    args = [tok for line in e.text.splitlines() if not line.startswith("#") for tok in line.split()]
    disp, over = want
    assert args[args.index("--moe-token-dispatcher-type") + 1] == disp[0]
    if len(disp) > 1:
        assert args[args.index("--moe-flex-dispatcher-backend") + 1] == disp[1]
    assert ("--overlap-moe-expert-parallel-comm" in args) == over
    assert (overlap and not over) == any("overlap-moe-expert-parallel-comm not written" in n for n in e.notes)
    assert "--delay-wgrad-compute" not in args  # costed with Megatron-Core's default: not delayed
    delayed = export_train("megatron", dataclasses.replace(t, ep_delay_wgrad=True))
    d_args = [tok for line in delayed.text.splitlines() if not line.startswith("#") for tok in line.split()]
    assert ("--delay-wgrad-compute" in d_args) == over  # only beside the overlap it was costed with


def test_moe_padding_settings_the_plan_was_costed_with_are_written() -> None:
    """A plan costed with drop-and-pad writes the capacity factor and the pad flag (TransformerConfig
    moe_expert_capacity_factor, moe_pad_expert_input_to_capacity); router padding is written under fp8 only."""
    import dataclasses

    base = target("mixtral-8x7b", num_gpus=16, seq_len=4096, hardware="dgx-h100", tp=1, pp=1, dp=16, ep=8,
                  microbatch_size=1, num_microbatches=8, global_batch=128, interleave=1)

    def args_of(t) -> list[str]:
        text = export_train("megatron", t).text
        return [tok for line in text.splitlines() if not line.startswith("#") for tok in line.split()]

    plain = args_of(base)
    assert "--moe-pad-expert-input-to-capacity" not in plain and "--moe-router-padding-for-quantization" not in plain
    padded = args_of(dataclasses.replace(base, moe_drop_and_pad=True))
    assert "--moe-pad-expert-input-to-capacity" in padded
    assert float(padded[padded.index("--moe-expert-capacity-factor") + 1]) == base.model.moe.capacity_factor
    assert "--moe-router-padding-for-quantization" not in args_of(dataclasses.replace(base, moe_router_padding=True))
    fp8 = dataclasses.replace(base, moe_router_padding=True, dtype="fp8")
    assert "--moe-router-padding-for-quantization" in args_of(fp8)


def test_blocking_pipeline_sends_are_written_when_the_plan_priced_them() -> None:
    """Megatron-LM's CLI overlaps interleaved sends unless told not to (``--no-overlap-p2p-communication``,
    arguments.py@d98e8a6): a plan costed with blocking sends (the 2021 stack's preset) exports the flag, an
    overlapped plan or one without interleaving does not."""
    base = dict(pp=4, num_microbatches=16, global_batch=16, interleave=2)
    blocking = dataclasses.replace(target("llama-3.1-8b", num_gpus=8, seq_len=4096, **base), overlap_p2p_comm=False)
    assert "--no-overlap-p2p-communication" in dict(parse(export_train("megatron", blocking).text))
    overlapped = target("llama-3.1-8b", num_gpus=8, seq_len=4096, **base)
    assert "--no-overlap-p2p-communication" not in dict(parse(export_train("megatron", overlapped).text))
    flat = dataclasses.replace(target("llama-3.1-8b", num_gpus=8, seq_len=4096, pp=4, num_microbatches=16,
                                      global_batch=16), overlap_p2p_comm=False)
    assert "--no-overlap-p2p-communication" not in dict(parse(export_train("megatron", flat).text))


def _args(t) -> list[str]:
    return [tok for line in export_train("megatron", t).text.splitlines() if not line.startswith("#")
            for tok in line.split()]


def test_tp_comm_overlap_is_written_where_the_plan_was_priced_with_userbuffers() -> None:
    """Megatron's --tp-comm-overlap (ModelParallelConfig.tp_comm_overlap, default off) where the plan hid its SP
    collectives with Transformer Engine's userbuffers; a ring-exchange reduce-scatter, which TE's default config does
    not run, is named in a note. The flag and its arity come from the Megatron-LM flag list (megatron_flags.json)."""
    from shardplan.cli.export.base import train_target
    from shardplan.costmodel.training.layout import TrainWorkload
    from shardplan.hardware import get_system

    assert FLAGS["flags"]["--tp-comm-overlap"] == "switch"
    t = dataclasses.replace(LLAMA70, tp_userbuffers=True)
    assert "--tp-comm-overlap" in _args(t) and "--sequence-parallel" in _args(t)
    assert "--tp-comm-overlap" not in _args(LLAMA70)
    ring = export_train("megatron", dataclasses.replace(t, tp_overlap_rs="ring_exchange"))
    assert any("ring_exchange" in n and "--tp-comm-overlap-cfg" in n for n in ring.notes)
    # what train_target reads off the system: on for a Megatron stack, off for MLA, NVFP4 and torchtitan's async TP
    system = get_system("dgx-h100")
    plan = LLAMA70.plan
    work = TrainWorkload(seq_len=8192, global_batch=256)
    assert train_target(plan, model=LLAMA70.model, system=system, num_gpus=64, workload=work).tp_userbuffers
    dsv3 = resolve_model("deepseek-v3")
    assert not train_target(plan, model=dsv3, system=system, num_gpus=64, workload=work).tp_userbuffers
    fp4 = work.model_copy(update={"dtype": "fp4"})
    assert not train_target(plan, model=LLAMA70.model, system=get_system("dgx-b200"), num_gpus=64,
                            workload=fp4).tp_userbuffers
    share = system.model_copy(update={"software": system.software.model_copy(update={"tp_overlap_method": "share"})})
    assert not train_target(plan, model=LLAMA70.model, system=share, num_gpus=64, workload=work).tp_userbuffers
