"""The exports the framework check runs through each framework's own configuration code.

Each case is one shardplan command; ``formats`` lists the ``--export`` targets it is written for (the planner
constrains a plan to what the target can express, so each format is its own run). The cases cover per-stage
plans (uneven ``plan.stage_layers``, interleaved chunks, ``--pipeline-model-parallel-layout``), ZeRO-1/2/3,
expert, context and sequence parallelism, fp8, CPU offload, and the serving and offload exports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    command: str  # train | infer | offload
    argv: tuple[str, ...]
    formats: tuple[str, ...]
    why: str


def _t(*a: str) -> tuple[str, ...]:
    return a


TRAIN = "train"
CASES: tuple[Case, ...] = (
    Case("llama70b-pp4-perstage", TRAIN,
         _t("-m", "llama-3.1-70b", "-H", "dgx-h100", "-g", "64", "-b", "256", "-s", "8192", "--pp", "4"),
         ("megatron", "torchtitan", "deepspeed"),
         "per-stage plan: uneven stage_layers, interleaved chunks, per-stage recompute, CP 2"),
    Case("llama70b-pp4-uniform", TRAIN,
         _t("-m", "llama-3.1-70b", "-H", "dgx-h100", "-g", "64", "-b", "256", "-s", "8192", "--pp", "4",
            "--uniform-stages"),
         ("megatron", "torchtitan"), "the same request with today's even split (--uniform-stages)"),
    Case("llama405b-pp16", TRAIN,
         _t("-m", "llama-3.1-405b", "-H", "dgx-h100", "-g", "1024", "-b", "512", "-s", "8192", "--pp", "16"),
         ("megatron", "torchtitan"), "126 layers on 16 stages: uneven per-stage split with interleave"),
    Case("llama405b-pp16-v1", TRAIN,
         _t("-m", "llama-3.1-405b", "-H", "dgx-h100", "-g", "1024", "-b", "512", "-s", "8192", "--pp", "16",
            "--interleave", "1"),
         ("megatron", "torchtitan"), "126 layers on 16 stages without interleave (first/last allowances)"),
    Case("gpt3-175b-pp8-v3", TRAIN,
         _t("-m", "gpt3-175b", "-H", "dgx-a100-80gb", "-g", "64", "-b", "64", "-s", "2048", "--tp", "8", "--pp", "8",
            "--interleave", "3", "--microbatch", "1"),
         ("megatron", "torchtitan", "deepspeed"), "Korthikanti et al.'s GPT-3 layout: TP 8, PP 8, 3 chunks"),
    Case("llama8b-zero3", TRAIN,
         _t("-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "8", "-b", "64", "-s", "4096", "--zero", "3", "--tp", "1",
            "--pp", "1"),
         ("megatron", "deepspeed", "torchtitan"), "ZeRO-3 (Megatron-FSDP, DeepSpeed stage 3, FSDP2)"),
    Case("llama70b-zero2-pp", TRAIN,
         _t("-m", "llama-3.1-70b", "-H", "dgx-h100", "-g", "32", "-b", "128", "-s", "4096", "--zero", "2", "--pp",
            "2"),
         ("megatron", "torchtitan", "deepspeed"), "ZeRO-2 with pipeline parallelism"),
    Case("llama8b-cp4-128k", TRAIN,
         _t("-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "16", "-b", "16", "-s", "131072", "--cp", "4"),
         ("megatron", "torchtitan", "deepspeed"), "context parallelism on 128k-token sequences"),
    Case("deepseek-v3-ep8-pp8", TRAIN,
         _t("-m", "deepseek-v3", "-H", "dgx-h100", "-g", "256", "-b", "1024", "-s", "4096", "--pp", "8", "--ep", "8"),
         ("megatron", "torchtitan", "deepspeed"), "MoE with MLA, dense first layers, EP 8, expert TP, PP 8"),
    Case("mixtral-ep4-zero3", TRAIN,
         _t("-m", "mixtral-8x7b", "-H", "dgx-h100", "-g", "16", "-b", "64", "-s", "4096", "--ep", "4", "--zero",
            "3", "--pp", "1"),
         ("megatron", "deepspeed", "torchtitan"), "EP with ZeRO-3 (DeepSpeed refuses the combination)"),
    Case("qwen3-30b-a3b-ep8", TRAIN,
         _t("-m", "qwen3-30b-a3b", "-H", "dgx-h100", "-g", "16", "-b", "128", "-s", "4096", "--ep", "8"),
         ("megatron", "torchtitan", "deepspeed"), "Qwen3 MoE with EP 8"),
    Case("mixtral-recompute-modules", TRAIN,
         _t("-m", "mixtral-8x7b", "-H", "dgx-h100", "-g", "64", "-b", "256", "-s", "4096"),
         ("megatron",), "selective recompute with a planner-chosen module set (--recompute-modules moe_act)"),
    Case("qwen3-30b-deepep-overlap", TRAIN,
         _t("-m", "qwen3-30b-a3b", "-H", "examples/hardware/dgx-h100-deepep.yaml", "-g", "16", "-b", "128", "-s",
            "4096"),
         ("megatron",), "DeepEP flex dispatcher and EP all-to-all overlap from the system's software block"),
    Case("llama8b-fp8-offload", TRAIN,
         _t("-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "2", "-b", "32", "-s", "4096", "--dtype", "fp8",
            "--offload", "on", "--tp", "1", "--pp", "1"),
         ("megatron", "deepspeed", "torchtitan"), "fp8 with CPU offload forced on"),
    Case("llama8b-zero3-offload", TRAIN,
         _t("-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "2", "-b", "32", "-s", "4096", "--zero", "3",
            "--offload", "on", "--tp", "1", "--pp", "1"),
         ("megatron", "deepspeed", "torchtitan"), "ZeRO-3 with part of the optimizer state offloaded to the CPU"),
    Case("llama70b-infer-tp4", "infer",
         _t("-m", "llama-3.1-70b", "-H", "dgx-h100", "-p", "2048", "-n", "256", "-g", "8"),
         ("vllm",), "dense serving, TP over one node"),
    Case("mixtral-infer-ep-fp8kv", "infer",
         _t("-m", "mixtral-8x7b", "-H", "dgx-h100", "-p", "1024", "-n", "256", "-g", "4", "--ep", "4", "--kv-dtype",
            "fp8"),
         ("vllm",), "MoE serving with expert parallelism and an fp8 KV cache"),
    Case("llama70b-infer-pp2", "infer",
         _t("-m", "llama-3.1-70b", "-H", "dgx-a100-80gb", "-p", "1024", "-n", "128", "-g", "8", "--pp", "2"),
         ("vllm",), "pipeline-parallel serving"),
    Case("opt30b-offload", "offload",
         _t("-m", "opt-30b", "-H", "rtx4090-pc", "-p", "512", "-n", "32"), ("flexgen",),
         "OPT-30B on one 24 GB GPU with CPU offload"),
    Case("opt175b-offload", "offload",
         _t("-m", "opt-175b", "-H", "rtx4090-pc", "-p", "512", "-n", "32"), ("flexgen",),
         "OPT-175B with weights on disk"),
)

SUFFIX = {"megatron": "args", "deepspeed": "json", "torchtitan": "toml", "vllm": "sh", "flexgen": "sh"}



@dataclass(frozen=True)
class Control:
    """A deliberately broken copy of one export: the check must not accept it (proof that it can fail)."""

    name: str
    source: str  # "<case>.<format>" of the export it copies
    pattern: str  # a regular expression (multiline) ...
    repl: str  # ... replaced by this (re.sub syntax)
    expect: str  # the status the check must give
    why: str


CONTROLS: tuple[Control, ...] = (
    Control("no-mtp-in-layout", "deepseek-v3-ep8-pp8.megatron", r"mL$", "L", "rejected",
            "the layout without its MTP layer (what shardplan wrote before this check)"),
    Control("titan-default-allowances", "llama70b-pp4-uniform.torchtitan",
            r"^pipeline_parallel_(first|last)_stage_less_layers = \d+\n"
            r"|--parallelism\.pipeline_parallel_(first|last)_stage_less_layers \d+ ?", "", "mismatch",
            "torchtitan's default first/last allowances (1, 1) instead of the exported ones"),
    Control("ds-batch-not-a-product", "llama8b-zero3.deepspeed", r'"train_batch_size": (\d+)',
            r'"train_batch_size": 1\g<1>', "rejected", "a global batch that is not micro × accumulation × DP"),
    Control("flexgen-split-activations", "opt30b-offload.flexgen", r"--percent (\d+) (\d+) (\d+) (\d+) \d+ \d+",
            r"--percent \1 \2 \3 \4 50 50", "rejected", "activations split 50/50 between GPU and CPU"),
)
