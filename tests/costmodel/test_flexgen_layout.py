"""FlexGen's whole-tensor weight placement (``offload.flexgen_layout``), its use for the published FlexGen runs and
for ``--export flexgen``."""

import json
import re

import pytest
from typer.testing import CliRunner

from shardplan.cli import app
from shardplan.costmodel.offload.evaluate import estimate_offload
from shardplan.costmodel.offload.flexgen_layout import (
    FLEXGEN_MAX_SEQ_LEN,
    flexgen_candidates,
    flexgen_weight_split,
)
from shardplan.costmodel.offload.policy import OffloadPolicy, OffloadWorkload, Placement, default_capacities
from shardplan.hardware import get_system
from shardplan.models import get_model
from shardplan.validation.runs import flexgen_policy, load_records


def test_percent_20_80_puts_the_output_projections_and_vectors_on_the_gpu() -> None:
    """By hand for OPT-30B (h 7168, f 28672, v 50272, 48 layers) and ``--percent 20 80``: in each attention layer the
    tensor midpoints fall at about 12.5, 37.5, 62.5 and 87.5% (q, k, v, out), so only the output projection, its
    bias and the layer norm pass 80%; in each MLP fc1 (25%), its bias (50%) and fc2 (75%) stay on the CPU, fc2's bias
    and the norm go to the GPU; the input embedding's position table (its last ~1%) goes to the GPU, the token
    tables to the CPU."""
    m = get_model("opt-30b")
    h, f, v, n, s = 7168.0, 28672.0, 50272.0, 48, FLEXGEN_MAX_SEQ_LEN
    gpu = n * (h * h + 3 * h) + n * 3 * h + (s + 2) * h
    total = 2 * v * h + (s + 2) * h + n * (4 * h * h + 6 * h) + n * (2 * f * h + f + 3 * h) + 2 * h
    share = flexgen_weight_split(m, 20, 80)
    assert share[0] == pytest.approx(gpu / total, rel=1e-12)
    assert share[1] == pytest.approx(1 - gpu / total, rel=1e-12) and share[2] == 0.0
    assert share[0] == pytest.approx(0.0819, abs=1e-4)  # not 20%


def test_whole_tiers_and_even_halves_are_exact() -> None:
    m = get_model("opt-175b")
    assert flexgen_weight_split(m, 100, 0) == (1.0, 0.0, 0.0)
    assert flexgen_weight_split(m, 0, 100) == (0.0, 1.0, 0.0)
    g, c, d = flexgen_weight_split(m, 0, 50)  # q, k and fc1 on disk; v, out and fc2 on the CPU
    assert g == 0.0 and c == pytest.approx(0.5, abs=1e-3) and d == pytest.approx(0.5, abs=1e-3)


def test_candidates_are_distinct_placements_nearest_first() -> None:
    m = get_model("opt-30b")
    cands = flexgen_candidates(m, (0.2, 0.8, 0.0), 6)
    misses = [round(sum(abs(a - b) for a, b in zip(got, (0.2, 0.8, 0.0), strict=True)) / 2, 9) for _, _, got in cands]
    assert misses == sorted(misses) and len({got for _, _, got in cands}) == 6
    for g, c, got in cands:
        assert got == pytest.approx(flexgen_weight_split(m, g, c))
    assert cands[0][:2] == (20, 80)  # 8.2% on the GPU is as near as FlexGen gets


@pytest.mark.parametrize("rid", ["flexgen-s512-flexgen-OPT-30B", "flexgen-repo-s256-flexgen-OPT-30B"])
def test_published_opt_30b_policies_fit_as_they_ran(rid: str) -> None:
    """FlexGen ran these on its 16 GB T4: with the weight bytes where FlexGen puts them they fit (read as byte shares,
    20% of OPT-30B's weights alone would have needed 11.2 GiB of the GPU)."""
    (rec,) = [r for r in load_records("offload_runs") if r["id"] == rid]
    m, system = get_model("opt-30b"), get_system("gcp-t4")
    work = OffloadWorkload(prompt_len=rec["workload"]["prompt_len"], gen_len=rec["workload"]["gen_len"])
    policy = flexgen_policy(rec, m)
    p = rec["parallel"]["offload_policy_percent"]
    assert policy.weights.as_tuple() == pytest.approx(flexgen_weight_split(m, p["wg"], p["wc"]))
    assert estimate_offload(m, system, work, policy, default_capacities(system)).status == "feasible"


def test_a_fix_from_uneven_shares_does_not_break_the_placement() -> None:
    """An over-full policy whose shares are not whole percents still gets its fixes: they were rounded to four decimals
    apart, and these shares then no longer summed to one (a crash before)."""
    m, system = get_model("opt-175b"), get_system("gcp-t4")
    policy = OffloadPolicy(
        gpu_batch_size=32, num_gpu_batches=16,
        weights=Placement.of(0.6652300066862088, 0.021254131078561812, 0.31351586223522954),
        kv_cache=Placement.of(0.19502916324278835, 0.7236425341636187, 0.08132830259359297),
        activations=Placement.of(0.0, 0.0, 1.0), cpu_attention=False)
    rep = estimate_offload(m, system, OffloadWorkload(prompt_len=512, gen_len=32), policy, default_capacities(system))
    assert rep.status == "infeasible" and rep.suggestions


def _flexgen_loop(model_name: str, gpu: int, cpu: int) -> tuple[float, float, float]:
    """FlexGen's own loop, transcribed (``init_weight_list`` with ``get_choice``, flex_opt.py l.82-131), over its OPT
    layers' weight specs (l.152-157, 216-223, 284-305, 480-493): bytes per tier."""
    m = get_model(model_name)
    h, f, v = m.hidden_size, m.ffn_hidden_size, m.vocab_size
    layers = [[v * h, (2048 + 2) * h]] + [[h * h, h] * 4 + [h, h], [f * h, f, h * f, h, h, h]] * m.num_layers
    layers.append([h, h, v * h])
    percents = [100 - gpu - cpu, cpu, gpu]  # disk, CPU, GPU
    tiers = {0: 0.0, 1: 0.0, 2: 0.0}
    for sizes in layers:
        total, cum = sum(sizes), 0
        for size in sizes:
            cum += size
            mid = (cum - size / 2) / total * 100
            bound, choice = 0.0, 2
            for i, pct in enumerate(percents):
                bound += pct
                if mid < bound:
                    choice = i
                    break
            tiers[choice] += size
    all_bytes = sum(tiers.values())
    return tiers[2] / all_bytes, tiers[1] / all_bytes, tiers[0] / all_bytes


@pytest.mark.parametrize(("name", "gpu", "cpu"), [("opt-30b", 20, 80), ("opt-30b", 13, 50), ("opt-175b", 0, 26),
                                                  ("opt-13b", 67, 8), ("opt-6.7b", 30, 40), ("opt-66b", 5, 0)])
def test_the_split_is_flexgens_loop(name: str, gpu: int, cpu: int) -> None:
    assert flexgen_weight_split(get_model(name), gpu, cpu) == pytest.approx(_flexgen_loop(name, gpu, cpu), abs=1e-12)


def test_export_picks_a_placement_flexgen_can_fit_and_no_needless_disk() -> None:
    """OPT-175B on the A6000 workstation: the plan's shares, read by FlexGen's rule at the nearest pair, overfill the
    GPU; the export picks the fastest placement FlexGen can make that fits, as the note prices it. OPT-6.7B on the T4:
    a placement that puts nothing on disk is exported with no disk percentage."""
    out = CliRunner().invoke(app, ["offload", "-m", "opt-175b", "-H", "a6000-ws", "-p", "512", "--gen-len", "32",
                                   "--export", "flexgen"])
    assert out.exit_code == 0, out.output
    assert "no placement FlexGen can make fits" not in out.stderr and "tokens/s as exported" in out.stderr
    pct = [int(x) for x in re.search(r"--percent ((?:\d+ ){5}\d+)", out.stdout).group(1).split()]
    m, system = get_model("opt-175b"), get_system("a6000-ws")
    plan = json.loads(CliRunner().invoke(app, ["offload", "-m", "opt-175b", "-H", "a6000-ws", "-p", "512",
                                               "--gen-len", "32", "--export", "flexgen", "--output", "/dev/null",
                                               "--json"]).stdout)["plan"]
    policy = OffloadPolicy(
        gpu_batch_size=plan["gpu_batch_size"], num_gpu_batches=plan["num_gpu_batches"],
        weights=Placement.of(*flexgen_weight_split(m, pct[0], pct[1])),
        kv_cache=Placement.of(pct[2] / 100, pct[3] / 100, 1 - (pct[2] + pct[3]) / 100),
        activations=Placement.of(pct[4] / 100, pct[5] / 100, 1 - (pct[4] + pct[5]) / 100),
        cpu_attention=plan["cpu_attention"])
    rep = estimate_offload(m, system, OffloadWorkload(prompt_len=512, gen_len=32), policy, default_capacities(system))
    assert rep.status != "infeasible"
    note = re.search(r"([\d.]+) tokens/s as exported", out.stderr)
    assert float(note.group(1)) == pytest.approx(rep.metrics.tokens_per_s, rel=0.02)  # the plan's KV shares exactly
    out = CliRunner().invoke(app, ["offload", "-m", "opt-6.7b", "-H", "gcp-t4", "-p", "512", "--gen-len", "32",
                                   "--export", "flexgen"])
    assert out.exit_code == 0 and "--percent 87 13 " in out.stdout


def test_export_names_where_flexgen_puts_the_weights_and_prices_that() -> None:
    """``estimate offload --export flexgen`` of the published OPT-30B policy: the note's number is the estimate of
    the placement FlexGen makes, as ``estimate offload`` gives it for those byte shares."""
    args = ["estimate", "offload", "-m", "opt-30b", "-H", "gcp-t4", "--prompt-len", "512", "--gen-len", "32",
            "--gpu-batch", "48", "--num-gpu-batches", "3", "--weights", "20,80,0", "--kv-cache", "0,100,0",
            "--activations", "0,100,0", "--cpu-attention"]
    out = CliRunner().invoke(app, [*args, "--export", "flexgen"])
    assert out.exit_code == 0, out.output
    assert "--percent 20 80 0 100 0 100" in out.stdout
    note = re.search(r"puts 8%/92%/0% there: ([\d.]+) tokens/s as exported", out.stderr)
    assert note is not None, out.stderr
    g, c, d = flexgen_weight_split(get_model("opt-30b"), 20, 80)
    same = CliRunner().invoke(app, [*(a if a != "20,80,0" else f"{100 * g},{100 * c},{100 * d}" for a in args),
                                    "--json"])
    assert same.exit_code == 0, same.output
    assert float(note.group(1)) == pytest.approx(json.loads(same.stdout)["metrics"]["tokens_per_s"], rel=2e-3)
