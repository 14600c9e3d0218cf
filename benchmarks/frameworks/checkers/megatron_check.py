"""Megatron-LM's own argument code on shardplan's Megatron exports (runs inside the megatron environment, with
Megatron-LM's sources on PYTHONPATH; stdin: the manifest entries, stdout: one JSON line of results).

Per export, with the environment variables the file's launch line sets: ``parse_args()`` on
``pretrain_gpt.py`` plus the arguments the file's header leaves to the user
(data, tokenizer, optimizer, iterations: ``USER_ARGS``), with ``WORLD_SIZE`` = the plan's GPU count and
``RANK`` = 0 as torchrun would set them; ``validate_args``; then ``core_transformer_config_from_args``, whose
``TransformerConfig.__post_init__`` validates the pipeline layout, recompute and MoE settings. The layers each
pipeline rank builds are read back from Megatron's ``PipelineParallelLayerLayout`` (or its even split) and
compared with the plan's ``stage_layers``. No GPU: ``torch.cuda.get_device_capability`` answers (9, 0), an
H100, where ``validate_args`` asks it (grouped GEMM, fp8).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import types

import torch
from common import framework_error, run

USER_ARGS = ["--train-iters", "100", "--lr", "1e-4", "--min-lr", "1e-5", "--lr-decay-style", "cosine",
             "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256"]
# No GPU here: the device queries validate_args makes answer as the H100 the plans were made for.
H100 = types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30,
                             multi_processor_count=132)
TE_VERSION = "2.14.0"  # stand-in: the newest version transformer_config.py asks for (is_te_min_version("2.14.0"))
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.get_device_properties = lambda *a, **k: H100
torch.cuda.get_device_name = lambda *a, **k: H100.name


def _stand_in_transformer_engine() -> None:
    """Transformer Engine builds only against CUDA: its version checks answer TE_VERSION and its fused RoPE
    kernels exist (Megatron-LM runs with TE in practice; nothing here executes a TE kernel)."""
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import transformer_config
    from packaging.version import Version

    transformer_config.is_te_min_version = lambda v, *a, **k: Version(TE_VERSION) >= Version(v)
    transformer_config.get_te_version = lambda: Version(TE_VERSION)
    rope_utils.fused_apply_rotary_pos_emb = rope_utils.fused_apply_rotary_pos_emb or (lambda *a, **k: None)


def _error(e: BaseException) -> str:
    return framework_error(e, ("megatron",), always=True)


def _ranks(args) -> list[int]:
    """Decoder layers per pipeline rank as Megatron builds them."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    pp = args.pipeline_model_parallel_size
    layout = args.pipeline_model_parallel_layout
    if layout is not None:
        if isinstance(layout, str):
            layout = PipelineParallelLayerLayout(layout, pp)
        return [sum(chunk.count(LayerType.decoder) for chunk in layout.layout[r]) for r in range(pp)]
    n, first, last = args.num_layers, args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    if pp == 1:
        return [n]
    middle = n - (first or 0) - (last or 0)
    inner = pp - (first is not None) - (last is not None)
    per = [middle // inner] * inner  # transformer_block.py get_num_layers_to_build: even split of the rest
    return ([first] if first is not None else []) + per + ([last] if last is not None else [])


def check(entry: dict) -> dict:
    plan = entry["plan"]
    with open(entry["path"]) as f:
        text = f.read()
    tokens = shlex.split(" ".join(ln for ln in text.splitlines() if not ln.startswith("#")))
    world = plan["tp"] * plan["pp"] * plan["dp"] * plan["cp"]
    out = {"case": entry["case"], "format": "megatron", "world_size": world}
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    launch = next((ln for ln in text.splitlines() if ln.startswith("#") and "xargs" in ln), "")
    # the environment the header's launch line sets (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1 before xargs)
    os.environ.update(dict(re.findall(r"(\w+)=(\S+) (?=.*xargs)", launch.split("|", 1)[-1])))
    sys.argv = ["pretrain_gpt.py", *tokens, *USER_ARGS]
    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import parse_args, validate_args

    _stand_in_transformer_engine()
    stage = "parse_args"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            args = parse_args()
            stage = "validate_args"
            validate_args(args)
            stage = "TransformerConfig"
            config = core_transformer_config_from_args(args)
    except SystemExit:
        return out | {"status": "rejected", "stage": stage, "message": log.getvalue().strip().splitlines()[-1][:600]}
    except Exception as e:
        return out | {"status": "rejected", "stage": stage, "message": _error(e)}
    ranks = _ranks(config if getattr(config, "pipeline_model_parallel_layout", None) is not None else args)
    out |= {"status": "accepted", "megatron_stage_layers": ranks,
            "virtual_pipeline_size": args.virtual_pipeline_model_parallel_size,
            "data_parallel_size": args.data_parallel_size}
    want = entry.get("stage_layers") or plan.get("stage_layers")
    if want is not None and want != ranks:
        out |= {"status": "mismatch", "message": f"Megatron builds {ranks} layers per rank, the plan costs {want}"}
    elif args.data_parallel_size != plan["dp"]:
        out |= {"status": "mismatch", "message": f"Megatron derives DP={args.data_parallel_size}, plan {plan['dp']}"}
    return out


def main() -> None:
    run(check, "megatron", _error)


if __name__ == "__main__":
    main()
