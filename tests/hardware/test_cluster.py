"""``Cluster``: whole nodes beyond one node, a network to cross nodes, and the node limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shardplan.hardware import SYSTEMS, Cluster


def test_within_one_node():
    c = Cluster(system=SYSTEMS["dgx-h100"], num_gpus=4)
    assert c.num_nodes == 1 and c.gpus_per_node == 4 and c.gpu is SYSTEMS["dgx-h100"].gpu


def test_whole_nodes():
    c = Cluster(system=SYSTEMS["dgx-h100"], num_gpus=64)
    assert c.num_nodes == 8 and c.gpus_per_node == 8


def test_nvl72_is_one_node_of_72():
    assert Cluster(system=SYSTEMS["gb200-nvl72"], num_gpus=72).num_nodes == 1
    assert Cluster(system=SYSTEMS["gb200-nvl72"], num_gpus=144).num_nodes == 2


def test_gpus_must_be_a_multiple_of_the_node_size():
    with pytest.raises(ValidationError, match=r"gpus \(12\) must be ≤ 8 or a multiple of 8"):
        Cluster(system=SYSTEMS["dgx-a100-80gb"], num_gpus=12)


@pytest.mark.parametrize("name", ["gcp-t4", "a6000-ws", "rtx4090-pc"])
def test_more_than_one_node_needs_a_network(name: str):
    with pytest.raises(ValidationError, match="which has no network"):
        Cluster(system=SYSTEMS[name], num_gpus=2)


def test_max_nodes():
    small = SYSTEMS["dgx-h100"].model_copy(update={"max_nodes": 2})
    assert Cluster(system=small, num_gpus=16).num_nodes == 2
    with pytest.raises(ValidationError, match=r"exceeds 2 nodes"):
        Cluster(system=small, num_gpus=24)


def test_at_least_one_gpu():
    with pytest.raises(ValidationError, match="num_gpus"):
        Cluster(system=SYSTEMS["dgx-h100"], num_gpus=0)
