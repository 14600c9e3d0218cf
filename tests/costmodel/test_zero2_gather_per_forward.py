"""ZeRO-2 as PyTorch FSDP runs it (``SoftwareSpec.zero2_gather_per_forward``): SHARD_GRAD_OP reshards the weights
after every backward, so every microbatch's forward all-gathers them again (torch.distributed.fsdp ShardingStrategy
docs), where DeepSpeed's ZeRO-2 keeps them whole and gathers once a step after the optimizer."""

import json

import pytest
from typer.testing import CliRunner

from shardplan.cli import app
from shardplan.costmodel.core import comm
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import framework_system
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

MODEL = get_model("llama-3.1-8b")
LAYOUT = TrainLayout(dp=8, zero_stage=2, microbatch=2)
# Llama-3.1-8B by hand (as tests/costmodel/test_fsdp_backward_prefetch.py): 32 layers, embedding and untied head
PARAMS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096


def _dp_exposed(regather: bool, batch: int, overlap_gather: bool = True) -> float:
    base = get_system("dgx-h100")
    sw = base.software.model_copy(update={"zero2_gather_per_forward": regather, "overlap_param_gather": overlap_gather})
    rep = estimate_training(MODEL, base.model_copy(update={"software": sw}), 8, TrainWorkload(seq_len=4096,
                            global_batch=batch), LAYOUT)
    return rep.metrics.dp_exposed_s


def test_every_forward_gathers_the_weights() -> None:
    """Without gather overlap the once-a-step gather (AG, bf16 weights over the 8 ranks) becomes one per microbatch:
    4 microbatches add 3·AG."""
    ag = float(comm.all_gather_time(get_system("dgx-h100"), PARAMS * 2.0, 8, 1))
    on, off = _dp_exposed(True, 64, overlap_gather=False), _dp_exposed(False, 64, overlap_gather=False)
    assert on - off == pytest.approx(3 * ag, rel=1e-9)


def test_regathering_scales_with_the_microbatches() -> None:
    """Reduce-scatter and gather both run once per microbatch, so twice the microbatches cost twice the exposed sync
    (the once-a-step gather would break the proportion)."""
    assert _dp_exposed(True, 64) == pytest.approx(2 * _dp_exposed(True, 32), rel=1e-9)
    assert _dp_exposed(False, 64) != pytest.approx(2 * _dp_exposed(False, 32), rel=1e-6)


def test_framework_fsdp_prices_shard_grad_op() -> None:
    """``--framework fsdp`` runs the layout as PyTorch FSDP does: its step is ``estimate_training`` with the flag."""
    args = ["estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "8", "-b", "64", "-s", "4096",
            "--zero", "2", "--microbatch", "2", "--json"]
    runner = CliRunner()
    plain = json.loads(runner.invoke(app, args).stdout)
    fsdp = json.loads(runner.invoke(app, [*args, "--framework", "fsdp"]).stdout)
    system = framework_system(get_system("dgx-h100"), "fsdp")
    assert system.software.zero2_gather_per_forward and system.software.fsdp_backward_prefetch == "post"
    want = estimate_training(MODEL, system, 8, TrainWorkload(seq_len=4096, global_batch=64), LAYOUT)
    assert fsdp["metrics"]["step_time_s"] == pytest.approx(want.metrics.step_time_s, rel=1e-9)
    assert fsdp["metrics"]["step_time_s"] > plain["metrics"]["step_time_s"]


def test_llm_foundry_records_regather() -> None:
    from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run

    flags = {}
    for r in load_records_tuned():
        if r["id"].startswith(("llmfoundry-", "dgxc-")):
            run = parse_run(r)
            if isinstance(run, OptimumRun):
                key = r["id"].split("-")[0]
                flags[key] = flags.get(key, set()) | {run.system.software.zero2_gather_per_forward}
    assert flags == {"llmfoundry": {True}, "dgxc": {False}}
