"""ZeRO-3's backward gathers under PyTorch FSDP's two backward-prefetch modes (``SoftwareSpec.fsdp_backward_prefetch``):
BACKWARD_PRE gathers layer i−1's weights before layer i's gradient computation, so the gather hides behind it with
the reduce-scatters; BACKWARD_POST (Composer's default, llm-foundry's) gathers them after it, so the gather shows
whole and only the reduce-scatters overlap the backward (torch.distributed.fsdp.BackwardPrefetch docs)."""

import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
WORK = TrainWorkload(seq_len=4096, global_batch=32)
LAYOUT = TrainLayout(dp=8, zero_stage=3, microbatch=2, recompute=Recompute.NONE)  # 2 microbatches a step
# Llama-3.1-8B by hand: q and o 4096², k and v 4096·1024 (8 KV heads of 128), SwiGLU 3·4096·14336, two RMSNorms per
# layer; 32 layers, the 128256 × 4096 embedding and the untied LM head
PARAMS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096


def _exposed(mode: str) -> tuple[float, float]:
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"fsdp_backward_prefetch": mode})})
    rep = estimate_training(MODEL, system, 8, WORK, LAYOUT)
    return rep.metrics.zero3_exposed_s, rep.stages[0].bwd_time_s


def test_backward_post_shows_the_backward_gathers() -> None:
    """Per microbatch the backward's bf16 gather (AG) no longer hides: with the backward longer than AG + RS,
    BACKWARD_PRE charges it (1 − f)·AG plus the slowdown on f·AG, BACKWARD_POST all of it; over 2 microbatches the
    difference is 2·f·(1 − slowdown)·AG (f = zero3_overlap_fraction)."""
    system = get_system("dgx-h100")
    sw = system.software
    pre, bwd = _exposed("pre")
    post, _ = _exposed("post")
    ag = float(comm.all_gather_time(system, PARAMS * 2.0, 8, 1))
    rs = float(comm.reduce_scatter_time(system, PARAMS * 2.0, 8, 1))  # ZeRO-3 reduces in the compute dtype (bf16)
    assert ag + rs < bwd  # the backward would hide both
    f = sw.zero3_overlap_fraction
    assert post - pre == pytest.approx(2 * f * (1 - sw.overlap_slowdown) * ag, rel=1e-9)
    assert pre == pytest.approx(2 * ((1 - f) * (2 * ag + rs) + sw.overlap_slowdown * f * (2 * ag + rs)), rel=1e-9)


def test_llm_foundry_records_run_backward_post() -> None:
    from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run

    modes = {}
    for r in load_records_tuned():
        if r["id"].startswith(("llmfoundry-", "torchtitan-")):
            run = parse_run(r)
            if isinstance(run, OptimumRun):
                modes[r["id"].split("-")[0]] = modes.get(r["id"].split("-")[0], set()) | {
                    run.system.software.fsdp_backward_prefetch}
    assert modes == {"llmfoundry": {"post"}, "torchtitan": {"pre"}}
