"""The long fuzz job: ≥ 10,000 generated argument vectors and a hostile-file set against the CLI contract.

Contract checked for every run: exit code 0 or 2 (never 1), a non-zero exit prints exactly one line on stderr and
nothing on stdout, a ``--json`` run's stdout parses, no Python warning reaches stderr, no run takes more than 10 s,
peak RSS stays below 2 GiB.

How it runs (2 shared cores make 10,000 fresh interpreters (~1 s each to import) too slow):

* the generated vectors run **in-process**, in chunks, each chunk in a fresh worker process
  (``--worker``); each run has a 10 s alarm, its wall time is measured, and the worker's peak RSS
  (``ru_maxrss``) is sampled after every run, so the run that raised the peak is known;
* the hostile-file set and a random sample of the vectors run **one subprocess each** (``--child``) with a
  10 s timeout (killed after), each reporting its own peak RSS (``ru_maxrss`` of that process).

    .venv/bin/python benchmarks/fuzz/run_fuzz.py            # 10,000 vectors + hostile set + 200-run sample
    .venv/bin/python benchmarks/fuzz/run_fuzz.py -n 500     # a quick look

Writes ``benchmarks/fuzz/RESULTS.md`` (counts, the slowest and largest runs, every contract violation).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 10.0
RSS_LIMIT_KIB = 2 * 1024**2  # the target: peak RSS < 2 GiB
AS_LIMIT = 8 * 1024**3  # address-space cap for workers and children, so a runaway cannot take the shared machine
# Runs start in a scratch folder: a relative --output or --plot target (e.g. "--plot megatron") lands there, not in the
# checkout. Set by main().
RUN_DIR: str | None = None

MODELS = ["llama-2-7b", "llama-2-70b", "llama-3.1-405b", "gpt3-175b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
          "opt-6.7b", "opt-30b", "opt-175b", "falcon-40b", "gemma-2-9b", "bloom-176b", "gpt-1.7b"]
HARDWARE = ["dgx-h100", "dgx-a100-80gb", "gcp-t4", "rtx4090-pc", "mi300x-8", "gb200-nvl72", "h100-sxm", "t4", "l4"]
HOSTILE = ["0", "-1", "18446744073709551616", "9" * 40, "9" * 5001, "1e400", "nan", "inf", "-inf", "", "abc", "1.5",
           "0x10", "9223372036854775807", "1e-400", "50%", "nan,50,50", "1e400GiB", "-5GiB", "ü", "1,2", "--json"]


# --- generation ----------------------------------------------------------------------------------------------------

def _int(rng: random.Random, lo: int, hi: int, typical: list[int]) -> str:
    """A value for an integer option of allowed range [lo, hi]: mostly typical, sometimes at or past a bound."""
    r = rng.random()
    if r < 0.6:
        return str(rng.choice(typical))
    if r < 0.75:
        return str(rng.randint(lo, min(hi, 1 << 14)))
    if r < 0.85:
        return str(rng.choice([lo, hi, hi + 1, lo - 1, 2 * hi]))
    return rng.choice(HOSTILE)


def _pct(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.7:
        g = rng.choice([0, 10, 20, 50, 80, 100])
        c = rng.choice([0, 100 - g])
        return f"{g},{c},{100 - g - c}"
    return rng.choice(["100,0,0", "0,100,0", "0,0,100", "nan,50,50", "101,-1,0", "50,50", "a,b,c", "1e400,0,0"])


def _size(rng: random.Random) -> str:
    return rng.choice(["16GiB", "200GiB", "1TB", "0", "1e400GiB", "-5GiB", "80 gigs", "1EiB", "2e18", "nan", "12"])


def _opts(rng: random.Random, table: list[tuple[str, Any]], k: int) -> list[str]:
    out: list[str] = []
    for name, gen in rng.sample(table, min(k, len(table))):
        out += [name, gen(rng)] if gen is not None else [name]
    return out


def _train(rng: random.Random, plan: bool) -> list[str]:
    argv = ["train"] if plan else ["estimate", "train"]
    argv += ["-m", rng.choice(MODELS), "-H", rng.choice(HARDWARE), "-s", _int(rng, 1, 2**24, [512, 2048, 4096, 8192]),
             "-b", _int(rng, 1, 2**24, [8, 64, 512, 1536])]
    table: list[tuple[str, Any]] = [
        ("--gpus", lambda r: _int(r, 1, 2**20, [1, 8, 64, 512, 4096])),
        ("--tp", lambda r: _int(r, 1, 2**20, [1, 2, 4, 8])), ("--pp", lambda r: _int(r, 1, 2**20, [1, 2, 4, 8])),
        ("--dp", lambda r: _int(r, 1, 2**20, [1, 2, 8])), ("--ep", lambda r: _int(r, 1, 2**20, [1, 2, 8])),
        ("--cp", lambda r: _int(r, 1, 2**20, [1, 2])), ("--microbatch", lambda r: _int(r, 1, 2**24, [1, 2, 4])),
        ("--interleave", lambda r: _int(r, 1, 10_000, [1, 2, 3])),
        ("--recompute", lambda r: r.choice(["none", "selective", "full", "bogus"])),
        ("--zero", lambda r: _int(r, 0, 3, [0, 1, 2, 3])), ("--dtype", lambda r: r.choice(["bf16", "fp8", "fp4x"])),
        ("--offload-optimizer", lambda r: r.choice(["0", "50%", "100%", "nan", "1e400", "-3"])),
        ("--sequence-parallel", None),
    ]
    if plan:
        table += [("--max-cp", lambda r: _int(r, 1, 2**20, [1, 2, 8])), ("--top-k", lambda r: _int(r, 1, 50, [1, 3])),
                  ("--offload", lambda r: r.choice(["auto", "on", "off"]))]
        argv += ["--time-limit", rng.choice(["0.01", "0.5", "2", "nan", "-1", "1e400"])]
    argv += _opts(rng, table, rng.randint(0, 4))
    if not plan and "--tp" not in argv and rng.random() < 0.5:
        argv += ["--tp", "1"]
    return argv


def _infer(rng: random.Random, plan: bool) -> list[str]:
    argv = ["infer"] if plan else ["estimate", "infer"]
    argv += ["-m", rng.choice(MODELS), "-H", rng.choice(HARDWARE), "-p", _int(rng, 1, 2**24, [128, 512, 2048]),
             "-n", _int(rng, 1, 2**20, [16, 128, 512])]
    table: list[tuple[str, Any]] = [
        ("--gpus", lambda r: _int(r, 1, 2**20, [1, 8, 16, 64])), ("--tp", lambda r: _int(r, 1, 2**20, [1, 2, 8])),
        ("--pp", lambda r: _int(r, 1, 2**20, [1, 2])), ("--ep", lambda r: _int(r, 1, 2**20, [1, 8])),
        ("--block-size", lambda r: _int(r, 1, 2**16, [16, 32])),
        ("--gpu-memory-utilization", lambda r: r.choice(["0.9", "0.5", "1.0", "0", "nan", "inf", "2"])),
        ("--max-ttft-ms", lambda r: r.choice(["100", "1000", "0", "nan", "inf", "1e300"])),
        ("--max-tpot-ms", lambda r: r.choice(["20", "50", "0.0001", "nan", "inf"])),
        ("--kv-dtype", lambda r: r.choice(["fp8", "bf16", "int2"])),
        ("--weight-dtype", lambda r: r.choice(["int4", "fp8", "bf16", "fp3"])),
        ("--non-torch-memory", _size), ("--max-num-seqs", lambda r: _int(r, 1, 2**20, [256, 1])),
        ("--max-num-batched-tokens", lambda r: _int(r, 1, 2**24, [2048, 8192])),
    ]
    if plan:
        table += [("--pareto", None), ("--objective", lambda r: r.choice(["throughput", "latency", "fast"])),
                  ("--top-k", lambda r: _int(r, 1, 50, [1, 3]))]
        argv += ["--time-limit", rng.choice(["0.01", "0.5", "2", "nan"])]
    else:
        argv += ["--batch", _int(rng, 1, 2**20, [1, 8, 64])] if rng.random() < 0.8 else ["--max-batch"]
    return argv + _opts(rng, table, rng.randint(0, 4))


def _offload(rng: random.Random, plan: bool) -> list[str]:
    argv = ["offload"] if plan else ["estimate", "offload"]
    argv += ["-m", rng.choice(["opt-6.7b", "opt-30b", "opt-175b", "llama-2-7b", "llama-2-70b"]),
             "-H", rng.choice(["gcp-t4", "rtx4090-pc", "a6000-ws", "rtx3090-pc", "t4"]),
             "-p", _int(rng, 1, 2**24, [128, 512]), "--gen-len", _int(rng, 1, 2**20, [8, 32, 128])]
    table: list[tuple[str, Any]] = [("--cpu-mem", _size), ("--disk", _size), ("--gpu-mem", _size)]
    if plan:
        table += [("--gpu-batch", lambda r: _int(r, 1, 2**16, [1, 8, 32])),
                  ("--num-gpu-batches", lambda r: _int(r, 1, 2**16, [1, 4])), ("--allow-compression", None),
                  ("--objective", lambda r: r.choice(["throughput", "latency"]))]
        argv += ["--time-limit", rng.choice(["0.01", "1", "3"])]
    else:
        argv += ["--gpu-batch", _int(rng, 1, 2**16, [1, 8, 32]), "--num-gpu-batches", _int(rng, 1, 2**16, [1, 4]),
                 "--weights", _pct(rng), "--kv-cache", _pct(rng), "--activations", _pct(rng)]
        table += [("--cpu-attention", None), ("--compression", None)]
    return argv + _opts(rng, table, rng.randint(0, 3))


def _catalog(rng: random.Random, files: list[str]) -> list[str]:
    kind = rng.choice(["models", "hardware"])
    names = (MODELS if kind == "models" else HARDWARE) + files + ["", "x" * 300, "nope", "/", "/etc/passwd"]
    return [kind, rng.choice(["show", "show", "list"]), rng.choice(names)][: 3 if rng.random() < 0.9 else 2]


def generate(n: int, seed: int, files: list[str]) -> list[list[str]]:
    """``n`` argument vectors: half cheap (estimates, catalog), half plans, a tenth with a hostile file as input."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        r = rng.random()
        plan = rng.random() < 0.35
        if r < 0.1:
            argv = _catalog(rng, files)
        elif r < 0.45:
            argv = _train(rng, plan)
        elif r < 0.75:
            argv = _infer(rng, plan)
        else:
            argv = _offload(rng, plan)
        if files and r >= 0.1 and rng.random() < 0.08:
            flag = "-m" if rng.random() < 0.5 else "-H"
            argv[argv.index(flag) + 1] = rng.choice(files)
        if rng.random() < 0.5:
            argv.append("--json")
        if rng.random() < 0.03:
            argv += [rng.choice(["--export", "--output", "--plot"]), rng.choice(["megatron", "/dev/full", "/tmp"])]
        out.append(argv)
    return out


# --- hostile files ---------------------------------------------------------------------------------------------

def hostile_files(root: Path) -> dict[str, str]:
    """Write the hostile-file set under ``root``; returns name → path (FIFOs and devices included)."""
    p: dict[str, str] = {}

    def put(name: str, text: str | bytes) -> None:
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(text if isinstance(text, bytes) else text.encode())
        p[name] = str(f)

    root.mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / "fifo.json")
    p["fifo.json"] = str(root / "fifo.json")
    (root / "fifo-model").mkdir()
    os.mkfifo(root / "fifo-model" / "config.json")
    p["fifo-model/"] = str(root / "fifo-model")
    p["/dev/zero"], p["/dev/urandom"] = "/dev/zero", "/dev/urandom"
    laughs = "a0: &a0 {name: x}\n" + "".join(
        f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(10))}}}\n" for i in range(1, 10))
    put("laughs.yaml", laughs + "base: dgx-h100\n")
    put("laughs-gpu.yaml", "c0: &c0 [[1, 0.5]]\n" + "".join(
        f"c{i}: &c{i} [{', '.join([f'*c{i - 1}'] * 9)}]\n" for i in range(1, 9)) + "base: dgx-h100\n")
    put("self.yaml", "a: &a [*a]\nbase: dgx-h100\n")
    put("deep.json", "[" * 5000 + "]" * 5000)
    put("deep.yaml", "[" * 5000 + "]" * 5000)
    put("deep-model/config.json", '{"model_type": "llama", "x": ' + "[" * 3000 + "]" * 3000 + "}")
    put("curve-1m.yaml", "base: dgx-h100\ngpu:\n  base: h100-sxm\n  matmul_efficiency: ["
        + ", ".join(f"[{i + 1}, 0.5]" for i in range(1_000_000)) + "]\n")
    put("curve-300k.json", json.dumps({"base": "dgx-h100", "gpu": {"base": "h100-sxm", "matmul_efficiency": [
        [i + 1, 0.5] for i in range(300_000)]}}))
    put("bigint.json", '{"base": "dgx-h100", "gpus_per_node": ' + "9" * 5001 + "}")
    put("bigint-model/config.json", '{"model_type": "llama", "num_hidden_layers": ' + "9" * 5001 + "}")
    hf = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 4096,
          "vocab_size": 32000}
    put("layers-qwen3moe/config.json", json.dumps(hf | {"model_type": "qwen3_moe", "num_hidden_layers": 100_000_000}))
    put("layers-dsv3/config.json", json.dumps(hf | {"model_type": "deepseek_v3", "num_hidden_layers": 100_000_000}))
    put("layers-2e63/config.json", json.dumps(hf | {"model_type": "llama", "num_hidden_layers": 2**63}))
    put("ok-model/config.json", json.dumps(hf | {"model_type": "llama", "num_hidden_layers": 16,
                                                 "_name_or_path": "acme/tiny-llama"}))
    put("gpus1e24.yaml", "base: dgx-h100\ngpus_per_node: 1e24\n")
    put("inf-flops.yaml", "base: dgx-h100\ngpu: {base: h100-sxm, peak_flops: {bf16: .inf}}\n")
    put("denormal.yaml", "base: dgx-h100\ngpu: {base: h100-sxm, peak_flops: {bf16: 5.0e-324}}\n")
    put("nan-link.yaml", "base: dgx-h100\nintra_node: {bandwidth_bytes_per_s: .nan, latency_s: 1e-6}\n")
    put("size-inf.yaml", "base: dgx-h100\nhost_memory_bytes: 1e400GiB\n")
    put("utf16.json", '{"model_type": "llama"}'.encode("utf-16"))
    put("utf16.yaml", "base: dgx-h100\n".encode("utf-16"))
    put("latin1.json", b'{"model_type": "\xe9"}')
    put("tags.yaml", "!!python/object/apply:os.system ['echo pwned']\n")
    put("big.json", b" " * (5 * 1024**2) + b"{}")
    p["long-name"] = str(root / ("x" * 300 + ".json"))
    p["folder"] = str(root)
    return p


def hostile_vectors(files: dict[str, str], out_dir: Path) -> list[list[str]]:
    """Each hostile file where a model and where a system is read, and the output targets."""
    vecs: list[list[str]] = []
    for name, path in files.items():
        vecs.append(["models", "show", path])
        vecs.append(["hardware", "show", path])
        if name.startswith("layers-") or name.endswith("-model") or name == "ok-model/config.json":
            vecs.append(["train", "-m", path, "-H", "dgx-h100", "-s", "2048", "-b", "64", "--time-limit", "2"])
    tiny = ["estimate", "train", "-m", "llama-2-7b", "-H", "dgx-h100", "-s", "2048", "-b", "16", "--tp", "8"]
    vecs += [
        [*tiny, "--export", "megatron", "--output", "/dev/full"],
        [*tiny, "--export", "megatron", "--output", str(out_dir)],
        [*tiny, "--plot", "/dev/full"],
        [*tiny, "--plot", str(out_dir / "x.png")],
        ["infer", "-m", "llama-2-7b", "-H", "dgx-h100", "-p", "512", "-n", "128", "--export", "vllm", "--output",
         str(out_dir)],
        ["offload", "-m", "opt-30b", "-H", "rtx4090-pc", "-p", "512", "--gen-len", "32", "--export", "flexgen",
         "--output", "/dev/full"],
        ["offload", "-m", "opt-30b", "-H", "rtx4090-pc", "-p", "512", "--gen-len", "1000000000"],
        ["train", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus", "8", "-b", "10000000", "-s", "1048576",
         "--time-limit", "5"],
        ["train", "-m", "llama-2-7b", "-H", "dgx-h100", "-b", "64", "-s", "9223372036854775807"],
        ["estimate", "train", "-m", "llama-2-7b", "-H", "dgx-h100", "-b", "64", "-s", "2048",
         "--interleave", "1099511627776"],
        ["train", "-m", "llama-2-7b", "-H", "dgx-h100", "-b", "64", "-s", "2048", "--gpus", "18446744073709551616"],
        ["train", "-m", "llama-2-7b", "-H", "dgx-h100", "-b", "9" * 40, "-s", "2048"],
        ["estimate", "offload", "-m", "opt-30b", "-H", "rtx4090-pc", "-p", "512", "--gen-len", "32", "--gpu-batch",
         "8", "--num-gpu-batches", "9223372036854775807", "--weights", "nan,50,50", "--kv-cache", "0,100,0",
         "--activations", "100,0,0"],
        ["infer", "-m", "llama-2-70b", "-H", "dgx-h100", "-p", "512", "-n", "128", "--gpus", "64", "--time-limit",
         "0.01"],
        ["train", "-m", "deepseek-v3", "-H", "dgx-h100", "-s", "4096", "-b", "1024", "--gpus", "1024",
         "--time-limit", "0.01"],
    ]
    return vecs


# --- running ---------------------------------------------------------------------------------------------------

class _Timeout(BaseException):
    """Raised by the alarm: a BaseException, so the CLI's own ``except Exception`` does not turn it into exit 1."""


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Timeout


def _limit_memory() -> None:
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _json_ok(argv: list[str], code: int | None, out: str) -> bool:
    """A code-0 ``--json`` run printed one JSON object (judged on the whole of stdout)."""
    if code != 0 or "--json" not in argv:
        return True
    try:
        json.loads(out)
    except ValueError:
        return False
    return True


def _judge(argv: list[str], code: int | None, out: str, err: str, json_ok: bool | None = None) -> list[str]:
    """Contract violations of one run (``json_ok``: judged already, where ``out`` is only a tail)."""
    bad = []
    if code not in (0, 2):
        bad.append(f"exit {code}")
    if code not in (0, None):
        lines = err.splitlines()
        if len(lines) != 1:
            bad.append(f"{len(lines)} stderr lines")
        if out:
            bad.append("stdout on error")
    if not (_json_ok(argv, code, out) if json_ok is None else json_ok):
        bad.append("--json output does not parse")
    if "Warning" in err or "Traceback" in err:
        bad.append("warning/traceback on stderr")
    return bad


def run_inprocess(argv: list[str]) -> dict[str, Any]:
    from shardplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0, c0 = time.perf_counter(), time.process_time()
    code: int | None
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            code = main(list(argv))
        for w in caught:  # a warning that reached the warnings machinery would have been printed on stderr
            err.write(f"{w.category.__name__}: {w.message}\n")
    except _Timeout:
        code = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    o, e = out.getvalue(), err.getvalue()
    return {"argv": argv, "code": code, "wall_s": wall, "cpu_s": cpu, "timeout": code is None,
            "bad": _judge(argv, code, o, e), "err": e[:300],
            "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def worker(chunk_file: str, result_file: str) -> None:
    """Run a chunk of vectors in this process, one JSON line per run (appended as it goes)."""
    _limit_memory()
    os.environ.setdefault("COLUMNS", "160")
    vecs = json.loads(Path(chunk_file).read_text())
    with open(result_file, "a") as f:
        for argv in vecs:
            f.write(json.dumps(run_inprocess(argv)) + "\n")
            f.flush()


def child(result_file: str, argv: list[str]) -> None:
    """One run in this fresh process; writes its exit code and own peak RSS."""
    _limit_memory()
    from shardplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    use = resource.getrusage(resource.RUSAGE_SELF)
    Path(result_file).write_text(json.dumps({"code": code, "out": out.getvalue()[-2000:], "err": err.getvalue()[-2000:],
                                             "json_ok": _json_ok(argv, code, out.getvalue()),
                                             "rss_kib": use.ru_maxrss, "cpu_s": use.ru_utime + use.ru_stime}))


def run_subprocess(argv: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
        res = tf.name
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, __file__, "--child", res, "--", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=RUN_DIR)
    try:
        p.communicate(timeout=TIMEOUT_S + 2)  # + interpreter start-up
        timeout = False
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        timeout = True
    wall = time.perf_counter() - t0
    data = json.loads(Path(res).read_text() or "{}") if Path(res).stat().st_size else {}
    os.unlink(res)
    code = None if timeout else data.get("code", p.returncode)
    bad = _judge(argv, code, data.get("out", ""), data.get("err", ""), data.get("json_ok")) if data else (
        ["timeout"] if timeout else [f"child died (exit {p.returncode})"])
    return {"argv": argv, "code": code, "wall_s": wall, "cpu_s": data.get("cpu_s"), "timeout": timeout, "bad": bad,
            "err": data.get("err", "")[:300], "rss_kib": data.get("rss_kib")}


def run_chunks(vecs: list[list[str]], chunk: int, log: Path) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    todo = list(vecs)
    while todo:
        part, todo = todo[:chunk], todo[chunk:]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as cf:
            json.dump(part, cf)
        res = str(log) + ".part"
        Path(res).write_text("")
        p = subprocess.run([sys.executable, __file__, "--worker", cf.name, res], capture_output=True,
                           timeout=len(part) * (TIMEOUT_S + 5) + 60, check=False, cwd=RUN_DIR)
        os.unlink(cf.name)
        done = [json.loads(line) for line in Path(res).read_text().splitlines() if line.strip()]
        if len(done) < len(part):  # the worker died mid-chunk: record the run that killed it, go on after it
            dead = part[len(done)]
            done.append({"argv": dead, "code": None, "wall_s": 0.0, "timeout": False, "rss_kib": None, "err": "",
                         "bad": [f"worker died (exit {p.returncode}): {p.stderr.decode()[-200:]}"]})
            todo = part[len(done):] + todo
        results += done
        with open(log, "a") as f:
            for r in done:
                f.write(json.dumps(r) + "\n")
        print(f"{len(results):,}/{len(vecs):,} in-process runs", file=sys.stderr, flush=True)
    return results


# --- report ----------------------------------------------------------------------------------------------------

def _fmt_argv(argv: list[str]) -> str:
    text = " ".join(a if len(a) <= 60 else a[:20] + f"…({len(a)} chars)" for a in argv)
    return "`shardplan " + text.replace("`", "'").replace("|", "\\|") + "`"


def _summary(name: str, rows: list[dict[str, Any]]) -> list[str]:
    codes: dict[str, int] = {}
    for r in rows:
        key = "timeout" if r["timeout"] else str(r["code"])
        codes[key] = codes.get(key, 0) + 1
    slow = [r for r in rows if r["timeout"] or r["wall_s"] > TIMEOUT_S]
    slow_cpu = [r for r in rows if (r.get("cpu_s") or 0) > TIMEOUT_S]
    rss = [r for r in rows if r.get("rss_kib")]
    peak = max(rss, key=lambda r: r["rss_kib"]) if rss else None
    multi = [r for r in rows if any("stderr lines" in b for b in r["bad"])]
    bad = [r for r in rows if r["bad"]]
    walls = sorted(r["wall_s"] for r in rows) or [0.0]
    exits = ", ".join(f"{k}: {v:,}" for k, v in sorted(codes.items()))
    top = f"{peak['rss_kib'] / 1024:,.0f} MiB" if peak else "-"
    return [f"| {name} | {len(rows):,} | {exits} | {len(slow)} | {len(slow_cpu)} | {top} | {len(multi)} | {len(bad)} | "
            f"{walls[len(walls) // 2]:.3f} s | {walls[-1]:.2f} s |"]


def report(gen: list[dict[str, Any]], hostile: list[dict[str, Any]], sample: list[dict[str, Any]], *, seed: int,
           elapsed: float, path: Path) -> None:
    lines = [
        "# Fuzz results (`benchmarks/fuzz/run_fuzz.py`)",
        "",
        (f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, seed {seed}, {elapsed / 60:.0f} min on the shared "
         if elapsed == elapsed else "Report from the logs of a run stopped early, on the shared ") +
        f"2-core machine (load average {os.getloadavg()[0]:.1f} at the end: wall times include waiting for a core; "
        "the CPU-time column is the tool's own cost). Contract: exit 0 or 2, a failing run prints one stderr line and "
        "nothing on stdout, `--json` parses, no warnings, ≤ 10 s, peak RSS < 2 GiB.",
        "",
        "Generated vectors run in-process (chunks of runs in fresh worker processes; a 10 s alarm per run; the "
        "worker's peak RSS after each run, so a chunk's peak is attributed to the run that raised it). The hostile "
        "files and a random sample of the vectors run one fresh process each (10 s timeout, that process's own peak "
        "RSS, interpreter start-up included in the wall time).",
        "",
        "| set | runs | exit codes | > 10 s wall (or killed) | > 10 s CPU | peak RSS | multi-line errors | "
        "contract violations | median wall | max wall |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *_summary("generated (in-process)", gen),
        *_summary("hostile files and inputs (subprocess)", hostile),
        *_summary("sample of generated (subprocess)", sample),
        "",
    ]
    everything = gen + hostile + sample
    bad = [r for r in everything if r["bad"]]
    lines += [f"## Contract violations ({len(bad)})", ""]
    lines += [f"- {', '.join(r['bad'])}: {_fmt_argv(r['argv'])} — {r['err'].strip()[:160]!r}" for r in bad[:60]]
    if len(bad) > 60:
        lines.append(f"- … and {len(bad) - 60} more (see the JSON-lines log)")
    lines += ["", "## Slowest runs", ""]
    for r in sorted(everything, key=lambda r: -r["wall_s"])[:10]:
        cpu = f", {r['cpu_s']:.2f} s CPU" if r.get("cpu_s") is not None else ""
        lines.append(f"- {r['wall_s']:.2f} s wall{cpu}, exit {r['code']}: {_fmt_argv(r['argv'])}")
    lines += ["", "## Largest peak RSS (subprocess runs: that run alone; in-process: the run that raised the worker's "
              "peak)", ""]
    prev: dict[int, int] = {}
    raised = []
    for r in gen:
        if r.get("rss_kib") and r["rss_kib"] > prev.get(0, 0):
            raised.append(r)
            prev[0] = r["rss_kib"]
    for r in sorted([r for r in hostile + sample if r.get("rss_kib")] + raised, key=lambda r: -r["rss_kib"])[:10]:
        lines.append(f"- {r['rss_kib'] / 1024:,.0f} MiB, exit {r['code']}: {_fmt_argv(r['argv'])}")
    lines += ["", "## Hostile set", ""]
    lines += [f"- exit {r['code']}{' (timeout)' if r['timeout'] else ''}, {r['wall_s']:.2f} s, "
              f"{(r.get('rss_kib') or 0) / 1024:,.0f} MiB: {_fmt_argv(r['argv'])} — {r['err'].strip()[:140]!r}"
              for r in hostile]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10_000, help="generated vectors (in-process)")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--chunk", type=int, default=250, help="runs per worker process")
    ap.add_argument("--sample", type=int, default=200, help="generated vectors also run one process each")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "shardplan-fuzz.jsonl")
    ap.add_argument("--report-only", action="store_true", help="write the report from the logs of an earlier run")
    ap.add_argument("--start", type=int, default=0, help="run the generated vectors from this index on (a second "
                    "process can take the second half; no hostile set or sample then)")
    ap.add_argument("--subprocess-only", action="store_true", help="only the hostile set and the sample")
    ap.add_argument("--extra-log", type=Path, action="append", default=[],
                    help="with --report-only: logs of other processes over other index ranges")
    args = ap.parse_args()
    args.log, args.out = args.log.resolve(), args.out.resolve()  # the runs start in a scratch folder
    t0 = time.perf_counter()
    side = args.log.with_suffix(".subprocess.json")
    if args.report_only:  # e.g. of a run stopped early: the generated runs logged so far
        gen = [json.loads(line) for log in [args.log, *args.extra_log]
               for line in log.read_text().splitlines() if line.strip()]
        hostile, sample = json.loads(side.read_text())
        report(gen, hostile, sample, seed=args.seed, elapsed=float("nan"), path=args.out)
        return
    args.log.write_text("")
    global RUN_DIR
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        RUN_DIR = str(root)
        files = hostile_files(root / "files")
        (root / "out").mkdir()
        file_list = [v for k, v in files.items() if k not in ("folder",)]
        vecs = generate(args.n, args.seed, [f for f in file_list if "/dev/" not in f and "fifo" not in f])
        if args.start:
            run_chunks(vecs[args.start:], args.chunk, args.log)
            return
        if args.subprocess_only:  # the hostile set and the sample again (e.g. after a harness fix)
            hostile = [run_subprocess(v) for v in hostile_vectors(files, root / "out")]
            sample = [run_subprocess(v) for v in random.Random(args.seed + 1).sample(vecs, min(args.sample, len(vecs)))]
            side.write_text(json.dumps([hostile, sample]))
            return
        hostile = [run_subprocess(v) for v in hostile_vectors(files, root / "out")]
        print(f"{len(hostile)} hostile runs done", file=sys.stderr, flush=True)
        sample = [run_subprocess(v) for v in random.Random(args.seed + 1).sample(vecs, min(args.sample, len(vecs)))]
        print(f"{len(sample)} sampled subprocess runs done", file=sys.stderr, flush=True)
        side.write_text(json.dumps([hostile, sample]))
        gen = run_chunks(vecs, args.chunk, args.log)
    report(gen, hostile, sample, seed=args.seed, elapsed=time.perf_counter() - t0, path=args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4:])
    else:
        main()
