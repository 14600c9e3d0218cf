"""Context parallelism's three exchanges (``SoftwareSpec.cp_comm_type``, Transformer Engine's implementations):
bytes counted by hand from the model's shape, times from the collective formulas, exposure as each one runs."""

from __future__ import annotations

import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.training.cp_rules import a2a_heads_ok
from shardplan.costmodel.training.evaluate import _checked, estimate_training
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.step import train_cost
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

SEQ = 32768
# Llama 3.1 8B by hand: 32 query heads, 8 K/V heads, head dim 128, bf16 activations
KV = SEQ * 8 * 128 * 2 * 2.0  # the sequence's K and V at TP 1: 128 MiB


def _system(kind: str):
    base = get_system("dgx-h100")
    return base.model_copy(update={"software": base.software.model_copy(update={"cp_comm_type": kind})})


def _ops(kind: str, cp: int = 4, tp: int = 1) -> tuple[dict, object]:
    model, system = get_model("llama-3.1-8b"), _system(kind)
    work = TrainWorkload(seq_len=SEQ, global_batch=8)
    lay = _checked(model, system, 8, work, TrainLayout(tp=tp, cp=cp, dp=8 // (cp * tp), zero_stage=1))
    cost = train_cost(model, system, work, LayoutArrays.from_layouts([lay], 8))
    kind_cost = cost.kinds["attention"]
    return {o.name: o for o in kind_cost.fwd_ops + kind_cost.bwd_ops}, cost


def test_all_gather_cp_gathers_kv_and_reduce_scatters_their_gradients_exposed() -> None:
    ops, _ = _ops("all_gather")
    system = _system("all_gather")
    fwd, bwd = ops["attn.cp_allgather"], ops["attn.cp_allgather.bwd"]
    one = float(comm.all_gather_time(system, KV / 2, 4, 1))  # K alone (or V): 64 MiB gathered over 4 ranks
    assert float(fwd.time[0]) == pytest.approx(2 * one, rel=1e-12)  # K and V, nothing hidden
    assert float(bwd.time[0]) == pytest.approx(4 * one, rel=1e-12)  # gathered again, dK and dV reduce-scattered
    assert float(fwd.nbytes[0]) == KV and float(bwd.nbytes[0]) == 2 * KV
    # copies: forward the gathered K and V reordered (read, write); backward that again, dK and dV zero-filled,
    # reordered, and each of the two steps' gradients added into its key range: at cp 4 rank 0's steps cover chunks
    # 0 and 0..7 of 8 (9/8 of the sequence), read twice and written once
    assert float(ops["attn.cp_reorder"].nbytes[0]) == 2 * KV
    assert float(ops["attn.cp_reorder.bwd"].nbytes[0]) == pytest.approx(4 * KV + KV + 3 * KV * 9 / 8, rel=1e-12)
    assert "attn.cp_ring" not in ops


def test_a2a_cp_trades_q_k_v_and_o_for_heads() -> None:
    ops, _ = _ops("a2a")
    system = _system("a2a")
    local = SEQ / 4  # this rank's tokens
    q = o = local * 32 * 128 * 2.0
    kv = KV / 4
    want = sum(float(comm.all_to_all_time(system, x, 4, 1)) for x in (q, kv / 2, kv / 2, o))
    fwd, bwd = ops["attn.cp_a2a"], ops["attn.cp_a2a.bwd"]
    assert float(fwd.nbytes[0]) == q + kv + o == float(bwd.nbytes[0])
    assert float(fwd.time[0]) == pytest.approx(want, rel=1e-12) == float(bwd.time[0])
    # each traded tensor copied twice (a permute and a chunk reorder, read and write), both ways
    assert float(ops["attn.cp_reorder"].nbytes[0]) == 4 * (q + kv + o) == float(ops["attn.cp_reorder.bwd"].nbytes[0])


def test_a2a_runs_one_causal_kernel_over_the_whole_sequence() -> None:
    """Each rank's kernel under a2a is the cp = 1 kernel with a cp-th of the heads: same FLOPs per rank as the ring,
    at the whole sequence's causal efficiency, so its time equals the cp = 1 kernel's over cp."""
    a2a, _ = _ops("a2a")
    whole, _ = _ops("p2p", cp=1)
    assert float(a2a["attn.flash"].time[0]) == pytest.approx(float(whole["attn.flash"].time[0]) / 4, rel=0.02)


def test_the_ring_stays_the_default() -> None:
    ops, _ = _ops("p2p")
    assert "attn.cp_ring" in ops and "attn.cp_allgather" not in ops and "attn.cp_a2a" not in ops


def test_exposed_exchanges_cost_more_than_the_hidden_ring_at_long_sequences() -> None:
    """At 32k tokens on 4 ranks the ring hides behind the kernels; the all-gather shows whole."""
    model = get_model("llama-3.1-8b")
    work = TrainWorkload(seq_len=SEQ, global_batch=8)
    lay = TrainLayout(tp=1, cp=4, dp=2, zero_stage=1)
    p2p = estimate_training(model, _system("p2p"), 8, work, lay).metrics.cp_exposed_s
    ag = estimate_training(model, _system("all_gather"), 8, work, lay).metrics.cp_exposed_s
    assert ag > p2p > 0


def test_a2a_needs_cp_to_divide_a_tp_ranks_heads() -> None:
    model = get_model("llama-3.1-8b")  # 32 query heads, 8 K/V heads
    assert a2a_heads_ok(model, 2, 4) and not a2a_heads_ok(model, 2, 8)  # 4 K/V heads per TP-2 rank
    assert a2a_heads_ok(model, 8, 1) and not a2a_heads_ok(model, 8, 2)  # one K/V head per TP-8 rank
    mla = get_model("deepseek-v3")  # MLA: K and V carry all 128 query heads
    assert a2a_heads_ok(mla, 8, 16) and not a2a_heads_ok(mla, 8, 32)
    with pytest.raises(ShardplanError, match=r"cp \(8\) must divide the query and K/V heads"):
        _checked(model, _system("a2a"), 16, TrainWorkload(seq_len=SEQ, global_batch=8),
                 TrainLayout(tp=2, cp=8, dp=1))


@pytest.mark.parametrize("kind", ["all_gather", "a2a"])
def test_no_exchange_without_cp(kind: str) -> None:
    ops, _ = _ops(kind, cp=1)
    cp_ops = [o for o in ops.values() if ".cp_" in o.name]
    assert cp_ops and all(float(o.time[0]) == 0.0 and float(o.nbytes[0]) == 0.0 for o in cp_ops)


def test_cli_reads_cp_comm_type_from_a_system_file(tmp_path, run_cli) -> None:
    path = tmp_path / "a2a.yaml"
    path.write_text("base: dgx-h100\nsoftware:\n  cp_comm_type: a2a\n")
    common = ("-m", "llama-3.1-8b", "-H", str(path), "--gpus", "16", "-b", "8", "-s", str(SEQ), "--tp", "2")
    bad = run_cli("estimate", "train", *common, "--cp", "8", "--dp", "1")
    assert bad.code == 2 and "cp (8) must divide" in bad.err and "Traceback" not in bad.err
    pinned = run_cli("train", *common, "--cp", "8")  # the planner refuses the pin in one line naming cp
    assert pinned.code == 2 and "cp: 8 is not possible here; allowed: 1, 2, 4\n" in pinned.err
    plan = run_cli("train", *common, "--cp", "4", "--json")
    assert plan.code == 0, plan.err
    assert plan.json()["plan"]["cp"] == 4


def test_the_planner_searches_only_cp_degrees_a2a_can_run() -> None:
    from shardplan.costmodel.training.space import SpaceRequest, enumerate_layouts

    model, work = get_model("llama-3.1-8b"), TrainWorkload(seq_len=SEQ, global_batch=8)
    for split, want in ((False, {1, 2, 4, 8}), (True, {1, 2, 4})):
        space = enumerate_layouts(model, work, SpaceRequest(num_gpus=16, tp=2, max_cp=8, cp_heads_split=split))
        assert set(space.rows.cp.tolist()) == want


def test_a_cp_plan_names_each_exchange_at_its_own_layout() -> None:
    """The explanation's figures are the cost model's evaluation of the plan's layout under each exchange."""
    import re

    from shardplan.planner.training.explain import plan_layout
    from shardplan.planner.training.solve import TrainRequest, plan_training

    model, work = get_model("llama-3.1-8b"), TrainWorkload(seq_len=SEQ, global_batch=8)
    plan = plan_training(TrainRequest(model=model, system=_system("p2p"), num_gpus=8, workload=work, cp=4, tp=1,
                                      pp=1))
    line = next(x for x in plan.explanation if x.startswith("Context parallelism exchanges K/V by p2p"))
    shown = {k: float(t) for k, t in re.findall(r"(all_gather|a2a) (\d+\.\d+) s", line)}
    shown["p2p"] = float(re.search(r"cp_comm_type\): (\d+\.\d+) s per step", line).group(1))
    assert set(shown) == {"p2p", "all_gather", "a2a"}  # 32 heads, 8 K/V heads at TP 1: a2a runs at cp 4
    assert shown["p2p"] == pytest.approx(plan.metrics.step_time_s, abs=1e-3)  # the plan itself
    lay = plan_layout(plan.plan)
    for kind, t in shown.items():
        again = estimate_training(model, _system(kind), 8, work, lay).metrics.step_time_s
        assert t == pytest.approx(again, abs=1e-3)


def test_a_split_cp_plan_names_each_exchange_at_its_own_split() -> None:
    """With a per-stage split and per-stage recompute the other exchanges are ``estimate train --stage-layers`` of
    the plan's layout, rebuilt here field by field."""
    import re

    from shardplan.costmodel.training.stage_report import estimate_split
    from shardplan.planner.training.solve import TrainRequest, plan_training

    model, work = get_model("llama-3.1-70b"), TrainWorkload(seq_len=8192, global_batch=1024)
    plan = plan_training(TrainRequest(model=model, system=_system("p2p"), num_gpus=256, workload=work))
    p = plan.plan
    assert p.cp > 1 and p.pp > 1 and p.stage_layers is not None
    line = next(x for x in plan.explanation if x.startswith("Context parallelism exchanges K/V by p2p"))
    lay = TrainLayout(tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, microbatch=p.microbatch_size, interleave=p.interleave,
                      recompute=p.recompute, recompute_layers=p.recompute_layers,
                      sequence_parallel=p.sequence_parallel, zero_stage=p.zero_stage)
    w = work.model_copy(update={"global_batch": p.global_batch})
    for kind, t in re.findall(r"(all_gather|a2a) (\d+\.\d+) s", line):
        again = estimate_split(model, _system(kind), 256, w, lay, p.stage_layers, p.stage_recompute_layers)
        assert float(t) == pytest.approx(again.metrics.step_time_s, abs=1e-3)


def test_a_uniform_split_with_dense_layers_beyond_rank_0_plans() -> None:
    """DeepSeek-V3 at PP 32: the uniform split puts one of the 3 dense-first layers on rank 0; the plan's layout is
    re-evaluated as the planner evaluated it (uniformly)."""
    from shardplan.planner.training.solve import TrainRequest, plan_training

    work = TrainWorkload(seq_len=8192, global_batch=1024)
    plan = plan_training(TrainRequest(model=get_model("deepseek-v3"), system=_system("p2p"), num_gpus=2048,
                                      workload=work, pp=32, cp=2))
    assert plan.plan is not None and plan.plan.cp == 2
    assert any(x.startswith("Context parallelism exchanges K/V by p2p") for x in plan.explanation)


def test_all_gather_holds_three_gathered_kv_in_a_layers_backward() -> None:
    """All-gather CP's backward holds the re-gathered K and V, the zero-filled dK and dV and a reordered copy: three
    times one layer's gathered K/V on a stage without the LM head (whose logits outweigh it on the last stage), by
    hand: 3 × 32,768 tokens × 8 KV heads × 128 × 2 B × (K, V) = 384 MiB for Llama 3.1 8B at TP 1."""
    from shardplan.api import estimate_training
    from shardplan.hardware import get_system

    base = get_system("dgx-h100")

    def acts(kind: str) -> list[float]:
        system = base.model_copy(update={"software": base.software.model_copy(update={"cp_comm_type": kind})})
        rep = estimate_training("llama-3.1-8b", system, gpus=16, global_batch=16, seq_len=32768, pp=2, cp=4)
        return [s.activations_bytes for s in rep.stages]

    p2p, gather, a2a = acts("p2p"), acts("all_gather"), acts("a2a")
    assert gather[0] - p2p[0] == 3 * 32768 * 8 * 128 * 2 * 2
    assert gather[1] == p2p[1] and a2a == p2p
