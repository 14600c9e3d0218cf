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
    flexgen_percent_for,
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
    assert flexgen_percent_for(m, (0.2, 0.8, 0.0)) == (20, 80)  # 8.2% on the GPU is as near as FlexGen gets


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
    """An over-full policy whose shares are not whole percents still gets its fixes (they were rounded apart and
    no longer summed to one)."""
    m, system = get_model("opt-175b"), get_system("gcp-t4")
    policy = OffloadPolicy(gpu_batch_size=32, num_gpu_batches=16, weights=Placement.of(0.0, 0.5901, 0.4099),
                           kv_cache=Placement.of(0.0101, 0.5463, 0.4436), activations=Placement.of(0.0, 0.0, 1.0),
                           cpu_attention=False)
    rep = estimate_offload(m, system, OffloadWorkload(prompt_len=512, gen_len=32), policy, default_capacities(system))
    assert rep.status == "infeasible" and rep.suggestions


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
