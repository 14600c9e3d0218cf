"""Measured kernel times (``measure.py`` on a device) against the cost model's kernel times for the same shapes.

``python benchmarks/gpu/compare.py [RESULTS.json ...]`` (default: every ``results/h200_run*.json``) prints, per kernel
group, the median ratio predicted / measured, its spread and the worst shapes; then each measured training step
against ``shardplan estimate train`` of the same model (``configs/``: the HF config and the system file of the software
the step ran) on one GPU. Kernel predictions use the catalog's ``h200-sxm`` (the GPU measured), through the functions
the cost model calls (``costmodel.core.kernels``).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from shardplan.api import estimate_training
from shardplan.costmodel.core.kernels import (
    attention_time,
    elementwise_time,
    gemm_time,
    memory_time,
    multi_tensor_time,
    with_launch,
)
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.dp_sync import optimizer_bytes_per_param
from shardplan.costmodel.training.layers import full_rerun_ops
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import LOSS_BYTES_PER_LOGIT
from shardplan.costmodel.training.recompute_modules import module_bytes, module_times
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware.gpus import H200_SXM
from shardplan.hardware.load import resolve_system
from shardplan.models import get_model
from shardplan.models.load import resolve_model
from shardplan.models.spec import ModelSpec

HERE = Path(__file__).parent

GPU = H200_SXM
B = 2  # bytes per bf16 element


def gemm_pred(m: int, n: int, k: int, experts: int = 1) -> float:
    """One (grouped) GEMM as the cost model prices it: ``experts`` GEMMs of (m/experts)×n×k."""
    flops = 2.0 * m * n * k
    nbytes = B * (m * k + experts * k * n + m * n)
    return float(gemm_time(GPU, np.array(flops), np.array(nbytes), "bf16", experts=experts, m=m, n=n, k=k))


def fp8_rows(res: dict) -> None:
    """FP8 against bf16 at the shapes of ``fp8_parts.part_fp8shapes``: the priced and the measured gain (bf16 time
    over FP8 time) and the FP8 price over its measurement, forward with fast accumulation, gradients with split."""
    rows = res.get("fp8shapes")
    if not isinstance(rows, list):
        return
    for group in ("fwd", "dgrad", "wgrad", "expert_fwd"):
        split = group in ("dgrad", "wgrad")
        key, out = ("fp8_split_s" if split else "fp8_fast_s"), (4.0 if group == "wgrad" else 2.0)
        gain, price, splits = [], [], []
        for r in (r for r in rows if r["pass"] == group):
            m, n, k = r["m"], r["n"], r["k"]
            t = {dt: float(gemm_time(GPU, 2.0 * m * n * k, e * (m * k + n * k) + out * m * n, dt, m=m, n=n, k=k,
                                     split_accumulate=split)) for dt, e in (("bf16", 2.0), ("fp8", 1.0))}
            gain.append((t["bf16"] / t["fp8"], r["bf16_s"] / r[key]))
            price.append(t["fp8"] / r[key])
            splits.append(r["fp8_split_s"] / r["fp8_fast_s"])
        q = np.percentile(np.array(gain), [10, 50, 90], axis=0)
        print(f"fp8 {group:10s} n={len(gain):3d}  gain over bf16 priced {q[1][0]:.2f} ({q[0][0]:.2f}-{q[2][0]:.2f}), "
              f"measured {q[1][1]:.2f} ({q[0][1]:.2f}-{q[2][1]:.2f}); fp8 predicted/measured "
              f"{np.median(price):.3f}; split/fast accumulation measured {np.median(splits):.3f}")


def fp8_decode_rows(res: dict) -> None:
    """Decode GEMMs (``fp8_parts.part_fp8decode``): predicted / measured per datatype and kernel, and the weight
    stream each kernel sustains (least squares of t = fixed + bytes / (fraction · bandwidth) over operands ≥ 8 MB)."""
    rows = res.get("fp8decode")
    if not isinstance(rows, list):
        return
    for key, dt, e in (("bf16_s", "bf16", 2.0), ("fp8_tensor_s", "fp8", 1.0), ("fp8_rowwise_s", "fp8", 1.0)):
        got = [(r, e * (r["m"] * r["k"] + r["n"] * r["k"]) + 2.0 * r["m"] * r["n"]) for r in rows if key in r]
        ratio = [float(gemm_time(GPU, 2.0 * r["m"] * r["n"] * r["k"], b, dt, m=r["m"], n=r["n"], k=r["k"])) / r[key]
                 for r, b in got]
        big = [(b, r[key]) for r, b in got if b >= 8e6]
        (fixed, slope), *_ = np.linalg.lstsq(np.array([[1.0, b] for b, _ in big]), np.array([t for _, t in big]),
                                             rcond=None)
        print(f"decode {key[:-2]:12s} n={len(got):3d}  predicted/measured median {np.median(ratio):.2f} "
              f"(p10 {np.percentile(ratio, 10):.2f}, p90 {np.percentile(ratio, 90):.2f}); stream fit "
              f"{fixed * 1e6:.1f} µs + bytes / ({1.0 / (slope * GPU.memory_bandwidth_bytes_per_s):.3f} · bandwidth) "
              f"over {len(big)} GEMMs")


def cast_chain_rows(res: dict) -> None:
    """The kernels of a current-scaling quantization back to back (``fp8_parts.part_castchain``): the GPU's time per
    kernel replayed from a CUDA graph, the time per kernel when the host issues them, and the fixed time the model
    charges every kernel."""
    rows = res.get("castchain")
    if not isinstance(rows, list):
        return
    for r in rows:
        parts = ", ".join(f"{k} {r[f'{k}_graph_s'] * 1e6:.1f}/{r[f'{k}_eager_s'] * 1e6:.1f}"
                          for k in ("amax", "scale", "cast", "cast_transpose") if f"{k}_graph_s" in r)
        print(f"quantize kernels, {r['rows']:5d}×{r['cols']} bf16, µs per kernel graph/eager: {parts} "
              f"(model's fixed time {GPU.kernel_fixed_s * 1e6:.1f} µs a kernel)")


def attn_pred(row: dict, backward: bool) -> float:
    kernel = {"FLASH_ATTENTION": "flash2", "CUDNN_ATTENTION": "cudnn"}[row["backend"]]
    b, h, s, d = row["batch"], row["heads"], row["seq"], row["head_dim"]
    dv = row.get("v_head_dim", d)
    fwd = 2.0 * b * h * s * s * (d + dv) / 2  # QKᵀ and PV, causal half executed (the benchmark's convention)
    flops = fwd * (2.5 if backward else 1.0)
    nbytes = B * b * h * s * (2 * d + dv + dv) * (2.0 if backward else 1.0)
    return float(attention_time(GPU, np.array(flops), np.array(nbytes), "bf16", backward=backward, kernel=kernel,
                                causal=True, head_dim=d, seq=s))


def summarise(label: str, pairs: list[tuple[str, float, float]]) -> None:
    """pairs: (name, predicted s, measured s)."""
    if not pairs:
        return
    r = [p / m for _, p, m in pairs]
    q = np.percentile(r, [10, 50, 90])
    print(f"{label:34s} n={len(r):3d}  predicted/measured median {q[1]:.3f}  p10 {q[0]:.3f}  p90 {q[2]:.3f}  "
          f"time-weighted {sum(p for _, p, _ in pairs) / sum(m for _, _, m in pairs):.3f}")
    worst = sorted(pairs, key=lambda x: abs(np.log(x[1] / x[2])), reverse=True)[:3]
    for name, p, m in worst:
        print(f"    {name:60s} pred {p * 1e6:9.1f} µs  meas {m * 1e6:9.1f} µs  ratio {p / m:.2f}")


def kernel_groups(res: dict) -> dict[str, list[tuple[str, float, float]]]:
    groups: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for g in res.get("gemm", []):
        key = "gemm decode" if g["pass"] == "decode" else f"gemm {g['pass']}"
        groups[key].append((f"{g['name']} {g['pass']} {g['m']}x{g['n']}x{g['k']}",
                            gemm_pred(g["m"], g["n"], g["k"]), g["s"]))
    for a in res.get("attn", []):
        if "fwd_s" not in a:
            continue
        name = f"{a['backend'][:5]} d{a['head_dim']} h{a['heads']} s{a['seq']} b{a['batch']}"
        groups[f"attn {a['backend'][:5].lower()} fwd"].append((name, attn_pred(a, False), a["fwd_s"]))
        groups[f"attn {a['backend'][:5].lower()} bwd"].append((name, attn_pred(a, True), a["fwdbwd_s"] - a["fwd_s"]))
    for g in res.get("grouped", []):
        if "grouped_fwd_s" not in g:
            continue
        m = g["local_experts"] * g["rows_per_expert"]
        name = f"{g['model']} ep{g['ep']} {g['gemm']} E{g['local_experts']} rows{g['rows_per_expert']}"
        p = gemm_pred(m, g["n"], g["k"], g["local_experts"])
        groups["torch._grouped_mm fwd (model: per expert)"].append((name, p, g["grouped_fwd_s"]))
        groups["torch._grouped_mm fwd (as one GEMM)"].append((name, gemm_pred(m, g["n"], g["k"]), g["grouped_fwd_s"]))
        if "loop_fwd_s" in g:
            groups["per-expert matmul loop fwd"].append((name, p, g["loop_fwd_s"]))
    for x in res.get("membw", []):
        groups["eager add (elementwise curve)"].append(
            (f"add {x['add_bytes']} B", float(elementwise_time(GPU, np.array(x["add_bytes"]))), x["add_s"]))
        groups["copy (memory curve)"].append(
            (f"copy {x['copy_bytes']} B", float(with_launch(GPU, memory_time(GPU, np.array(x["copy_bytes"])))),
             x["copy_s"]))
    for x in res.get("gather", []):
        # the model's permute and unpermute: one eager pass reading and writing every routed row (core.operators)
        price = float(elementwise_time(GPU, np.array(x["permute_bytes"])))
        name = f"{x['tokens']} tokens × top-{x['k']}, h {x['h']}"
        groups["MoE permute: row gather"].append((name, price, x["permute_s"]))
        groups["MoE unpermute: gather + k-way sum"].append((name, price, x["unpermute_gather_sum_s"]))
        groups["MoE unpermute: bf16 index_add_ (atomics)"].append((name, price, x["index_add_bf16_s"]))
    opt = {r["stage"]: r for r in res.get("optim", [])}
    if "total" in opt:
        n = opt["total"]["params"]
        per = optimizer_bytes_per_param(TrainWorkload(seq_len=1, global_batch=1))
        p = float(multi_tensor_time(GPU, np.array(n * per)) + multi_tensor_time(GPU, np.array(n * 4.0)))
        groups["optimizer step (fp32 master)"].append((f"{n:.0e} params", p, opt["total"]["s"]))
    return groups


STEP_CONFIG = {False: "h200-eager.yaml", True: "h200-compiled.yaml"}


def step_rows(res: dict) -> None:
    """Each measured step against ``estimate train`` of the same model and software on one GPU: forward+backward per
    microbatch (the measured optimizer keeps bf16 moments, the model's an fp32 master: compared apart), kernel time by
    category, and memory held after the forward against the model's stored activations."""
    rows = [r for part in ("step", "compiled", "mbsweep") for r in res.get(part, []) if "step_s" in r]
    for r in rows:
        accum = r.get("accum", 1)
        rep = estimate_training(str(HERE / "configs" / f"llama-3.1-8b-{r['layers']}l.json"),
                                str(HERE / "configs" / STEP_CONFIG[r.get("compiled", False)]), gpus=1,
                                global_batch=r["microbatch"] * accum, seq_len=r["seq"], microbatch=r["microbatch"],
                                recompute=r["recompute"], grad_dtype="bf16")
        fb_pred = (rep.metrics.step_time_s - rep.metrics.optimizer_s) / accum
        kern = r["kernel_s_by_category"]
        # after the forward the loss holds its fp32 log_softmax output (4 B per logit), not its 12 B backward peak
        transient = (LOSS_BYTES_PER_LOGIT["torch_fp32"] - 4.0) * 128_256 * r["microbatch"] * r["seq"]
        mem = "" if "after_forward_bytes" not in r else (
            f"; after forward pred {(rep.memory.activations_bytes - transient) / 2**30:.2f} GiB meas "
            f"{r['after_forward_bytes'] / 2**30:.2f} GiB")
        print(f"L{r['layers']} s{r['seq']} mb{r['microbatch']}x{accum} {r['recompute']:4s} "
              f"{'compiled' if r.get('compiled') else 'eager':8s} fwd+bwd pred {fb_pred * 1e3:7.1f} ms  meas "
              f"{r['fwdbwd_s'] * 1e3:7.1f} ms  ({fb_pred / r['fwdbwd_s'] - 1:+.1%}); step meas "
              f"{r['step_s'] * 1e3:.1f} ms{mem}")
        print("      measured kernels (ms, one step): " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in kern.items()))


def op_times(model: ModelSpec, system: str, seq: int, tp: int = 1, kind: str | None = None) -> dict[str, float]:
    """The model's kernel time of one microbatch's forward+backward on one GPU, by operator kind, without collectives:
    the whole step of one TP rank (per-layer kinds times the layer count), or one layer of ``kind``."""
    work = TrainWorkload(seq_len=seq, global_batch=1, grad_dtype="bf16")
    ctx = Ctx(model, resolve_system(str(HERE / "configs" / system)), work,
              LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=1, microbatch=1)], 1))
    by: dict[str, float] = defaultdict(float)
    for name, costs in kind_costs(ctx).items():
        if kind is not None and name != kind:
            continue
        n = model.num_layers if kind is None and name in ("attention", "mlp") else 1
        for op in (*costs.fwd_ops, *costs.bwd_ops):
            by[op.kind] += float(np.ravel(op.time)[0]) * n
    by.pop("comm", None)
    return dict(by)


def tp8_rows(res: dict) -> None:
    """One TP-8 rank of Llama-3.1-70B (16 layers) run alone against the model's compute for that rank."""
    for r in res.get("tp8rank", []):
        if "fwdbwd_s" not in r:
            continue
        by = op_times(resolve_model(str(HERE / "configs" / "llama-3.1-70b-16l.json")), "h200-eager.yaml", r["seq"], 8)
        kern = r["kernel_s_by_category"]
        print(f"70B TP-8 rank, 16 layers, s{r['seq']}: fwd+bwd pred {sum(by.values()) * 1e3:.1f} ms meas "
              f"{r['fwdbwd_s'] * 1e3:.1f} ms ({sum(by.values()) / r['fwdbwd_s'] - 1:+.1%}); GEMM "
              f"{by['gemm'] * 1e3:.1f}/{kern['gemm'] * 1e3:.1f}, attention {by['attn'] * 1e3:.1f}/"
              f"{kern['attention'] * 1e3:.1f}, elementwise {by['mem'] * 1e3:.1f}/{kern['elementwise'] * 1e3:.1f} ms")


def moe_rows(res: dict) -> None:
    """The measured MoE blocks (Qwen3-30B-A3B's shape, EP 1, no host copy) against the model's MoE layer for the same
    tokens, forward+backward, under ``configs/h200-grouped-mm.yaml``."""
    moe = res.get("moe", {})
    for key, r in moe.items():
        if not key.endswith("_nosync") or "wall_s" not in r:
            continue
        tokens = int(key[1:].split("_")[0])
        by = op_times(get_model("qwen3-30b-a3b"), "h200-grouped-mm.yaml", tokens, kind="moe")
        cats = r["kernel_s_by_category"]
        n = r["layers"]
        print(f"MoE layer, {tokens} tokens, fwd+bwd: predicted {sum(by.values()) * 1e3:.2f} ms (GEMM "
              f"{by['gemm'] * 1e3:.2f}, other {(sum(by.values()) - by['gemm']) * 1e3:.2f}); measured wall "
              f"{r['wall_s'] / n * 1e3:.2f} ms (GEMM {cats['gemm'] / n * 1e3:.2f}, other "
              f"{(r['gpu_busy_s'] - cats['gemm']) / n * 1e3:.2f})")


PHASE_MODES = (("full", True, "full"), ("full_noearly", False, "full"), ("full_reentrant", False, "full"),
               ("mlp_reentrant", False, "mlp"), ("mlp", True, "mlp"))


def _phase_kinds(model: ModelSpec, tp: int, seq: int, early: bool, compiled: bool = False) -> tuple[Ctx, dict]:
    """The measured shape's per-kind costs on one GPU under the eager (or compiled) step's system file, early stop
    on or off."""
    base = resolve_system(str(HERE / "configs" / STEP_CONFIG[compiled]))
    sw = base.software.model_copy(update={"recompute_early_stop": early})
    ctx = Ctx(model, base.model_copy(update={"software": sw}), TrainWorkload(seq_len=seq, global_batch=1,
                                                                            grad_dtype="bf16"),
              LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=1, microbatch=1)], 1))
    return ctx, kind_costs(ctx)


def _secs(ops: list) -> float:
    return sum(float(np.ravel(o.time)[0]) for o in ops if o.kind != "comm")


def phase_rows(res: dict) -> None:
    """Forward, backward and each recompute granularity's rerun (backward under it less the plain backward) against
    the model's operators for the same shape on one GPU, collectives left out (none ran): full recompute with and
    without early stop (``layers.full_rerun_ops``), Megatron's ``mlp`` module (its reentrant region reruns FC2); and
    the memory the mlp recompute frees against the model's."""
    for r in [*res.get("phases", []), *res.get("phases_compiled", [])]:
        if "none" not in r:
            continue
        tp = 8 if r["shape"] else 1
        cfg = "llama-3.1-70b-16l.json" if r["shape"] else f"llama-3.1-8b-{r['layers']}l.json"
        model = resolve_model(str(HERE / "configs" / cfg))
        compiled = bool(r.get("compiled"))
        ctx, k = _phase_kinds(model, tp, r["seq"], True, compiled)
        fwd, bwd = ((_secs(getattr(k["embedding"], ph)) + _secs(getattr(k["head"], ph))
                     + model.num_layers * sum(_secs(getattr(k[x], ph)) for x in ("attention", "mlp")))
                    for ph in ("fwd_ops", "bwd_ops"))
        none = r["none"]
        print(f"phases L{r['layers']} s{r['seq']} {'70B TP-8 rank' if tp > 1 else '8B'}"
              f"{' compiled' if compiled else ''}: forward pred "
              f"{fwd * 1e3:.1f} meas {none['fwd_s'] * 1e3:.1f} ms, backward pred {bwd * 1e3:.1f} meas "
              f"{none['bwd_s'] * 1e3:.1f} ms")
        for mode, early, what in PHASE_MODES:
            if mode not in r:  # run 8 measured none / full / mlp / norm
                continue
            if compiled and mode == "full_noearly":  # the context manager breaks the compiled graph: not comparable
                continue
            ctx, k = _phase_kinds(model, tp, r["seq"], early, compiled)
            if what == "full":
                pred = model.num_layers * sum(_secs(full_rerun_ops(ctx, x, k[x].fwd_ops)) for x in ("attention", "mlp"))
            else:  # Megatron's mlp module (a reentrant region: FC2 rerun), its compute (no collective ran)
                compute = [o for o in k["mlp"].fwd_ops if o.kind != "comm"]
                pred = model.num_layers * float(module_times("mlp", compute, {"mlp": 0})["mlp"][0])
            meas = r[mode]["bwd_s"] - none["bwd_s"]
            if mode == "mlp":  # no Megatron knob runs the module non-reentrantly: what early stop spares, not a miss
                print(f"   rerun {mode:15s} (the model prices Megatron's reentrant module) meas {meas * 1e3:6.1f} ms")
                continue
            print(f"   rerun {mode:15s} pred {pred * 1e3:6.1f} meas {meas * 1e3:6.1f} ms ({pred / meas - 1:+.1%}); "
                  f"held after forward {r[mode]['after_forward_bytes'] / 2**30:.2f} GiB")
        if "mlp" not in r:
            continue
        freed = model.num_layers * float(module_bytes(ctx, "mlp")["mlp"][0]) / 2**30
        print(f"   mlp recompute frees pred {freed:.2f} meas "
              f"{(none['after_forward_bytes'] - r['mlp']['after_forward_bytes']) / 2**30:.2f} GiB")


TITAN_MODES = (("none", "none", None), ("full", "full", None), ("op", "selective", ["torchtitan_op"]))


def titan_rows(res: dict) -> None:
    """torchtitan's block (``titan_parts``) under no AC, full AC and its per-op selective AC against ``estimate
    train`` with ``configs/h200-torchtitan.yaml``: forward, backward (recompute included), the rerun, and the memory
    held after the forward (less the loss's backward transient, as ``step_rows``); kernel time by category."""
    for r in res.get("titan", []):
        if "none" not in r:
            continue
        cfg = str(HERE / "configs" / f"llama-3.1-8b-{r['layers']}l.json")
        transient = (LOSS_BYTES_PER_LOGIT["torch_fp32"] - 4.0) * 128_256 * r["seq"]
        for mode, rc, mods in TITAN_MODES:
            rep = estimate_training(cfg, str(HERE / "configs" / "h200-torchtitan.yaml"), gpus=1, global_batch=1,
                                    seq_len=r["seq"], microbatch=1, recompute=rc, recompute_modules=mods,
                                    grad_dtype="bf16")
            st, m = rep.stages[0], r[mode]
            rerun = m["bwd_s"] - r["none"]["bwd_s"]
            print(f"torchtitan block L{r['layers']} s{r['seq']} {mode:4s}: forward pred {st.fwd_time_s * 1e3:6.1f} "
                  f"meas {m['fwd_s'] * 1e3:6.1f} ms, backward pred {st.bwd_time_s * 1e3:6.1f} meas "
                  f"{m['bwd_s'] * 1e3:6.1f} ms, rerun pred {st.recompute_time_s * 1e3:5.1f} meas {rerun * 1e3:5.1f} "
                  f"ms; held after forward pred {(rep.memory.activations_bytes - transient) / 2**30:.2f} meas "
                  f"{m['after_forward_bytes'] / 2**30:.2f} GiB")
        for phase in ("fwd", "bwd"):
            if f"none_{phase}_kernels" in r:
                cats = r[f"none_{phase}_kernels"][0]
                print(f"      measured {phase} kernels (ms): "
                      + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in cats.items()))


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as fh:
            res = json.load(fh)
        env = res["env"]
        print(f"== {Path(path).name}: {env['name']}, torch {env['torch']}, 8192³ bf16 {env['gemm_8192_tflops']:.0f} "
              f"TFLOP/s, fp8 {env.get('fp8', {}).get('8192', {}).get('tflops', float('nan')):.0f} TFLOP/s")
        if "clocks" in res:
            c = res["clocks"]["samples"][5:]
            print(f"continuous 8192³ bf16 for {res['clocks']['seconds']:.1f} s: {res['clocks']['tflops']:.0f} TFLOP/s, "
                  f"SM clock median {statistics.median(float(x[1]) for x in c):.0f} MHz, power "
                  f"{statistics.median(float(x[3]) for x in c):.0f} W")
        for label, pairs in kernel_groups(res).items():
            summarise(label, pairs)
        step_rows(res)
        tp8_rows(res)
        moe_rows(res)
        phase_rows(res)
        titan_rows(res)
        fp8_rows(res)
        fp8_decode_rows(res)
        cast_chain_rows(res)


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(str(p) for p in (HERE / "results").glob("h200_run*.json")))
