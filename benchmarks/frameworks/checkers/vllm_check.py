"""vLLM's own configuration code on shardplan's ``vllm serve`` exports (runs inside the vllm environment; stdin:
the manifest entries, stdout: one JSON line of results).

Per export: the ``vllm`` command-line parser built as ``vllm/entrypoints/cli/main.py`` builds it (the ``serve``
subcommand's ``make_arg_parser``), ``ServeSubcommand.validate`` on the parsed arguments, ``args.model =
args.model_tag`` as ``ServeSubcommand.cmd`` does, ``AsyncEngineArgs.from_cli_args``, then
``create_engine_config()`` with the model read from the real Hugging Face ``config.json`` under
``hf_configs/`` (no network here: the weights and tokenizer are never loaded). There is no GPU: vLLM's CUDA
platform is installed with torch.cuda answering as eight H100s (``_stand_in_h100s``); where that platform
cannot even be imported (its compiled ops link the NVIDIA driver's libcuda), the CPU platform, as ``vllm bench``
falls back to. Where the engine config still needs a real device, the stage reached is reported (``stopped``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex

from common import framework_error, run

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLATFORM: dict[str, str] = {}
GPUS = 8  # one node of H100s, what the serving plans were made for


def _stand_in_h100s() -> None:
    """No GPU here: vLLM's CUDA platform (its non-NVML variant, which asks torch.cuda) is installed as the current
    platform, and torch.cuda answers as GPUS H100s (capability 9.0, 80 GiB). Nothing runs on them."""
    import types

    import torch

    props = types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30,
                                  multi_processor_count=132)
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: GPUS
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.get_device_name = lambda *a, **k: props.name
    from vllm import platforms

    try:
        from vllm.platforms.cuda import NonNvmlCudaPlatform

        platforms.current_platform = NonNvmlCudaPlatform()
    except ImportError as e:  # its compiled ops link libcuda.so.1, the NVIDIA driver
        from vllm.platforms.cpu import CpuPlatform

        PLATFORM["fallback"] = f"CUDA platform not importable ({e}): CpuPlatform, as `vllm bench` falls back to"
        platforms.current_platform = CpuPlatform()
    PLATFORM["name"] = type(platforms.current_platform).__name__


def _error(e: BaseException) -> str:
    return framework_error(e, ("vllm",))


def _parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(subparsers)
    return parser, cmd


def check(entry: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs

    with open(entry["path"]) as f:
        argv = shlex.split(f.read().replace("\\\n", " "))
    out = {"case": entry["case"], "format": "vllm"}
    parser, cmd = _parser()
    stage = "vllm serve argument parser"
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            args = parser.parse_args(argv[1:])
        stage = "ServeSubcommand.validate"
        cmd.validate(args)
        args.model = args.model_tag
        # the model's real config.json from hf_configs/ stands in for the Hub (EngineArgs resolves the model)
        local = os.path.join(HERE, "hf_configs", args.model.split("/")[-1])
        if os.path.exists(os.path.join(local, "config.json")):
            args.model = args.tokenizer = local
            args.skip_tokenizer_init = True
        stage = "EngineArgs.from_cli_args"
        engine_args = AsyncEngineArgs.from_cli_args(args)
        out["parsed"] = {k: getattr(engine_args, k) for k in (
            "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
            "max_num_seqs", "max_num_batched_tokens", "max_model_len", "gpu_memory_utilization", "kv_cache_dtype",
            "block_size", "dtype", "quantization")}
        if args.model != local:
            return out | {"status": "accepted", "stage": stage, "message": f"no config.json for {args.model} "
                          "here: create_engine_config not run"}
        stage = "create_engine_config"
        with contextlib.redirect_stdout(io.StringIO()):
            config = engine_args.create_engine_config()
        pc, cc = config.parallel_config, config.cache_config
        out["engine"] = {"tensor_parallel_size": pc.tensor_parallel_size,
                         "pipeline_parallel_size": pc.pipeline_parallel_size,
                         "world_size": pc.world_size, "max_model_len": config.model_config.max_model_len,
                         "max_num_seqs": config.scheduler_config.max_num_seqs,
                         "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
                         "cache_dtype": str(cc.cache_dtype), "block_size": cc.block_size,
                         "device": str(config.device_config.device)}
    except SystemExit:
        return out | {"status": "rejected", "stage": stage, "message": log.getvalue().strip()[-600:]}
    except Exception as e:  # the framework's own error is the result
        return out | {"status": "rejected" if stage != "create_engine_config" else "stopped", "stage": stage,
                      "message": _error(e)}
    return out | {"status": "accepted", "stage": stage, "platform": PLATFORM.get("name")}


def main() -> None:
    logging.disable(logging.WARNING)
    _stand_in_h100s()
    run(check, "vllm", _error)


if __name__ == "__main__":
    main()
