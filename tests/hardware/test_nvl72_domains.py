"""Rack-scale NVLink systems (GB200/GB300 NVL72): whole 4-GPU trays, and jobs beyond one rack laid out as the
Megatron-Bridge launcher's Slurm segments (hardware/domains.py). Expected layouts are worked by hand from the
launcher's rule (segments of the largest divisor of the tray count up to 18) and by enumerating ranks in
Megatron's order (TP innermost, then CP, DP, PP)."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.costmodel.core import comm
from shardplan.costmodel.core.layouts import check_gpus
from shardplan.errors import ShardplanError
from shardplan.hardware import SYSTEMS
from shardplan.hardware.domains import domain_size, job_system

NVL = SYSTEMS["gb200-nvl72"]


@pytest.mark.parametrize(("gpus", "domain"), [
    (8, 72), (64, 72), (72, 72),  # ≤ 18 trays: one segment, one NVLink domain
    (144, 72),  # 36 trays: segments of 18 (2 full racks)
    (256, 64),  # 64 trays: largest divisor ≤ 18 is 16 → 4 domains of 64 GPUs (the published GB200/GB300 runs)
    (260, 52),  # 65 trays = 5 × 13 → 5 domains of 52
    (1024, 64),  # 256 trays: 16 → 16 domains of 64
])
def test_domains_follow_the_launchers_segments(gpus: int, domain: int):
    assert domain_size(NVL, gpus) == domain
    laid = job_system(NVL, gpus)
    assert laid.gpus_per_node == domain and job_system(laid, gpus) is laid  # idempotent
    check_gpus(laid, gpus)


def _domains_of(groups: list[list[int]], per_domain: int) -> list[set[int]]:
    return [{r // per_domain for r in g} for g in groups]


def test_tp4_groups_stay_inside_one_domain_on_256_gpus():
    # TP4 CP1 DP64 on 256 GPUs: TP groups are 4 consecutive ranks; domains hold ranks [64·i, 64·i + 64).
    laid = job_system(NVL, 256)
    tp_groups = [list(range(s, s + 4)) for s in range(0, 256, 4)]
    assert all(len(d) == 1 for d in _domains_of(tp_groups, 64))
    assert comm.members_per_node(laid, np.array(4), np.array(1)) == 4  # priced as one NVLink domain
    s = np.array(64e6)
    inside = comm.all_reduce_time(laid, s, np.array(4), np.array(1))
    assert inside == pytest.approx(comm.all_reduce_time(NVL, s, np.array(4), np.array(1)))  # same as inside a rack


def test_dp_crosses_the_network_on_256_gpus():
    # DP64 at stride 4: ranks {j + 4i}; each spans all 4 domains with 16 members in each.
    laid = job_system(NVL, 256)
    dp_groups = [[j + 4 * i for i in range(64)] for j in range(4)]
    assert all(d == {0, 1, 2, 3} for d in _domains_of(dp_groups, 64))
    assert all(sum(r // 64 == 0 for r in g) == 16 for g in dp_groups)
    assert comm.members_per_node(laid, np.array(64), np.array(4)) == 16
    s = np.array(1e9)
    across = comm.all_reduce_time(laid, s, np.array(64), np.array(4))
    # 4 nodes of 16: the network phase moves 2·(4−1)/4 of the 1/16 share per NIC at the network's rate
    assert NVL.inter_node is not None
    net = 2 * 3 / 4 * float(s) / 16 / (NVL.inter_node.bandwidth_bytes_per_s * NVL.inter_node.efficiency)
    assert across >= net
    # small messages are latency-bound: the network hops make the cross-domain call slower than the same 64
    # ranks inside one rack (large ones are not: 16 NICs per domain carry 1/16 each, rail-parallel)
    small = np.array(4096.0)
    assert comm.all_reduce_time(laid, small, np.array(64), np.array(4)) > \
        comm.all_reduce_time(NVL, small, np.array(64), np.array(1))


def test_host_resources_follow_the_gpus():
    laid = job_system(NVL, 256)
    assert laid.host_memory_bytes / laid.gpus_per_node == pytest.approx(NVL.host_memory_bytes / 72, rel=1e-9)
    assert "4 NVLink domains of 64 GPUs (16 trays)" in laid.description


def test_count_that_is_not_whole_trays_is_refused():
    with pytest.raises(ShardplanError, match=r"gpus \(258\) must be ≤ 4 or a multiple of 4: .* trays of 4 GPUs"):
        job_system(NVL, 258)


def test_unlaid_system_is_refused_for_a_multi_domain_job():
    with pytest.raises(ShardplanError, match=r"gpus \(256\): gb200-nvl72 runs them as 4 NVLink domains of 64"):
        check_gpus(NVL, 256)


@pytest.mark.parametrize("gpus", [8, 16, 64, 1024])
def test_dgx_nodes_are_unchanged(gpus: int):
    assert job_system(SYSTEMS["dgx-h100"], gpus) is SYSTEMS["dgx-h100"]
    with pytest.raises(ShardplanError, match=r"must be ≤ 8 or a multiple of 8"):
        check_gpus(SYSTEMS["dgx-h100"], 12)


def test_cli_refuses_258_on_nvl72_in_one_line(run_cli):
    r = run_cli("train", "-m", "llama-3.1-8b", "-H", "gb200-nvl72", "-g", "258", "-b", "516", "-s", "4096")
    assert r.code == 2 and "Traceback" not in r.err
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "multiple of 4" in lines[0] and "trays of 4 GPUs" in lines[0]


def test_cli_plans_256_on_gb300(run_cli):
    r = run_cli("estimate", "train", "-m", "llama-3.1-8b", "-H", "gb300-nvl72", "-g", "256", "-b", "256", "-s",
                "4096", "--tp", "4", "--json")
    assert r.code == 0, r.err


def test_export_launches_one_process_per_gpu_of_a_tray(run_cli):
    """Megatron-Bridge launches GB200 jobs with 4 tasks per node (``--gpus_per_node 4``): 256 GPUs are 64 hosts."""
    r = run_cli("train", "-m", "llama-3.1-8b", "-H", "gb200-nvl72", "-g", "256", "-b", "256", "-s", "4096",
                "--export", "megatron")
    assert r.code == 0, r.err
    assert "--nnodes 64 --nproc-per-node 4" in r.out + r.err


def test_a_system_file_with_a_tray_that_does_not_divide_the_node_is_refused():
    from pydantic import ValidationError

    from shardplan.hardware.spec import SystemSpec

    with pytest.raises(ValidationError, match=r"gpus_per_tray \(5\) must divide gpus_per_node \(72\)"):
        SystemSpec.model_validate({**dict(NVL), "gpus_per_tray": 5})
