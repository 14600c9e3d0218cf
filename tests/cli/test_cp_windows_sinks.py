"""Context parallelism on sliding windows and attention sinks: Transformer Engine's CP runs a sliding window only
with cp_comm_type a2a or all_gather, and a learned-sink softmax (gpt-oss) only with a2a (TransformerEngine@d0067d0
context_parallel.py ``attn_forward_func_with_cp`` asserts, every backend). A plan never puts CP > 1 on an exchange
that cannot run the model; an unstated exchange becomes a2a (Megatron-Bridge's gpt-oss and Gemma 3 recipes), a
stated one is kept and CP stays 1, and a pinned CP under it is one line of bad input."""

from __future__ import annotations

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.frameworks import cp_blocker, framework_system
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.errors import ShardplanError
from shardplan.hardware import get_system
from shardplan.models import get_model

OSS = ("-m", "gpt-oss-120b", "-H", "dgx-h100", "-g", "64", "-b", "64", "-s", "65536")
GEMMA = ("-m", "gemma-3-27b", "-H", "dgx-h100", "-g", "16", "-b", "16", "-s", "65536")


@pytest.mark.parametrize(("model", "runs"), [
    ("gpt-oss-120b", {"a2a"}),  # sinks: a2a only
    ("gemma-3-27b", {"a2a", "all_gather"}),  # sliding windows: not p2p
    ("mistral-7b", {"a2a", "all_gather"}),  # every layer sliding
    ("llama-3.1-8b", {"p2p", "a2a", "all_gather"}),  # full causal attention: every exchange
])
def test_which_exchanges_run_which_attention(model: str, runs: set[str]) -> None:
    m = get_model(model)
    assert {k for k in ("p2p", "all_gather", "a2a") if cp_blocker(m, k) is None} == runs


def test_an_unstated_exchange_becomes_a2a_on_transformer_engine_stacks_only() -> None:
    oss, llama, h100 = get_model("gpt-oss-120b"), get_model("llama-3.1-8b"), get_system("dgx-h100")
    assert h100.software.cp_comm_type == "p2p"
    for fw in (None, "megatron"):
        assert framework_system(h100, fw, oss).software.cp_comm_type == "a2a"
        assert framework_system(h100, fw, llama).software.cp_comm_type == "p2p"
    # PyTorch's context_parallel has no a2a; its CP stays what it was (and CP > 1 is not planned there: below)
    assert framework_system(h100, "torchtitan", oss).software.cp_comm_type == "p2p"
    stated = h100.software.model_copy(update={"cp_comm_type": "p2p"})
    stated._stated = {"cp_comm_type"}
    assert framework_system(h100.model_copy(update={"software": stated}), "megatron", oss).software.cp_comm_type \
        == "p2p"


def test_the_estimate_refuses_cp_on_an_exchange_that_cannot_run_the_model() -> None:
    h100 = get_system("dgx-h100")
    work = TrainWorkload(seq_len=65536, global_batch=16)
    with pytest.raises(ShardplanError) as e:
        estimate_training(get_model("gemma-3-27b"), h100, 16, work, TrainLayout(tp=8, cp=2))
    assert e.value.field == "cp-comm-type" and "a2a or all_gather" in str(e.value)
    gathered = h100.model_copy(update={"software": h100.software.model_copy(update={"cp_comm_type": "all_gather"})})
    rep = estimate_training(get_model("gemma-3-27b"), gathered, 16, work, TrainLayout(tp=8, cp=2))
    assert rep.metrics is not None and rep.plan.cp == 2


def test_the_planner_puts_cp_on_a2a_by_default_and_keeps_cp_1_under_a_stated_ring(run_cli) -> None:
    r = run_cli("train", *OSS, "--json")
    assert r.code == 0, r.err
    plan = r.json()["plan"]
    assert plan["cp"] > 1 and plan["cp_comm_type"] == "a2a"  # 64k tokens: CP pays, under the exchange that runs
    r = run_cli("train", *OSS, "--cp-comm-type", "p2p", "--json")
    assert r.code == 0, r.err
    assert r.json()["plan"]["cp"] == 1
    r = run_cli("train", *OSS, "--framework", "torchtitan", "--json")
    assert r.code == 0, r.err
    assert r.json()["plan"]["cp"] == 1


def test_a_pinned_cp_under_an_exchange_that_cannot_run_it_is_one_line_exit_2(run_cli) -> None:
    r = run_cli("train", *OSS, "--cp-comm-type", "p2p", "--cp", "2")
    assert r.code == 2 and "cp-comm-type" in r.err and "sinks" in r.err and "a2a" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = run_cli("estimate", "train", *GEMMA, "--cp-comm-type", "p2p", "--cp", "2", "--tp", "8")
    assert r.code == 2 and "sliding-window" in r.err and len(r.err.strip().splitlines()) == 1
    r = run_cli("estimate", "train", *GEMMA, "--cp", "2", "--tp", "8", "--json")  # unstated: a2a, priced
    assert r.code == 0, r.err
    assert r.json()["plan"]["cp_comm_type"] == "a2a"


def test_the_megatron_export_launches_a2a(run_cli) -> None:
    r = run_cli("estimate", "train", *GEMMA, "--cp", "2", "--tp", "8", "--export", "megatron")
    assert r.code == 0, r.err
    assert "--cp-comm-type a2a\n" in r.out


def test_pytorch_context_parallel_runs_neither_windows_nor_sinks(run_cli) -> None:
    """torchtitan's and AutoModel's CP is PyTorch's context_parallel (SDPA's causal kernels): no exchange runs a
    window or sinks there, so their plans keep CP 1 whatever the exchange, a pinned CP is one line of bad input, and
    an export to torchtitan without --framework neither switches to a2a nor plans CP."""
    gemma = get_model("gemma-3-27b")
    assert all(cp_blocker(gemma, k, pytorch=True) for k in ("p2p", "all_gather", "a2a"))
    assert cp_blocker(get_model("llama-3.1-8b"), "p2p", pytorch=True) is None
    assert framework_system(get_system("dgx-h100"), None, gemma, pytorch_cp=True).software.cp_comm_type == "p2p"
    r = run_cli("train", *GEMMA, "--framework", "torchtitan", "--cp-comm-type", "all_gather", "--json")
    assert r.code == 0, r.err
    assert r.json()["plan"]["cp"] == 1
    r = run_cli("estimate", "train", *GEMMA, "--framework", "torchtitan", "--cp", "2", "--tp", "8", "--zero", "3")
    assert r.code == 2 and "context_parallel" in r.err and "use cp 1" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = run_cli("train", *GEMMA, "--export", "torchtitan")
    assert r.code == 0, r.err
    assert "context_parallel_degree = 1\n" in r.out
    r = run_cli("train", "-m", "mistral-7b", "-H", "dgx-h100", "-g", "8", "-b", "64", "-s", "4096",
                "--export", "torchtitan")  # CP 1 plans export as before: no a2a forced on them
    assert r.code == 0, r.err


def test_an_infeasible_plan_names_the_exchange_to_drop(run_cli) -> None:
    """A stated p2p keeps Gemma 3 at CP 1, where 256k tokens do not fit 8 H100s; the fixes name the pin that blocks
    CP and what fits once it is dropped (each a plan the planner made under that exchange)."""
    r = run_cli("train", "-m", "gemma-3-27b", "-H", "dgx-h100", "-g", "8", "-b", "8", "-s", "262144", "--offload",
                "off", "--cp-comm-type", "p2p", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["status"] == "infeasible"
    fixes = [f for f in out["suggestions"] if f.startswith("drop --cp-comm-type p2p")]
    assert {("a2a" in f, "all_gather" in f) for f in fixes} == {(True, False), (False, True)}
    assert all("CP=" in f and "CP=1 " not in f for f in fixes)  # the layouts that fit use CP
    r = run_cli("train", "-m", "gemma-3-27b", "-H", "dgx-h100", "-g", "16", "-b", "16", "-s", "262144", "--offload",
                "off", "--cp-comm-type", "a2a", "--json")  # the fix's own claim, planned directly
    assert r.code == 0 and r.json()["status"] != "infeasible"
