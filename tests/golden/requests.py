"""CLI requests whose ``--json`` output is pinned by golden files (captured before a refactor).

``python -m tests.golden.requests`` (from the repository root) rewrites the golden files; do that only for an
intentional change of numbers, and name the change in the commit message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

GOLDEN_DIR = Path(__file__).parent / "data"

_T = ["--hardware", "dgx-h100"]
REQUESTS: dict[str, list[str]] = {
    "train-llama8b-8": ["train", "-m", "llama-3.1-8b", *_T, "--gpus", "8", "-b", "32", "-s", "8192"],
    "train-llama70b-256": ["train", "-m", "llama-3.1-70b", *_T, "--gpus", "256", "-b", "1024", "-s", "8192"],
    "train-llama70b-64-top3": ["train", "-m", "llama-3.1-70b", *_T, "--gpus", "64", "-b", "256", "-s", "8192",
                               "--top-k", "3"],
    "train-gpt3-1024": ["train", "-m", "gpt3-175b", "-H", "dgx-a100-80gb", "--gpus", "1024", "-b", "1536",
                        "-s", "2048"],
    "train-405b-16k": ["train", "-m", "llama-3.1-405b", *_T, "--gpus", "16384", "-b", "2048", "-s", "8192"],
    "train-mixtral-64": ["train", "-m", "mixtral-8x7b", *_T, "--gpus", "64", "-b", "256", "-s", "4096"],
    "train-dsv3-256": ["train", "-m", "deepseek-v3", "-H", "dgx-h800", "--gpus", "256", "-b", "1024",
                       "-s", "4096"],
    "train-pinned-tp8": ["train", "-m", "llama-3.1-70b", *_T, "--gpus", "64", "-b", "128", "-s", "4096",
                         "--tp", "8", "--recompute", "selective"],
    "train-infeasible": ["train", "-m", "llama-3.1-405b", *_T, "--gpus", "8", "-b", "8", "-s", "8192"],
    "train-maxbatch": ["train", "-m", "gpt-22b", "-H", "dgx-a100-80gb", "--gpus", "64", "-b", "64",
                       "-s", "2048", "--max-global-batch", "512"],
    "est-train-gpt3": ["estimate", "train", "-m", "gpt3-175b", "-H", "dgx-a100-80gb", "--gpus", "64", "-b", "64",
                       "-s", "2048", "--tp", "8", "--pp", "8", "--dp", "1", "--microbatch", "1",
                       "--interleave", "3", "--recompute", "selective", "--sequence-parallel"],
    "est-train-llama8b-full": ["estimate", "train", "-m", "llama-3.1-8b", *_T, "--gpus", "8", "-b", "32", "-s",
                               "8192", "--tp", "2", "--pp", "1", "--dp", "4", "--microbatch", "1",
                               "--recompute", "full", "--zero", "1"],
    "est-train-mixtral-ep": ["estimate", "train", "-m", "mixtral-8x7b", *_T, "--gpus", "64", "-b", "256", "-s",
                             "4096", "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "8", "--microbatch", "1",
                             "--recompute", "selective"],
    "est-train-cp": ["estimate", "train", "-m", "llama-3.1-8b", *_T, "--gpus", "16", "-b", "16", "-s", "65536",
                     "--tp", "4", "--pp", "1", "--dp", "2", "--cp", "2", "--microbatch", "1", "--recompute",
                     "selective"],
    "est-train-zero3": ["estimate", "train", "-m", "llama-3.1-70b", *_T, "--gpus", "64", "-b", "64", "-s", "4096",
                        "--tp", "1", "--pp", "1", "--dp", "64", "--microbatch", "1", "--recompute", "full",
                        "--zero", "3"],
    "infer-70b-8-maxbatch": ["infer", "-m", "llama-3.1-70b", *_T, "--gpus", "8", "--prompt-len", "2048",
                             "--gen-len", "256", "--max-batch"],
    "infer-70b-8-slo": ["infer", "-m", "llama-3.1-70b", *_T, "--gpus", "8", "--prompt-len", "2048",
                        "--gen-len", "256", "--max-tpot-ms", "50"],
    "infer-8b-latency": ["infer", "-m", "llama-3.1-8b", *_T, "--gpus", "8", "--prompt-len", "1024",
                         "--gen-len", "128", "--objective", "latency"],
    "infer-mixtral-2": ["infer", "-m", "mixtral-8x7b", *_T, "--gpus", "2", "--prompt-len", "512",
                        "--gen-len", "512", "--max-ttft-ms", "500"],
    "infer-dsv3-16": ["infer", "-m", "deepseek-v3", "-H", "hgx-h200", "--gpus", "16", "--prompt-len", "4096",
                      "--gen-len", "512", "--max-tpot-ms", "50", "--max-ttft-ms", "2000"],
    "infer-pareto": ["infer", "-m", "llama-3.1-8b", *_T, "--gpus", "2", "--prompt-len", "1024", "--gen-len", "256",
                     "--pareto"],
    "est-infer-70b": ["estimate", "infer", "-m", "llama-3.1-70b", *_T, "--gpus", "4", "--tp", "4", "--batch", "32",
                      "--prompt-len", "2048", "--gen-len", "256"],
    "est-infer-mixtral-ep": ["estimate", "infer", "-m", "mixtral-8x7b", *_T, "--gpus", "8", "--tp", "2", "--ep",
                             "4", "--batch", "64", "--prompt-len", "1024", "--gen-len", "256"],
    "est-infer-opt13b": ["estimate", "infer", "-m", "opt-13b", "-H", "dgx-a100-40gb", "--gpus", "1", "--tp", "1",
                         "--batch", "8", "--prompt-len", "512", "--gen-len", "128"],
    "offload-opt175b": ["offload", "-m", "opt-175b", "-H", "gcp-t4", "--prompt-len", "512", "--gen-len", "32"],
    "offload-opt30b": ["offload", "-m", "opt-30b", "-H", "gcp-t4", "--prompt-len", "512", "--gen-len", "32"],
    "offload-llama70b": ["offload", "-m", "llama-2-70b", "-H", "a6000-ws", "--prompt-len", "512", "--gen-len", "32",
                         "--cpu-mem", "200GiB"],
    "offload-latency": ["offload", "-m", "opt-30b", "-H", "gcp-t4", "--prompt-len", "256", "--gen-len", "64",
                        "--objective", "latency"],
    "est-offload-opt6": ["estimate", "offload", "-m", "opt-6.7b", "-H", "gcp-t4", "--prompt-len", "512",
                         "--gen-len", "32", "--gpu-batch", "8", "--num-gpu-batches", "2", "--weights", "100,0,0",
                         "--kv-cache", "100,0,0", "--activations", "100,0,0"],
    "est-offload-opt30b-cpuattn": ["estimate", "offload", "-m", "opt-30b", "-H", "gcp-t4", "--prompt-len", "512",
                                   "--gen-len", "32", "--gpu-batch", "48", "--num-gpu-batches", "3", "--weights",
                                   "20,80,0", "--kv-cache", "0,100,0", "--activations", "0,100,0",
                                   "--cpu-attention"],
}

# Wall-clock fields differ run to run; everything else must be identical.
_VOLATILE = re.compile(r"^(wall_time_s|build_s|solve_s|elapsed_s)$")


def scrub(obj: Any) -> Any:
    """Drop wall-clock fields (recursively) so two runs of the same request compare equal."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not _VOLATILE.search(k)}
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    return obj


def run_request(args: list[str]) -> tuple[int, Any]:
    """Run one request in-process with ``--json``; return the exit code and the scrubbed JSON."""
    import contextlib
    import io

    from shardplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--json"])
    return code, scrub(json.loads(out.getvalue())) if out.getvalue().strip() else None


def capture() -> None:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for name, args in REQUESTS.items():
        code, data = run_request(args)
        (GOLDEN_DIR / f"{name}.json").write_text(json.dumps({"args": args, "code": code, "json": data}, indent=1,
                                                            sort_keys=True) + "\n")
        print(name, code)


if __name__ == "__main__":
    capture()
