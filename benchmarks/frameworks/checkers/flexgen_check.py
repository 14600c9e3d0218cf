"""FlexGen's own code on shardplan's FlexGen exports (runs inside the flexgen environment, PyPI ``flexgen``; stdin:
the manifest entries, stdout: one JSON line of results).

Per export: the ``python3 -m MODULE`` module must be importable; ``add_parser_arguments`` of ``flex_opt.py`` parses
the flags; ``Policy`` is built from them exactly as ``run_flexgen`` builds it; ``get_opt_config`` must know the
model; then ``OptLM.__init__`` runs on CPU devices: it builds the layer list and places the activations
(``act_home``: ``NotImplementedError`` unless one tier holds 100%), and stops at its first ``torch.cuda.Stream()``
when there is no GPU, which is where the check ends (the weights are never loaded).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import shlex
import traceback

from common import framework_error, run


def _error(e: BaseException) -> str:
    return framework_error(e, ("flexgen",), kinds=(AssertionError, NotImplementedError))


def check(entry: dict) -> dict:
    with open(entry["path"]) as f:
        argv = shlex.split(f.read().replace("\\\n", " "))
    out = {"case": entry["case"], "format": "flexgen", "module": argv[2]}
    if importlib.util.find_spec(argv[2].rsplit(".", 1)[0]) is None:
        return out | {"status": "rejected", "stage": "python -m", "message": f"no module {argv[2]}"}
    from flexgen.compression import CompressionConfig
    from flexgen.flex_opt import OptLM, Policy, add_parser_arguments, get_opt_config
    from flexgen.pytorch_backend import TorchDevice, TorchDisk, TorchMixedDevice
    from flexgen.utils import GB, ExecutionEnv

    parser = argparse.ArgumentParser()
    add_parser_arguments(parser)
    stage = "flex_opt argument parser"
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            args = parser.parse_args(argv[3:])
        stage = "Policy"
        policy = Policy(args.gpu_batch_size, args.num_gpu_batches, args.percent[0], args.percent[1],
                        args.percent[2], args.percent[3], args.percent[4], args.percent[5], args.overlap,
                        args.sep_layer, args.pin_weight, args.cpu_cache_compute, args.attn_sparsity,
                        args.compress_weight, CompressionConfig(num_bits=4, group_size=64, group_dim=0,
                                                                symmetric=False),
                        args.compress_cache, CompressionConfig(num_bits=4, group_size=64, group_dim=2,
                                                               symmetric=False))
        for name in ("w_disk_percent", "cache_disk_percent", "act_disk_percent"):
            assert getattr(policy, name) >= 0, f"{name} = {getattr(policy, name)} < 0"
        stage = "get_opt_config"
        config = get_opt_config(args.model)
        n = args.num_gpu_batches * args.gpu_batch_size
        out |= {"model_gb": round(config.model_bytes() / GB, 3),
                "cache_gb": round(config.cache_bytes(n, args.prompt_len + args.gen_len) / GB, 3)}
        stage = "OptLM.__init__"
        cpu = TorchDevice("cpu")
        # no copy threads: theirs call torch.cuda.set_device (pytorch_backend.py copy_worker_func)
        disk = TorchDisk(os.path.join(os.environ.get("TMPDIR", "/tmp"), "flexgen-check-offload"), num_copy_threads=0)
        env = ExecutionEnv(gpu=cpu, cpu=cpu, disk=disk, mixed=TorchMixedDevice([cpu, cpu, disk]))
        try:
            OptLM(config, env, args.path, policy)
        except (RuntimeError, AssertionError, AttributeError) as e:
            where = [f for f in traceback.extract_tb(e.__traceback__) if "flex_opt.py" in f.filename]
            if not (where and "torch.cuda.Stream" in (where[-1].line or "")):
                raise
            out["stopped_at"] = f"flex_opt.py:{where[-1].lineno}: {where[-1].line} (no GPU)"
        finally:
            env.close_copy_threads()
    except SystemExit:
        return out | {"status": "rejected", "stage": stage, "message": log.getvalue().strip()[-600:]}
    except Exception as e:  # the framework's own error is the result
        return out | {"status": "rejected", "stage": stage, "message": _error(e)}
    return out | {"status": "accepted"}


def main() -> None:
    run(check, "flexgen", _error)


if __name__ == "__main__":
    main()
