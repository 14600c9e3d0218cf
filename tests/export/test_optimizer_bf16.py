"""Adam with bf16 moments beside the fp32 master (Megatron's precision-aware optimizer, ``--optimizer adam-bf16``):
4 + 2 + 2 = 8 B of state per parameter against Adam's 4 + 4 + 4 (hand count), and the exports that can run it."""

import dataclasses

import pytest
from export_plans import CORNERS

from shardplan.cli.export import export_train
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model


def test_state_is_two_thirds_of_adams_and_weights_unchanged() -> None:
    spec, system = get_model("llama-3.1-8b"), get_system("dgx-h100")
    lay = TrainLayout(tp=1, pp=1, dp=8, zero_stage=1)
    reps = {o: estimate_training(spec, system, 8, TrainWorkload(seq_len=4096, global_batch=32, optimizer=o), lay)
            for o in ("adam", "adam-bf16")}
    a, b = reps["adam"].memory, reps["adam-bf16"].memory
    assert b.optimizer_bytes == pytest.approx(a.optimizer_bytes * 8 / 12, rel=1e-12)
    assert b.weights_bytes == a.weights_bytes and b.activations_bytes == a.activations_bytes
    # the Adam step reads and writes 4 B less state per parameter each way: never slower
    assert reps["adam-bf16"].metrics.step_time_s <= reps["adam"].metrics.step_time_s


def test_exports_write_or_refuse_it() -> None:
    t = dataclasses.replace(CORNERS["deepseek-v3-ep"], optimizer="adam-bf16")  # ZeRO-1: the distributed optimizer
    text = export_train("megatron", t).text
    assert "--use-precision-aware-optimizer" in text and "--exp-avg-dtype bf16" in text
    assert "--exp-avg-sq-dtype bf16" in text
    z0 = dataclasses.replace(t, plan=t.plan.model_copy(update={"zero_stage": 0}))
    with pytest.raises(ShardplanError, match="--zero 1"):  # Megatron-Core: only under the distributed optimizer
        export_train("megatron", z0)
    for fmt in ("torchtitan", "deepspeed"):
        with pytest.raises(ShardplanError, match="--optimizer adam"):
            export_train(fmt, t)
