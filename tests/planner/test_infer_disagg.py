"""--disaggregate: CP-SAT (Dinkelbach) equals brute force on the integer model; plans respect the limits."""

from __future__ import annotations

from fractions import Fraction

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
    i, j, a, b, r, u, _ = out
    assert r == min(a * mp[i], b * md[j]) and u == a * gp[i] + b * gd[j] <= n and r >= need
    assert Fraction(r, u) == ratio  # the best goodput per GPU
    assert r == r_best  # then the most goodput


def _req(**kw) -> InferRequest:
    return InferRequest(model=get_model(kw.pop("model", "llama-3.1-8b")), system=get_system("dgx-h100"),
                        num_gpus=kw.pop("gpus", 8), workload=InferWorkload(prompt_len=2048, gen_len=256), **kw)


def test_plan_meets_the_limits_and_matches_brute_force_over_its_table() -> None:
    req = _req(max_ttft_s=0.4, max_tpot_s=0.03)
    res = plan_disaggregated(req)
    assert res.status == "optimal"
    m, p = res.metrics, res.plan
    assert m.ttft_s <= 0.4 and m.tpot_s <= 0.03 and m.gpus_used <= 8
    used = p.prefill.workers * p.prefill.tp * p.prefill.pp + p.decode.workers * p.decode.tp * p.decode.pp
    assert used == m.gpus_used
    # brute force over every admissible worker row (no dominance filter), float capacities
    pre = _table(req, "prefill", worker_rows(req, "prefill"))
    dec = _table(req, "decode", worker_rows(req, "decode"))
    ok_p, ok_d = pre.fits & (pre.latency_s <= 0.4), dec.fits & (dec.latency_s <= 0.03)
    best = 0.0
    for i in np.flatnonzero(ok_p):
        for j in np.flatnonzero(ok_d):
            g1, g2 = int(pre.gpus[i]), int(dec.gpus[j])
            for a in range(1, (8 - g2) // g1 + 1):
                for b in range(1, (8 - a * g1) // g2 + 1):
                    r = min(a * pre.capacity_rps[i], b * dec.capacity_rps[j])
                    best = max(best, r * 256 / (a * g1 + b * g2))
    assert m.tokens_per_s_per_gpu == pytest.approx(best, rel=1e-5)
    assert res.aggregated is not None and res.winner in ("aggregated", "disaggregated")


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
