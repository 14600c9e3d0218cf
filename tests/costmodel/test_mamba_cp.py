"""Context parallelism on Mamba-2, Gated DeltaNet and chunked-attention layers as Megatron runs it (Megatron-LM
d98e8a6 ssm/, Megatron-Bridge llama4_utils.py): an all-to-all of in_proj's output before the conv and scan and of their
output after, cp dividing a TP rank's recurrent heads, and whole attention chunks on every CP rank."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.cp_rules import recurrent_cp_ok
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layers import mamba_ops
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

NANO = "nemotron-3-nano-30b-a3b"  # Mamba-2: 64 heads of 64, 8 groups, d_state 128


def _ops(cp: int) -> dict[str, object]:
    work = TrainWorkload(seq_len=8192, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(cp=cp, dp=16 // cp, ep=8)], work.global_batch)
    ctx = Ctx(get_model(NANO), get_system("dgx-h100"), work, rows)
    return {o.name: o for o in mamba_ops(ctx)}


def test_the_two_all_to_alls_carry_in_projs_output_and_y() -> None:
    ops, h100 = _ops(2), get_system("dgx-h100")
    # by hand: 4,096 tokens per GPU (8,192 over cp 2, one sequence); in_proj's output z, x, B, C, dt per token:
    # inner 64·64 = 4,096, conv 4,096 + 2·8·128 = 6,144, dt 64 heads; y: 4,096; bf16
    into, out = 4096 * (4096 + 6144 + 64) * 2.0, 4096 * 4096 * 2.0
    for name, nbytes in (("ssm.cp_a2a_in", into), ("ssm.cp_a2a_out", out)):
        op = ops[name]
        want = comm.all_to_all_time(h100, np.array([nbytes]), np.array([2.0]), np.array([1.0]))[0]
        assert float(op.time[0]) == pytest.approx(want, rel=1e-12) and want > 0
    assert all(float(_ops(1)[n].time[0]) == 0.0 for n in ("ssm.cp_a2a_in", "ssm.cp_a2a_out"))


def test_b_and_c_go_out_repeated_where_a_rank_has_fewer_groups_than_cp() -> None:
    """pre_conv_ssm (mamba_context_parallel.py l.171-190) repeats B and C to cp groups when a TP rank holds fewer:
    at cp 16 each of B and C carries 16 groups of d_state 128, not the model's 8."""
    work = TrainWorkload(seq_len=8192, global_batch=64)
    rows = LayoutArrays.from_layouts([TrainLayout(cp=16, dp=1, ep=8)], work.global_batch)
    ops = {o.name: o for o in mamba_ops(Ctx(get_model(NANO), get_system("dgx-h100"), work, rows))}
    nbytes = 512 * (2 * 4096 + 64 + 2 * 128 * 16) * 2.0  # 8,192 tokens over cp 16: z, x, dt, and B, C at 16 groups
    want = comm.all_to_all_time(get_system("dgx-h100"), np.array([nbytes]), np.array([16.0]), np.array([1.0]))[0]
    assert float(ops["ssm.cp_a2a_in"].time[0]) == pytest.approx(want, rel=1e-12)


def test_tp_divides_the_recurrent_layers_heads_and_groups() -> None:
    """Megatron's MambaMixer asserts its heads and groups divide by tp (mamba_mixer.py l.270): a Mamba-2 model with 4
    groups has no TP 8 even where its attention heads allow it."""
    from shardplan.costmodel.training.space import valid_tp

    nano = get_model(NANO)
    assert nano.mamba is not None
    few = nano.model_copy(update={"mamba": nano.mamba.model_copy(update={"n_groups": 1})})
    assert valid_tp(nano) == [1, 2] and valid_tp(few) == [1]


def test_cp_must_divide_a_tp_ranks_mamba_heads() -> None:
    nano = get_model(NANO)
    # groups replicate over cp ranks beyond them
    assert recurrent_cp_ok(nano, 1, 16) and recurrent_cp_ok(nano, 2, 8) and recurrent_cp_ok(nano, 2, 16)
    assert not recurrent_cp_ok(nano, 2, 64) and not recurrent_cp_ok(nano, 1, 3)  # 32 heads on 64 ranks; 64 over 3
    assert recurrent_cp_ok(get_model("llama-3.1-8b"), 8, 16)  # no Mamba layers: no rule
    with pytest.raises(ShardplanError) as e:
        estimate_training(nano, get_system("dgx-h100"), 48, TrainWorkload(seq_len=65536 * 3, global_batch=16),
                          TrainLayout(cp=3, dp=16, ep=8))
    assert e.value.field == "cp" and "Mamba / Gated DeltaNet heads" in str(e.value)


def test_the_planner_keeps_to_cp_degrees_the_heads_allow(run_cli) -> None:
    """On 96 GPUs at 192k tokens cp 3 (or 6, 12, 24, 48, 96) would divide the sequence but not the 64 Mamba heads:
    the plan keeps to 1, 2, 4, 8, 16 or 32, and a pinned cp 3 is one line of bad input."""
    r = run_cli("train", "-m", NANO, "-H", "dgx-h100", "-g", "96", "-b", "16", "-s", "196608", "--json")
    assert r.code == 0, r.err
    plan = r.json()["plan"]
    assert plan["cp"] > 1 and 64 // plan["tp"] % plan["cp"] == 0
    r = run_cli("train", "-m", NANO, "-H", "dgx-h100", "-g", "96", "-b", "16", "-s", "196608", "--cp", "3")
    assert r.code == 2 and "cp" in r.err and len(r.err.strip().splitlines()) == 1


def test_gated_deltanet_layers_take_the_same_exchange_and_rule() -> None:
    """Qwen3-Next's Gated DeltaNet (16 key heads, 32 value heads of 128): in_proj's q, k, v, z (2·2,048 + 2·4,096)
    and b, a (2·32) go out before the delta rule, the gated norm's 4,096 after (gdn.py l.175-183)."""
    from shardplan.costmodel.training.layers import linear_ops

    model, h100 = get_model("qwen3-next-80b-a3b"), get_system("dgx-h100")
    assert recurrent_cp_ok(model, 1, 16) and recurrent_cp_ok(model, 2, 8)
    assert not recurrent_cp_ok(model, 1, 32) and not recurrent_cp_ok(model, 2, 16)  # key heads 16, 8 per TP rank
    work = TrainWorkload(seq_len=32768, global_batch=8)
    rows = LayoutArrays.from_layouts([TrainLayout(cp=4, dp=2, ep=8)], work.global_batch)
    ops = {o.name: o for o in linear_ops(Ctx(model, h100, work, rows))}
    for name, width in (("lin.cp_a2a_in", 2 * 2048 + 2 * 4096 + 2 * 32), ("lin.cp_a2a_out", 4096)):
        nbytes = 8192 * width * 2.0  # 32,768 tokens over cp 4, bf16
        want = comm.all_to_all_time(h100, np.array([nbytes]), np.array([4.0]), np.array([1.0]))[0]
        assert float(ops[name].time[0]) == pytest.approx(want, rel=1e-12)


def test_chunked_attention_keeps_whole_chunks_per_cp_rank(run_cli) -> None:
    """Llama 4's chunked layers (8,192-token chunks): each CP rank's two sequence chunks hold whole attention chunks
    (Megatron-Bridge llama4_utils.py l.304-307), so at 64k tokens cp ≤ 4, at 128k cp ≤ 8; a sequence within one
    chunk has no such rule."""
    from shardplan.costmodel.training.cp_rules import chunked_cp_ok

    scout = get_model("llama-4-scout")
    assert [c for c in (1, 2, 4, 8, 16) if chunked_cp_ok(scout, 65536, c)] == [1, 2, 4]
    assert [c for c in (1, 2, 4, 8, 16) if chunked_cp_ok(scout, 131072, c)] == [1, 2, 4, 8]
    assert chunked_cp_ok(scout, 8192, 4) and chunked_cp_ok(get_model("llama-3.1-8b"), 65536, 16)
    base = ("-m", "llama-4-scout", "-H", "dgx-h100", "-g", "128", "-b", "8", "-s", "65536")
    r = run_cli("estimate", "train", *base, "--cp", "16", "--ep", "8")
    assert r.code == 2 and "allowed 1, 2, 4" in r.err and len(r.err.strip().splitlines()) == 1
    r = run_cli("train", *base, "--json")
    assert r.code == 0, r.err
    assert r.json()["plan"]["cp"] in (1, 2, 4)
