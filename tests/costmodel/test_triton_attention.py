"""FlashAttention in Triton (llm-foundry's ``attn_impl: triton``): FlashAttention-2's rate over the speedups Dao 2023
measured against it (arXiv 2307.08691 §4.1: forward 1.3-1.5×, backward 2×), and which llm-foundry records ran it."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import TRITON_SLOWDOWN, attention_efficiency, attention_time
from shardplan.hardware import get_system


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-a100-80gb"])
def test_triton_runs_at_flash2_rate_over_the_measured_speedup(system: str) -> None:
    gpu = get_system(system).gpu
    flops, nbytes = np.array([4e12]), np.array([1e8])  # compute-bound: the time is flops / (peak · efficiency)
    for backward, slower in ((False, 1.4), (True, 2.0)):
        t2 = attention_time(gpu, flops, nbytes, "bf16", backward=backward, kernel="flash2", seq=8192.0)
        tt = attention_time(gpu, flops, nbytes, "bf16", backward=backward, kernel="triton", seq=8192.0)
        fixed = gpu.kernel_fixed_s  # the per-kernel fixed time is not scaled
        assert (tt - fixed) / (t2 - fixed) == pytest.approx(slower, rel=1e-9)
    assert TRITON_SLOWDOWN == (1.4, 2.0)
    # on a GPU with FlashAttention-2 curves, the curve read is the same
    h100 = get_system("dgx-h100").gpu
    e2 = attention_efficiency(h100, "flash2", backward=True, causal=True, head_dim=128, seq=32768.0)
    et = attention_efficiency(h100, "triton", backward=True, causal=True, head_dim=128, seq=32768.0)
    assert et == pytest.approx(e2 / 2.0)


def _records() -> dict[str, dict]:
    runs = json.loads(resources.files("shardplan.data").joinpath("optimum_runs.json").read_text())["runs"]
    return {r["id"]: r for r in runs if r["id"].startswith("llmfoundry-")}


def test_which_llm_foundry_tables_ran_triton() -> None:
    """The 8-GPU H100 and the A100 tables (published 300cc5c5 to b2a43a14, 2023-05 to 2023-10: submit_benchmarks.py
    defaults to 'triton' at every commit and sweep.sh never sets --attn_impl) and the 13B/30B rows of the ≥128-GPU
    table (#838, 5e85bd62: sweep.py '--attn_impl triton' for 13b.yaml and 30b.yaml, 'flash' for the rest)."""
    from shardplan.validation.stacks import stack_attention, stack_software

    recs = _records()
    triton = {rid for rid, r in recs.items() if stack_attention(r) == "triton"}
    large = {rid for rid, r in recs.items() if "Large Scale" in r["source"]["locator"]}
    assert triton == {rid for rid in recs if rid not in large or "-13b-" in rid or "-30b-" in rid}
    assert len(triton) == 17 and len(recs) - len(triton) == 6
    # the Triton path passes [b, s, h, d] whole: no varlen unpadding (llm-foundry b2a43a14 attention.py
    # triton_flash_attn_fn); flash_attn_fn's index_first_axis/pad_input copies stay with the flash rows
    for rid, r in recs.items():
        assert stack_software(r)["attention_unpad"] is (rid not in triton)


@pytest.mark.parametrize(("system", "cp"), [("dgx-h100", 1), ("dgx-h100", 2), ("dgx-a100-80gb", 2)])
def test_training_layers_price_it_the_same_way(system: str, cp: int) -> None:
    """The training layer's flash kernels (``Ctx.flash_time``: its own CP weighting of causal and full chunks on GPUs
    with curves, ``attention_time`` elsewhere) run the Triton kernel at the same factors."""
    from shardplan.costmodel.training.evaluate import _checked
    from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
    from shardplan.costmodel.training.step import train_cost
    from shardplan.hardware.software import AttentionKernel
    from shardplan.models import get_model

    model, base = get_model("llama-3.1-8b"), get_system(system)
    work = TrainWorkload(seq_len=16384, global_batch=8)
    times = {}
    for kernel in (AttentionKernel.FLASH2, AttentionKernel.TRITON):
        sysk = base.model_copy(update={"software": base.software.model_copy(update={"attention": kernel})})
        lay = _checked(model, sysk, 8, work, TrainLayout(dp=8 // cp, cp=cp))
        ops = train_cost(model, sysk, work, LayoutArrays.from_layouts([lay], work.global_batch)).kinds["attention"]
        times[kernel] = {o.name: float(o.time[0]) for o in [*ops.fwd_ops, *ops.bwd_ops]}
    fixed = base.gpu.kernel_fixed_s
    for name, slower in (("attn.flash", 1.4), ("attn.flash.bwd", 2.0)):
        t2, tt = times[AttentionKernel.FLASH2][name], times[AttentionKernel.TRITON][name]
        assert (tt - fixed) / (t2 - fixed) == pytest.approx(slower, rel=1e-6)
