"""Full recompute under PyTorch's non-reentrant checkpoint stops its rerun early (``layers.full_rerun_ops``): a dense
MLP's FC2, the collectives on its output and the residual add are not rerun. Hand sums over the layer's operators,
the stacks it applies to and not, and the H200 measurements of benchmarks/gpu/RESULTS.md §9 (runs 8 and 9)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardplan.api import estimate_training
from shardplan.costmodel.core.ops import COMM
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layers import full_rerun_ops
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.recompute_modules import module_bytes
from shardplan.costmodel.training.stages import kind_costs, model_flops_parts
from shardplan.hardware import get_system
from shardplan.hardware.load import resolve_system
from shardplan.hardware.spec import SystemSpec
from shardplan.models import get_model
from shardplan.models.load import resolve_model

GPU_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _early(system: SystemSpec, on: bool = True) -> SystemSpec:
    return system.model_copy(update={"software": system.software.model_copy(update={"recompute_early_stop": on})})


def _ctx(model: str, system: SystemSpec, dtype: str = "bf16", tp: int = 2) -> Ctx:
    work = TrainWorkload(seq_len=4096, global_batch=8, dtype=dtype)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=8 // tp, microbatch=1, sequence_parallel=True)], 8)
    return Ctx(get_model(model), system, work, rows)


def _t(ops: list, names: tuple[str, ...] | None = None) -> float:
    return sum(float(np.ravel(o.time)[0]) for o in ops if names is None or o.name in names)


def test_the_rerun_stops_before_fc2_by_hand() -> None:
    k = kind_costs(_ctx("llama-3.1-8b", _early(get_system("dgx-h100"))))
    mlp = k["mlp"]
    names = [o.name for o in mlp.fwd_ops]
    assert names == ["mlp.norm", "mlp.tp_allgather", "mlp.tp_regather", "mlp.fc1", "mlp.act", "mlp.fc2",
                     "mlp.tp_allreduce", "mlp.tp_reducescatter", "mlp.residual"]
    # rerun: the norm, SP all-gather, FC1 and SwiGLU (the input's re-gather runs in backward only); FC2, its
    # reduce-scatter and the residual add are skipped
    assert _t(mlp.fwd_ops, ("mlp.tp_regather",)) == 0.0
    kept = _t(mlp.fwd_ops, ("mlp.norm", "mlp.tp_allgather", "mlp.fc1", "mlp.act"))
    assert float(mlp.rerun.time[0]) == pytest.approx(kept, rel=1e-12)
    assert float(mlp.fwd.time[0] - mlp.rerun.time[0]) == pytest.approx(
        _t(mlp.fwd_ops, ("mlp.fc2", "mlp.tp_allreduce", "mlp.tp_reducescatter", "mlp.residual")), rel=1e-12)
    # FC2 alone: 2·T·f·h/t FLOPs are not rerun
    fc2 = 2 * 4096 * 14336 * 4096 / 2
    assert float(mlp.fwd.flops[0] - mlp.rerun.flops[0]) == pytest.approx(fc2, rel=1e-12)
    # the attention layer reruns whole
    assert float(k["attention"].rerun.time[0]) == float(k["attention"].fwd.time[0])


@pytest.mark.parametrize(("model", "dtype", "on"), [("llama-3.1-8b", "bf16", False),  # Megatron: reentrant
                                                     ("llama-3.1-8b", "fp8", True),  # FC2 saves after its GEMM
                                                     ("qwen3-30b-a3b", "bf16", True)])  # MoE combine keeps FC2's out
def test_the_whole_forward_reruns_where_the_stop_comes_later(model: str, dtype: str, on: bool) -> None:
    for kind, c in kind_costs(_ctx(model, _early(get_system("dgx-h100"), on), dtype)).items():
        if kind == "mlp" and get_model(model).moe is not None:  # no dense layer to price
            continue
        assert np.array_equal(c.rerun.time, c.fwd.time), kind
        assert np.array_equal(c.rerun.flops, c.fwd.flops), kind


def test_the_step_prices_the_shorter_rerun_and_counts_it_in_hfu() -> None:
    base = get_system("dgx-h100")
    kw = dict(gpus=8, global_batch=8, seq_len=4096, tp=2, sequence_parallel=True, recompute="full")
    full = estimate_training("llama-3.1-8b", base, **kw)
    early = estimate_training("llama-3.1-8b", _early(base), **kw)
    k = kind_costs(_ctx("llama-3.1-8b", _early(base)))
    skipped = float(k["mlp"].fwd.time[0] - k["mlp"].rerun.time[0])
    layers = full.stages[0].layers
    assert full.stages[0].recompute_time_s - early.stages[0].recompute_time_s == pytest.approx(layers * skipped,
                                                                                                rel=1e-9)
    # hardware FLOPs: the recompute's share of the model FLOPs, (HFU - MFU)/MFU, less by FC2's forward in every
    # layer (2·f·h per token over the whole batch) and nothing else
    model_flops = 8 * 4096 * model_flops_parts(get_model("llama-3.1-8b"), 4096).total

    def rc_share(rep) -> float:  # type: ignore[no-untyped-def]
        return (rep.metrics.hfu - rep.metrics.mfu) / rep.metrics.mfu

    fc2_flops = 32 * 2 * 8 * 4096 * 14336 * 4096
    assert rc_share(full) - rc_share(early) == pytest.approx(fc2_flops / model_flops, rel=1e-9)
    assert early.metrics.hfu > early.metrics.mfu


def test_pytorch_stacks_stop_early_and_megatron_does_not() -> None:
    base = get_system("dgx-h100")
    assert not framework_system(base, "torchtitan").software.recompute_early_stop  # off since 25413d224
    assert framework_system(base, "fsdp").software.recompute_early_stop
    assert framework_system(base, "automodel", get_model("llama-3.1-8b")).software.recompute_early_stop
    moe = get_model("qwen3-30b-a3b")  # its dense MLPs are Transformer Engine linears
    assert not framework_system(base, "automodel", moe).software.recompute_early_stop
    assert not framework_system(base, "megatron").software.recompute_early_stop
    assert not base.software.recompute_early_stop


# --- the H200 measurements (benchmarks/gpu/RESULTS.md §9) ------------------------------------------------------------

def _phases() -> list[dict]:
    return json.loads((GPU_DIR / "results" / "h200_run9.json").read_text())["phases"]


def _rerun_s(r: dict, on: bool, modules: tuple[str, ...] = ()) -> float:
    """The model's rerun per step for the measured shape on one GPU, collectives left out (none ran)."""
    cfg = "llama-3.1-70b-16l.json" if r["shape"] else f"llama-3.1-8b-{r['layers']}l.json"
    model = resolve_model(str(GPU_DIR / "configs" / cfg))
    ctx = Ctx(model, _early(resolve_system(str(GPU_DIR / "configs" / "h200-eager.yaml")), on),
              TrainWorkload(seq_len=r["seq"], global_batch=1, grad_dtype="bf16"),
              LayoutArrays.from_layouts([TrainLayout(tp=8 if r["shape"] else 1, dp=1, microbatch=1)], 1))
    k = kind_costs(ctx)
    if modules:
        return model.num_layers * sum(float(k["mlp"].modules[m].time[0]) for m in modules)
    return model.num_layers * sum(_t([o for o in full_rerun_ops(ctx, kind, k[kind].fwd_ops) if o.kind != COMM])
                                  for kind in ("attention", "mlp"))


@pytest.mark.parametrize("i", [0, 1, 2])
def test_full_recompute_against_the_h200(i: int) -> None:
    r = _phases()[i]

    def measured(mode: str) -> float:
        return r[mode]["bwd_s"] - r["none"]["bwd_s"]

    # early stop (PyTorch's default): 16-layer 8B -5.7%, the 70B TP-8 rank +1.3%, 8 layers at 4k -2.8%
    assert abs(_rerun_s(r, True) / measured("full") - 1) < 0.07
    # the whole forward: early stop off (-2%…-26%) and reentrant (-3%…-14%); the model lands between their readings
    whole = _rerun_s(r, False)
    assert min(measured("full_noearly"), measured("full_reentrant")) * 0.85 < whole
    assert whole < max(measured("full_noearly"), measured("full_reentrant")) * 1.06
    # and the stop saves what FC2 and the residual cost: the measured gap within 30% of the model's
    gap = measured("full_noearly") - measured("full")
    assert (whole - _rerun_s(r, True)) == pytest.approx(gap, rel=0.30)


def test_mlp_recompute_frees_what_the_h200_freed() -> None:
    r = _phases()[0]
    freed = r["none"]["after_forward_bytes"] - r["mlp"]["after_forward_bytes"]
    ctx = Ctx(resolve_model(str(GPU_DIR / "configs" / "llama-3.1-8b-16l.json")),
              resolve_system(str(GPU_DIR / "configs" / "h200-eager.yaml")),
              TrainWorkload(seq_len=8192, global_batch=1, grad_dtype="bf16"),
              LayoutArrays.from_layouts([TrainLayout(tp=1, dp=1, microbatch=1)], 1))
    # FC1's output, eager SwiGLU's silu output and the FC2 input: 8·f bytes per token in each of 16 layers
    assert float(module_bytes(ctx, "mlp")["mlp"][0]) * 16 == pytest.approx(16 * 8192 * 8 * 14336, rel=1e-12)
    assert float(module_bytes(ctx, "mlp")["mlp"][0]) * 16 == pytest.approx(freed, rel=0.01)
    # Megatron's mlp module reruns FC2 too (reentrant): the measured reentrant region within 6%
    assert _rerun_s(r, True, ("mlp",)) == pytest.approx(r["mlp_reentrant"]["bwd_s"] - r["none"]["bwd_s"], rel=0.06)


@pytest.mark.parametrize("i", [0, 1])
def test_torchtitan_checkpointing_against_the_h200(i: int) -> None:
    """torchtitan's block (separate projections, composite norm, complex rotary) under full AC and its per-op
    selective AC (run 10): memory held after the forward within 3%; the reruns within the model's GEMM price, which
    is 1.26-1.28x the GEMMs this GPU ran in these steps (RESULTS.md §9)."""
    r = json.loads((GPU_DIR / "results" / "h200_run10.json").read_text())["titan"][i]
    cfg = str(GPU_DIR / "configs" / f"llama-3.1-8b-{r['layers']}l.json")
    transient = 8.0 * 128_256 * r["seq"]  # the loss's backward-only share (memory.LOSS_BYTES_PER_LOGIT)
    for mode, rc, mods in (("full", "full", None), ("op", "selective", ["torchtitan_op"])):
        rep = estimate_training(cfg, str(GPU_DIR / "configs" / "h200-torchtitan.yaml"), gpus=1, global_batch=1,
                                seq_len=r["seq"], recompute=rc, recompute_modules=mods, grad_dtype="bf16")
        assert rep.memory.activations_bytes - transient == pytest.approx(r[mode]["after_forward_bytes"], rel=0.03)
        rerun = r[mode]["bwd_s"] - r["none"]["bwd_s"]
        assert 0.95 < rep.stages[0].recompute_time_s / rerun < 1.35, mode
    gemm = r["none_fwd_kernels"][0]["gemm"] + r["none_bwd_kernels"][0]["gemm"]
    model = resolve_model(cfg)
    ctx = Ctx(model, resolve_system(str(GPU_DIR / "configs" / "h200-torchtitan.yaml")),
              TrainWorkload(seq_len=r["seq"], global_batch=1, grad_dtype="bf16"),
              LayoutArrays.from_layouts([TrainLayout(tp=1, dp=1, microbatch=1)], 1))
    k = kind_costs(ctx)
    priced = sum((model.num_layers if kind in ("attention", "mlp") else 1)
                 * sum(float(o.time[0]) for o in (*c.fwd_ops, *c.bwd_ops) if o.kind == "gemm") for kind, c in k.items())
    assert 1.2 < priced / gemm < 1.35


@pytest.mark.parametrize("on", [True, False])
def test_torchtitans_op_policy_spares_the_residual_add_only_under_early_stop(on: bool) -> None:
    """torchtitan's per-op policy saves w2's output; what follows it (the residual add, the all-reduce without SP)
    reruns unless early stop has every saved tensor back first, as its full AC (same flag)."""
    from shardplan.costmodel.training.recompute_modules import policy_shares

    work = TrainWorkload(seq_len=4096, global_batch=8)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=2, dp=4, microbatch=1)], 8)
    ctx = Ctx(get_model("llama-3.1-8b"), _early(get_system("dgx-h100"), on), work, rows)
    fwd = kind_costs(ctx)["mlp"].fwd_ops
    shares = dict(zip((o.name for o in fwd), policy_shares(ctx, "mlp", "torchtitan_op", fwd), strict=True))
    assert float(shares["mlp.residual"][0]) == (0.0 if on else 1.0)
    assert float(shares["mlp.tp_allreduce"][0]) == (0.0 if on else 1.0)
    assert float(shares["mlp.norm"][0]) == 1.0 and float(shares["mlp.act"][0]) == 1.0


def test_compiled_blocks_rerun_as_early_stop_prices() -> None:
    """Blocks under torch.compile with a full checkpoint inside (run 11): AOTAutograd's partitioner recomputes only
    what the backward reads, so FC2 is spared there too: 93.1 ms measured, 100.4 priced with early stop, 125.9 as the
    whole forward (the torchtitan records' compiled rows state it so)."""
    (r,) = json.loads((GPU_DIR / "results" / "h200_run11.json").read_text())["phases_compiled"]
    model = resolve_model(str(GPU_DIR / "configs" / "llama-3.1-8b-16l.json"))
    base = resolve_system(str(GPU_DIR / "configs" / "h200-compiled.yaml"))
    measured = r["full"]["bwd_s"] - r["none"]["bwd_s"]

    def rerun(on: bool) -> float:
        ctx = Ctx(model, _early(base, on), TrainWorkload(seq_len=8192, global_batch=1, grad_dtype="bf16"),
                  LayoutArrays.from_layouts([TrainLayout(tp=1, dp=1, microbatch=1)], 1))
        k = kind_costs(ctx)
        return 16 * sum(_t([o for o in full_rerun_ops(ctx, x, k[x].fwd_ops) if o.kind != COMM])
                        for x in ("attention", "mlp"))

    assert rerun(True) == pytest.approx(measured, rel=0.10)
    assert rerun(False) / measured > 1.25
