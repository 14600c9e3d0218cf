"""--disaggregate: CP-SAT (Dinkelbach) equals brute force on the integer model; plans respect the limits."""

from __future__ import annotations

import json
import shlex
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardplan.costmodel.serving.cost import InferWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.planner.serving.disagg import (
    _table,
    best_per_size,
    brute_force_disagg,
    plan_disaggregated,
    solve_disagg,
    worker_rows,
)
from shardplan.planner.serving.request import InferRequest

VLLM_FLAGS = json.loads((Path(__file__).parents[1] / "data" / "export" / "vllm_flags.json").read_text())
sizes = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 5000)), min_size=1, max_size=4,
                 unique_by=lambda t: t[0])


@settings(max_examples=60, deadline=None)
@given(pre=sizes, dec=sizes, n=st.integers(2, 16), need=st.integers(0, 4000))
def test_dinkelbach_equals_brute_force(pre, dec, n, need) -> None:
    gp, mp = [g for g, _ in pre], [m for _, m in pre]
    gd, md = [g for g, _ in dec], [m for _, m in dec]
    ratio, r_best = brute_force_disagg(gp, mp, gd, md, n, need)
    out = solve_disagg(gp, mp, gd, md, n, need)
    if ratio == 0:
        assert out is None
        return
    assert out is not None
    i, j, a, b, r, u, _, proven = out
    assert proven
    assert r == min(a * mp[i], b * md[j]) and u == a * gp[i] + b * gd[j] <= n and r >= need
    assert Fraction(r, u) == ratio  # the best goodput per GPU
    assert r == r_best  # then the most goodput


def _req(**kw) -> InferRequest:
    return InferRequest(model=get_model(kw.pop("model", "llama-3.1-8b")),
                        system=get_system(kw.pop("system", "dgx-h100")), num_gpus=kw.pop("gpus", 8),
                        workload=InferWorkload(prompt_len=2048, gen_len=256), **kw)


def _brute_force_rows(req: InferRequest, ttft: float, tpot: float) -> tuple[float, set[int]]:
    """Best goodput per GPU over every admissible worker row (no dominance filter, float capacities), and the
    EP degrees of the decode rows that reach it."""
    n, gen = req.num_gpus, req.workload.gen_len
    pre = _table(req, "prefill", worker_rows(req, "prefill"))
    dec = _table(req, "decode", worker_rows(req, "decode"))
    ok_p, ok_d = pre.fits & (pre.latency_s <= ttft), dec.fits & (dec.latency_s <= tpot)
    best, eps = 0.0, set()
    for i in np.flatnonzero(ok_p):
        for j in np.flatnonzero(ok_d):
            g1, g2 = int(pre.gpus[i]), int(dec.gpus[j])
            assert g1 == pre.tp[i] * pre.pp[i] * pre.ep[i] and g2 == dec.tp[j] * dec.pp[j] * dec.ep[j]
            for a in range(1, (n - g2) // g1 + 1):
                for b in range(1, (n - a * g1) // g2 + 1):
                    v = min(a * pre.capacity_rps[i], b * dec.capacity_rps[j]) * gen / (a * g1 + b * g2)
                    if v > best * (1 + 1e-9):
                        best, eps = v, {int(dec.ep[j])}
                    elif v >= best * (1 - 1e-9):
                        eps.add(int(dec.ep[j]))
    return best, eps


@pytest.mark.parametrize(("model", "system", "gpus", "ttft", "tpot"), [
    ("llama-3.1-8b", "dgx-h100", 8, 0.4, 0.03),
    ("mixtral-8x7b", "dgx-h100", 8, 1.0, 0.05),  # MoE: EP 1, 2, 4 per worker
    ("deepseek-v3", "hgx-h200", 16, 2.0, 0.05),  # MoE with MLA: EP up to 8 per worker
])
def test_plan_meets_the_limits_and_matches_brute_force_over_its_table(model, system, gpus, ttft, tpot) -> None:
    req = InferRequest(model=get_model(model), system=get_system(system), num_gpus=gpus,
                       workload=InferWorkload(prompt_len=2048, gen_len=256), max_ttft_s=ttft, max_tpot_s=tpot)
    res = plan_disaggregated(req)
    assert res.status == "optimal"
    m, p = res.metrics, res.plan
    assert m.ttft_s <= ttft and m.tpot_s <= tpot and m.gpus_used <= gpus
    used = sum(w.workers * w.tp * w.pp * w.ep for w in (p.prefill, p.decode))
    assert used == m.gpus_used
    best, eps = _brute_force_rows(req, ttft, tpot)
    assert m.tokens_per_s_per_gpu == pytest.approx(best, rel=1e-5)
    assert p.decode.ep in eps
    assert res.aggregated is not None and res.winner in ("aggregated", "disaggregated")


def test_worker_rows_span_the_expert_parallel_degrees() -> None:
    """A worker of EP degree e is e replicas (one EP group): every divisor of the expert count that fits, and
    only EP 1 for a dense model."""
    req = _req(model="mixtral-8x7b")
    rows = worker_rows(req, "decode")
    assert set(rows.ep.tolist()) == {1, 2, 4}  # divisors of 8 experts with tp·pp·ep < 8 GPUs
    assert (rows.dp == rows.ep).all() and (rows.tp * rows.pp * rows.ep < 8).all()
    assert set(worker_rows(_req(), "decode").ep.tolist()) == {1}


def test_expert_parallel_decode_wins_for_deepseek_v3_on_16_h200() -> None:
    """Without EP a DeepSeek-V3 decode worker at TP/PP over 8 GPUs keeps every MLA latent on each TP rank and all
    256 experts per GPU group; EP=8 keeps 32 experts per GPU and eight replicas' own KV caches. Under a 50 ms TPOT
    the planner picks EP for decode, and the plan beats the best plan restricted to EP = 1 (brute force)."""
    req = _req(model="deepseek-v3", system="hgx-h200", gpus=16, max_ttft_s=2.0, max_tpot_s=0.05)
    res = plan_disaggregated(req)
    assert res.status == "optimal" and res.plan.decode.ep > 1
    pre = _table(req, "prefill", worker_rows(req, "prefill"))
    dec = _table(req, "decode", worker_rows(req, "decode"))
    ok_p = pre.fits & (pre.latency_s <= 2.0)
    ok_d = dec.fits & (dec.latency_s <= 0.05) & (dec.ep == 1)
    no_ep = 0.0
    for i in np.flatnonzero(ok_p):
        for j in np.flatnonzero(ok_d):
            g1, g2 = int(pre.gpus[i]), int(dec.gpus[j])
            for a in range(1, (16 - g2) // g1 + 1):
                for b in range(1, (16 - a * g1) // g2 + 1):
                    no_ep = max(no_ep, min(a * pre.capacity_rps[i], b * dec.capacity_rps[j]) * 256 / (a * g1 + b * g2))
    assert res.metrics.tokens_per_s_per_gpu > 1.2 * no_ep


def test_dominance_keeps_one_row_per_worker_size() -> None:
    req = _req()
    t = _table(req, "decode", worker_rows(req, "decode"))
    kept = best_per_size(t, t.fits)
    assert len(set(kept.gpus.tolist())) == len(kept)
    for g, cap in zip(kept.gpus, kept.capacity_rps, strict=True):
        assert cap == pytest.approx(float(t.capacity_rps[t.fits & (t.gpus == g)].max()))


def test_disaggregate_cli_json_contract(run_cli) -> None:
    r = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "4", "-p", "1024", "-n", "128",
                "--disaggregate", "--json")
    assert r.code == 0, r.err
    d = r.json()
    for kind in ("prefill", "decode"):
        assert set(d["plan"][kind]) == {"tp", "pp", "ep", "workers", "batch_size"}
    assert {"ttft_s", "tpot_s", "tokens_per_s", "max_batch_size"} <= set(d["metrics"])
    assert d["winner"] in ("aggregated", "disaggregated")
    bad = run_cli("infer", "-m", "llama-3.1-8b", "-H", "dgx-h100", "--gpus", "1", "-p", "1024", "-n", "128",
                  "--disaggregate")
    assert bad.code == 2 and "gpus" in bad.err


def test_disaggregate_export_writes_each_workers_expert_parallel_flags(run_cli) -> None:
    r = run_cli("infer", "-m", "deepseek-v3", "-H", "hgx-h200", "--gpus", "16", "-p", "2048", "-n", "256",
                "--max-ttft-ms", "2000", "--max-tpot-ms", "50", "--disaggregate", "--json")
    assert r.code == 0, r.err
    plan = r.json()["plan"]
    e = run_cli("infer", "-m", "deepseek-v3", "-H", "hgx-h200", "--gpus", "16", "-p", "2048", "-n", "256",
                "--max-ttft-ms", "2000", "--max-tpot-ms", "50", "--disaggregate", "--export", "vllm")
    assert e.code == 0, e.err
    commands = [shlex.split(c) for c in e.out.strip().split("\n\n")]
    assert len(commands) == 2
    for argv, kind in zip(commands, ("prefill", "decode"), strict=True):
        w = plan[kind]

        def value(flag: str, argv: list[str] = argv) -> str | None:
            return argv[argv.index(flag) + 1] if flag in argv else None

        assert argv[:2] == ["vllm", "serve"]
        assert value("--tensor-parallel-size") == str(w["tp"]) and value("--pipeline-parallel-size") == str(w["pp"])
        assert value("--max-num-seqs") == str(w["batch_size"])
        assert json.loads(value("--kv-transfer-config"))["kv_connector"] == "NixlConnector"
        assert ("--enable-expert-parallel" in argv) == (w["ep"] > 1)
        assert value("--data-parallel-size") == (str(w["ep"]) if w["ep"] > 1 else None)
        flags = {a for a in argv if a.startswith("--")}
        assert flags <= set(VLLM_FLAGS["flags"])
        assert f"{kind}: start {w['workers']} such instance(s)" in e.err
        assert f"--disaggregation-mode {kind} --tp-size {w['tp'] * w['ep']} --pp-size {w['pp']}" in e.err
    assert plan["decode"]["ep"] > 1
    assert f"--dp-size {plan['decode']['ep']} --enable-dp-attention" in e.err


@pytest.mark.parametrize(("model", "system", "gpus", "tpot"), [
    ("llama-3.1-8b", "dgx-h100", 4, None),  # two rows per kind: presolve once sent the search bisecting R for 10 s
    ("qwen3-235b-a22b", "gb200-nvl72", 72, 0.03),  # EP up to 32 per worker; once ended FEASIBLE at the time limit
])
def test_real_tables_solve_to_proven_optimality_and_equal_brute_force(model, system, gpus, tpot) -> None:
    req = InferRequest(model=get_model(model), system=get_system(system), num_gpus=gpus,
                       workload=InferWorkload(prompt_len=1024, gen_len=256), max_tpot_s=tpot)
    pre = _table(req, "prefill", worker_rows(req, "prefill"))
    dec = _table(req, "decode", worker_rows(req, "decode"))
    bp = best_per_size(pre, pre.fits)
    bd = best_per_size(dec, dec.fits & (dec.latency_s <= (tpot or np.inf)))
    unit = 1e-6  # requests/s per integer unit: these tables stay far below 2^53 at this resolution
    mp = [int(v) for v in np.floor(bp.capacity_rps / unit)]
    md = [int(v) for v in np.floor(bd.capacity_rps / unit)]
    gp, gd = [int(g) for g in bp.gpus], [int(g) for g in bd.gpus]
    ratio, r_best = brute_force_disagg(gp, mp, gd, md, gpus)
    out = solve_disagg(gp, mp, gd, md, gpus, time_limit_s=10.0)
    assert out is not None
    i, j, a, b, r, u, _, proven = out
    assert proven and Fraction(r, u) == ratio and r == r_best == min(a * mp[i], b * md[j])
    res = plan_disaggregated(req)
    assert res.status == "optimal" and res.solver.wall_time_s < 5.0
