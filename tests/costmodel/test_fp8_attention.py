"""cuDNN's fused attention on fp8 Q/K/V (Transformer Engine's fp8_dpa, ``--attention cudnn-fp8``) at its measured
speed. NVIDIA's cuDNN benchmark runs one Llama-3.1 layer (batch 2 on GB200/GB300, 1 on H200; 64 query heads, 8 KV
heads, head dim 128, causal;
NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/llama3.1) in bf16 and fp8 at 8,192 tokens:
GB200 forward 1.397 → 1.074 ms, backward 4.127 → 3.781 ms; GB300 1.185 → 0.759 and 3.832 → 3.087 ms; H200 (cuDNN 9.19)
1.708 → 1.141 and 5.083 → 6.392 ms, its fp8 backward slower. Llama-3.1-8B (32 heads) at microbatch 4 (2 on the H200)
is the same (sequence, head) pairs at head dim 128, so its attention kernels should take those ratios, and on GB200
(whose bf16 forward curve, cuDNN 9.17, agrees with this benchmark's bf16 forward within 1%) the forward's time. Its
bf16 backward curve is 10% slower than this benchmark's (cuDNN 9.22), and so is the fp8 backward priced from it."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core.kernels import fp8_attention_ratio
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stages import kind_costs
from shardplan.hardware import get_system
from shardplan.hardware.gpus import GPUS
from shardplan.hardware.spec import AttentionKernel
from shardplan.models import get_model


def _flash(system: str, attention: AttentionKernel) -> tuple[float, float]:
    mb = 2 if system == "hgx-h200" else 4
    work = TrainWorkload(seq_len=8192, global_batch=8 * mb, dtype="fp8", attention=attention)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, microbatch=mb, zero_stage=1)], 8 * mb)
    costs = kind_costs(Ctx(get_model("llama-3.1-8b"), get_system(system), work, rows))
    ops = {o.name: o for c in costs.values() for o in c.fwd_ops + c.bwd_ops}
    return float(np.ravel(ops["attn.flash"].time)[0]), float(np.ravel(ops["attn.flash.bwd"].time)[0])


@pytest.mark.parametrize(("system", "fwd", "bwd"), [("gb200-nvl72", (1.397, 1.074), (4.127, 3.781)),
                                                    ("gb300-nvl72", (1.185, 0.759), (3.832, 3.087)),
                                                    ("hgx-h200", (1.708, 1.141), (5.083, 6.392))])
def test_fp8_attention_runs_at_cudnns_measured_ratio(system: str, fwd: tuple[float, float],
                                                     bwd: tuple[float, float]) -> None:
    f16, b16 = _flash(system, AttentionKernel.CUDNN)
    f8, b8 = _flash(system, AttentionKernel.CUDNN_FP8)
    assert f16 / f8 == pytest.approx(fwd[0] / fwd[1], rel=0.02)
    assert b16 / b8 == pytest.approx(bwd[0] / bwd[1], rel=0.02)


def test_fp8_attention_passes_the_bf16_peak_at_its_measured_rate() -> None:
    # GB300 at 32k tokens: fp8 forward 11.319 ms against bf16 18.014 (1.59x), 3,108 TFLOP/s of the benchmark's count,
    # above the 2,500 TFLOP/s bf16 peak: priced against the fp8 peak, not clipped at the bf16 one
    work = {a: TrainWorkload(seq_len=32768, global_batch=32, dtype="fp8", attention=a)
            for a in (AttentionKernel.CUDNN, AttentionKernel.CUDNN_FP8)}
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, microbatch=4, zero_stage=1)], 32)
    times = {}
    for a, w in work.items():
        costs = kind_costs(Ctx(get_model("llama-3.1-8b"), get_system("gb300-nvl72"), w, rows))
        ops = {o.name: o for c in costs.values() for o in c.fwd_ops + c.bwd_ops}
        times[a] = (float(np.ravel(ops["attn.flash"].time)[0]), float(np.ravel(ops["attn.flash.bwd"].time)[0]))
    fwd = times[AttentionKernel.CUDNN][0] / times[AttentionKernel.CUDNN_FP8][0]
    bwd = times[AttentionKernel.CUDNN][1] / times[AttentionKernel.CUDNN_FP8][1]
    assert fwd == pytest.approx(18.014 / 11.319, rel=0.02)
    assert bwd == pytest.approx(59.024 / 41.328, rel=0.02)


def test_a_system_file_cannot_put_fp8_attention_under_bf16(run_cli, tmp_path) -> None:
    spec = tmp_path / "h100-fp8-attn.yaml"
    spec.write_text("base: dgx-h100\nname: h100-fp8-attn\nsoftware:\n  attention: cudnn-fp8\n")
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", str(spec), "-g", "8", "-b", "16", "-s", "8192")
    assert res.code == 2 and "cudnn-fp8 needs dtype fp8 or fp4" in res.err and "Traceback" not in res.err


def test_fp8_attention_on_gb200_takes_the_measured_time() -> None:
    f8, b8 = _flash("gb200-nvl72", AttentionKernel.CUDNN_FP8)
    assert f8 == pytest.approx(1.074e-3, rel=0.05)
    assert b8 == pytest.approx(3.781e-3 * 4.615 / 4.127, rel=0.05)  # the bf16 curve's backward, 4.615 ms, × ratio


def test_unmeasured_families_keep_the_bf16_rate() -> None:
    seq = np.array([2048.0, 8192.0, 65536.0])
    assert np.all(fp8_attention_ratio(GPUS["mi300x"], backward=False, seq=seq) == 1.0)
    assert np.all(fp8_attention_ratio(GPUS["a100-sxm-80gb"], backward=True, seq=seq) == 1.0)
    # B200 takes its GB200 die's measurement, clamped at the measured ends
    assert fp8_attention_ratio(GPUS["b200"], backward=False, seq=65536.0) == pytest.approx(21.692 / 16.012)


def test_fp8_attention_needs_an_fp8_recipe(run_cli) -> None:
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "gb200-nvl72", "-g", "8", "-b", "16", "-s", "8192",
                  "--attention", "cudnn-fp8")
    assert res.code == 2
    assert "cudnn-fp8 needs dtype fp8 or fp4" in res.err
    assert "Traceback" not in res.err


def test_megatron_export_turns_fp8_attention_on(run_cli) -> None:
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "gb200-nvl72", "-g", "8", "-b", "16", "-s", "8192",
                  "--microbatch", "2", "--zero", "1", "--dtype", "fp4", "--attention", "cudnn-fp8", "--export",
                  "megatron")
    assert res.code == 0, res.err
    assert "--fp8-dot-product-attention" in res.out and "--attention-backend auto" in res.out


@pytest.mark.parametrize("tool", ["torchtitan", "deepspeed"])
def test_exports_without_fp8_attention_say_so(run_cli, tool: str) -> None:
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "gb200-nvl72", "-g", "8", "-b", "16", "-s", "8192",
                  "--microbatch", "2", "--zero", "1", "--dtype", "fp8", "--attention", "cudnn-fp8", "--export", tool)
    assert res.code == 0, res.err
    assert "attends in 16 bit, slower than planned" in res.err


def _gpt_oss_flash(system: str, attention: str, seq: int, kind: str) -> tuple[float, float]:
    work = TrainWorkload(seq_len=seq, global_batch=64, dtype="fp8", attention=attention)
    rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=8, ep=8, microbatch=4, zero_stage=1)], 64)
    costs = kind_costs(Ctx(get_model("gpt-oss-120b"), get_system(system), work, rows))[kind]
    ops = {o.name: o for o in costs.fwd_ops + costs.bwd_ops}
    return float(np.ravel(ops["attn.flash"].time)[0]), float(np.ravel(ops["attn.flash.bwd"].time)[0])


# cuDNN's gpt-oss windowed layer (batch 2 x 128 heads, head dim 64, window 128; NVIDIA/cudnn-frontend@3929da2
# results/gpt_oss/{gb200,gb300}/*.csv, non-deterministic backward), ms: fp8 and MXFP8 keep the window in the forward
# and run the full causal backward (bf16: 0.465 ms at 4k on GB200). gpt-oss-120b at microbatch 4 is the same 256 pairs.
@pytest.mark.parametrize(("system", "attention", "seq", "fwd_ms", "bwd_ms"), [
    ("gb200-nvl72", "cudnn-fp8", 4096, 0.195, 1.731), ("gb200-nvl72", "cudnn-fp8", 16384, 0.766, 23.231),
    ("gb200-nvl72", "cudnn-mxfp8", 4096, 0.210, 2.080), ("gb200-nvl72", "cudnn-mxfp8", 16384, 0.826, 27.940),
    ("gb300-nvl72", "cudnn-fp8", 4096, 0.167, 1.480), ("gb300-nvl72", "cudnn-fp8", 16384, 0.650, 19.354),
    ("gb300-nvl72", "cudnn-mxfp8", 4096, 0.175, 1.871), ("gb300-nvl72", "cudnn-mxfp8", 16384, 0.676, 24.996)])
def test_fp8_sliding_layers_keep_the_window_forward_and_run_the_causal_backward(
        system: str, attention: str, seq: int, fwd_ms: float, bwd_ms: float) -> None:
    fwd, bwd = _gpt_oss_flash(system, attention, seq, "sliding")
    assert fwd == pytest.approx(fwd_ms * 1e-3, rel=0.05)
    # priced as the causal backward at the fp8 rate the model derives for head dim 64 (the bf16 hd-128 curve, the H100's
    # head-dim ratio, the Llama layer's fp8 ratio): -22...+28% of the measured time, where the windowed bf16 rate
    # would be 4-12x too fast
    assert bwd == pytest.approx(bwd_ms * 1e-3, rel=0.30)
    assert bwd == pytest.approx(_gpt_oss_flash(system, attention, seq, "attention")[1])


def test_hopper_sliding_layers_keep_the_bf16_windowed_rate_under_fp8() -> None:
    # no fp8 kernel at head dim 64 on the H200 (cuDNN 9.19: "hidden_dim should be equal to 128")
    bf16 = _gpt_oss_flash("hgx-h200", "cudnn", 4096, "sliding")
    fp8 = _gpt_oss_flash("hgx-h200", "cudnn-fp8", 4096, "sliding")
    assert fp8 == pytest.approx(bf16, rel=1e-9)


def test_mxfp8_attention_runs_at_its_measured_ratio() -> None:
    # GB200 Llama layer at 8k: MXFP8 forward 1.156 ms and backward 4.272 against bf16's 1.397 and 4.127
    f16, b16 = _flash("gb200-nvl72", AttentionKernel.CUDNN)
    f8, b8 = _flash("gb200-nvl72", AttentionKernel.CUDNN_MXFP8)
    assert f16 / f8 == pytest.approx(1.397 / 1.156, rel=0.02)
    assert b16 / b8 == pytest.approx(4.127 / 4.272, rel=0.02)


def test_fp8_sliding_backward_under_context_parallelism_keeps_the_causal_share() -> None:
    # each CP rank runs its share of every causal block: the sliding layer's backward costs the causal layer's
    def bwd(kind: str) -> float:
        work = TrainWorkload(seq_len=16384, global_batch=64, dtype="fp8", attention="cudnn-mxfp8")
        rows = LayoutArrays.from_layouts([TrainLayout(tp=1, pp=1, dp=4, cp=2, ep=8, microbatch=4, zero_stage=1)], 64)
        costs = kind_costs(Ctx(get_model("gpt-oss-120b"), get_system("gb300-nvl72"), work, rows))[kind]
        return float(np.ravel({o.name: o for o in costs.bwd_ops}["attn.flash.bwd"].time)[0])

    assert bwd("sliding") == pytest.approx(bwd("attention"), rel=1e-6)


@pytest.mark.parametrize(("system", "attention", "says"), [
    ("dgx-h100", "cudnn-mxfp8", "measured on Blackwell"), ("mi300x-8", "cudnn-fp8", "measured on Hopper and Blackwell"),
    ("dgx-a100-80gb", "cudnn-fp8", "needs dtype fp8 or fp4")])
def test_fp8_attention_where_it_does_not_run_is_refused(run_cli, system: str, attention: str, says: str) -> None:
    dtype = "bf16" if system == "dgx-a100-80gb" else "fp8"
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", system, "-g", "8", "-b", "16", "-s", "8192",
                  "--dtype", dtype, "--attention", attention)
    assert res.code == 2 and says in res.err and "Traceback" not in res.err


@pytest.mark.parametrize(("system", "says"), [("dgx-h100", "under delayed scaling only"),
                                              ("gb200-nvl72", "NVTE_DPA_FP8_RECIPE=Float8CurrentScaling")])
def test_megatron_export_names_the_recipe_fp8_attention_runs_under(run_cli, system: str, says: str) -> None:
    res = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", system, "-g", "8", "-b", "16", "-s", "8192",
                  "--microbatch", "2", "--zero", "1", "--dtype", "fp8", "--attention", "cudnn-fp8", "--export",
                  "megatron")
    assert res.code == 0, res.err
    assert says in res.err
