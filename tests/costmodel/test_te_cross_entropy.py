"""Transformer Engine's cross entropy (``SoftwareSpec.cross_entropy_fusion`` "te", Megatron-LM
--cross-entropy-fusion-impl te) against hand counts from its source (TransformerEngine v2.8
transformer_engine/pytorch/triton/cross_entropy.py): online_softmax_kernel reads the bf16 logits, cross_entropy_kernel
reads them again and writes the gradient over them, and the backward's element_mul_kernel scales it in place; the
loss holds nothing beside the logits. Which published stacks run it: Megatron-Bridge's performance recipes and
NVIDIA's MLPerf Llama 3.1 8B."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.training import layers as L
from shardplan.costmodel.training.backward import backward
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, Recompute, TrainLayout, TrainWorkload
from shardplan.costmodel.training.memory import head_activations
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation import optimum as O
from shardplan.validation.stacks import stack_software

T, V = 4, 128256  # tokens, Llama 3.1's vocabulary


def _ctx(tp: int = 1, seq: int = 4, **software: object) -> Ctx:
    system = get_system("dgx-h100")
    system = system.model_copy(update={"software": system.software.model_copy(update=software)})
    rows = LayoutArrays.from_layouts([TrainLayout(tp=tp, dp=1, recompute=Recompute.NONE, sequence_parallel=tp > 1)],
                                     global_batch=1)
    return Ctx(get_model("llama-3.1-8b"), system, TrainWorkload(seq_len=seq, global_batch=1), rows)


@pytest.mark.parametrize("kernels", ["fused", "eager"])
def test_te_cross_entropy_bytes_by_hand(kernels: str) -> None:
    """Forward: read 2 B, read 2 B, write 2 B per logit over two kernels; backward: read and write 2 B in one. The
    Triton kernels are the same under an eager stack. Against Megatron's native fused kernels' 22 B and 18 B."""
    ctx = _ctx(cross_entropy_fusion="te", elementwise_kernels=kernels)
    [op] = [o for o in L.head_ops(ctx) if o.name == "head.cross_entropy"]
    assert float(op.nbytes[0]) == T * V * (2 + 2 + 2)
    assert float(backward(ctx, [op])[0].nbytes[0]) == T * V * (2 + 2)
    [native] = [o for o in L.head_ops(_ctx()) if o.name == "head.cross_entropy"]
    assert float(native.nbytes[0]) == T * V * 22 and float(backward(_ctx(), [native])[0].nbytes[0]) == T * V * 18


def test_te_loss_holds_only_the_logits() -> None:
    """Last stage at TP 2 with SP, 4,096 tokens: the final norm's input (SP-sharded), the head's input, and 2 B per
    logit of the vocabulary shard (the native loss holds 6)."""
    tokens, h = 4096, 4096
    for fusion, per_logit in (("te", 2.0), ("native", 6.0)):
        got = float(np.asarray(head_activations(_ctx(tp=2, seq=tokens, cross_entropy_fusion=fusion)))[0])
        assert got == pytest.approx(tokens * (2 * h / 2 + 2 * h + per_logit * V / 2), rel=1e-12)


def test_published_stacks_that_run_it() -> None:
    """Megatron-Bridge records take it from their performance recipes; NVIDIA's MLPerf records state it; the
    Megatron-MoE model zoo's launch lines set native."""
    records = {r["id"]: r for r in O.load_records_tuned()}
    bridge = records["mbridge-26.04.01-qwen3-235b-a22b-256gpu-h100-fp8"]
    assert stack_software(bridge)["cross_entropy_fusion"] == "te"
    assert stack_software(records["mlperf-v5.1-nvidia-llama3.1-8b-72gpu-gb200-fp8"])["cross_entropy_fusion"] == "te"
    assert "cross_entropy_fusion" not in stack_software(records["mzoo-qwen3-235b-a22b-256gpu-gb200-bf16-ep8"])
    run = O.parse_run(bridge)
    assert not isinstance(run, str) and run.system.software.cross_entropy_fusion == "te"


def test_megatron_export_launches_it(run_cli, tmp_path) -> None:
    import json

    path = tmp_path / "h100-te.json"
    path.write_text(json.dumps({"base": "dgx-h100", "name": "h100-te", "software": {"cross_entropy_fusion": "te"}}))
    args = ("-m", "llama-3.1-8b", "-b", "16", "-s", "4096", "-g", "8", "--dp", "8", "--zero", "1",
            "--export", "megatron")
    r = run_cli("train", "-H", str(path), *args)
    assert r.code == 0 and "--cross-entropy-loss-fusion\n--cross-entropy-fusion-impl te\n" in r.out, r.err
    r = run_cli("train", "-H", "dgx-h100", *args)
    assert r.code == 0 and "--cross-entropy-fusion-impl" not in r.out
