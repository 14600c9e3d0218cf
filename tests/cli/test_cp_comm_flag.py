"""``--cp-comm-type`` on ``train`` and ``estimate train``: the exchange reaches the cost model, the head rule and the
frameworks that cannot run an exchange are bad input, and the exports launch the exchange the plan was costed with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

BASE = ("-m", "llama-3.1-8b", "-H", "dgx-h100", "-b", "8", "-s", "32768")
PINNED = ("--cp", "4", "--dp", "2", "--zero", "1")
FLAGS = Path(__file__).resolve().parents[1] / "data" / "export"


def _system(kind: str):
    base = get_system("dgx-h100")
    return base.model_copy(update={"software": base.software.model_copy(update={"cp_comm_type": kind})})


@pytest.mark.parametrize("kind", ["p2p", "all_gather", "a2a"])
def test_the_flag_prices_the_layout_under_that_exchange(run_cli, kind: str) -> None:
    r = run_cli("estimate", "train", *BASE, *PINNED, "--cp-comm-type", kind, "--json")
    assert r.code == 0, r.err
    want = estimate_training(get_model("llama-3.1-8b"), _system(kind), 8, TrainWorkload(seq_len=32768, global_batch=8),
                             TrainLayout(cp=4, dp=2, zero_stage=1))
    assert r.json()["metrics"]["step_time_s"] == pytest.approx(want.metrics.step_time_s, rel=1e-9)
    assert r.json()["metrics"]["cp_exposed_s"] == pytest.approx(want.metrics.cp_exposed_s, rel=1e-9)


def test_exposed_exchanges_cost_more_than_the_ring() -> None:
    work, lay = TrainWorkload(seq_len=32768, global_batch=8), TrainLayout(cp=4, dp=2, zero_stage=1)
    steps = {k: estimate_training(get_model("llama-3.1-8b"), _system(k), 8, work, lay).metrics.step_time_s
             for k in ("p2p", "all_gather", "a2a")}
    assert steps["p2p"] < steps["all_gather"] and steps["p2p"] < steps["a2a"]


def test_bad_values_and_impossible_pins_are_one_line_exit_2(run_cli) -> None:
    r = run_cli("train", *BASE, "--cp-comm-type", "ring")
    assert r.code == 2 and "--cp-comm-type" in r.err
    r = run_cli("train", *BASE, "--cp", "8", "--tp", "2", "--cp-comm-type", "a2a")
    assert r.code == 2 and "cp: 8 is not possible here; allowed: 1, 2, 4" in r.err
    r = run_cli("estimate", "train", *BASE, "--gpus", "16", "--cp", "8", "--tp", "2", "--dp", "1",
                "--cp-comm-type", "a2a")
    assert r.code == 2 and "allowed 1, 2, 4" in r.err
    for fw in ("torchtitan", "automodel"):
        r = run_cli("train", *BASE, "--framework", fw, "--cp-comm-type", "a2a")
        assert r.code == 2 and "cp-comm-type" in r.err and fw in r.err
        assert len(r.err.strip().splitlines()) == 1


def test_the_flag_wins_over_the_system_file_and_an_a2a_file_is_checked_too(run_cli, tmp_path: Path) -> None:
    """--cp-comm-type overrides a system file's software.cp_comm_type; an a2a system file with a framework whose CP
    is PyTorch's is bad input as the flag is."""
    from shardplan.hardware import resolve_system

    def system_file(kind: str) -> str:
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps({"base": "dgx-h100", "name": f"h100-{kind}", "software": {"cp_comm_type": kind}}))
        assert resolve_system(str(path)).software.cp_comm_type == kind
        return str(path)

    a2a, p2p = system_file("a2a"), system_file("p2p")
    base = ("-m", "llama-3.1-8b", "-b", "8", "-s", "32768", *PINNED, "--json")
    step = {k: estimate_training(get_model("llama-3.1-8b"), _system(k), 8, TrainWorkload(seq_len=32768, global_batch=8),
                                 TrainLayout(cp=4, dp=2, zero_stage=1)).metrics.step_time_s for k in ("p2p", "a2a")}
    r = run_cli("estimate", "train", "-H", p2p, *base, "--cp-comm-type", "a2a")
    assert r.code == 0 and r.json()["metrics"]["step_time_s"] == pytest.approx(step["a2a"], rel=1e-9)
    r = run_cli("estimate", "train", "-H", a2a, *base, "--cp-comm-type", "p2p")
    assert r.code == 0 and r.json()["metrics"]["step_time_s"] == pytest.approx(step["p2p"], rel=1e-9)
    r = run_cli("estimate", "train", "-H", a2a, *base[:-1], "--zero", "3", "--framework", "torchtitan")
    assert r.code == 2 and "cp-comm-type" in r.err and len(r.err.strip().splitlines()) == 1


def test_megatron_export_launches_the_costed_exchange(run_cli) -> None:
    assert json.loads((FLAGS / "megatron_flags.json").read_text())["flags"]["--cp-comm-type"] == "list"
    r = run_cli("train", *BASE, *PINNED, "--cp-comm-type", "all_gather", "--export", "megatron")
    assert r.code == 0 and "--context-parallel-size 4\n--cp-comm-type all_gather\n" in r.out
    r = run_cli("train", *BASE, *PINNED, "--export", "megatron")  # p2p, Megatron's default: no flag
    assert r.code == 0 and "--context-parallel-size 4\n" in r.out and "--cp-comm-type" not in r.out


@pytest.mark.parametrize(("kind", "method"), [("p2p", "alltoall"), ("all_gather", "allgather")])
def test_torchtitan_export_rotates_kv_as_costed(run_cli, kind: str, method: str) -> None:
    assert "context_parallel_rotate_method" in (FLAGS / "torchtitan_keys.json").read_text()
    r = run_cli("train", *BASE, *PINNED, "--cp-comm-type", kind, "--export", "torchtitan")
    assert r.code == 0 and f'context_parallel_rotate_method = "{method}"' in r.out


def test_torchtitan_export_refuses_a_head_split_plan(run_cli) -> None:
    r = run_cli("train", *BASE, *PINNED, "--cp-comm-type", "a2a", "--export", "torchtitan")
    assert r.code == 2 and "cp-comm-type" in r.err


def test_the_plan_names_its_exchange(run_cli) -> None:
    """The JSON plan carries the exchange it was priced with (None without CP); the plan line names it when it is
    not Megatron's default p2p."""
    r = run_cli("estimate", "train", *BASE, *PINNED, "--cp-comm-type", "all_gather", "--json")
    assert r.code == 0 and r.json()["plan"]["cp_comm_type"] == "all_gather"
    assert run_cli("estimate", "train", *BASE, *PINNED, "--json").json()["plan"]["cp_comm_type"] == "p2p"
    r = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-b", "8", "-s", "8192", "--dp", "8",
                "--json")
    assert r.json()["plan"]["cp_comm_type"] is None
    text = run_cli("estimate", "train", *BASE, *PINNED, "--cp-comm-type", "a2a").out
    assert "CP=4(a2a)" in text.splitlines()[0]
    assert "CP=4  " in run_cli("estimate", "train", *BASE, *PINNED).out.splitlines()[0]
    plan = run_cli("train", *BASE, "--cp", "4", "--cp-comm-type", "all_gather", "--json").json()["plan"]
    assert plan["cp"] == 4 and plan["cp_comm_type"] == "all_gather"
