"""Fixtures of the exporter tests: every fixed plan, the golden ones alone."""

from __future__ import annotations

import pytest
from export_plans import CORNERS, GOLDEN_PLANS

from shardplan.cli.export.base import TrainTarget


@pytest.fixture(params=sorted(GOLDEN_PLANS))
def golden_plan(request: pytest.FixtureRequest) -> tuple[str, TrainTarget]:
    return request.param, GOLDEN_PLANS[request.param]


@pytest.fixture(params=sorted(GOLDEN_PLANS | CORNERS))
def any_plan(request: pytest.FixtureRequest) -> tuple[str, TrainTarget]:
    return request.param, (GOLDEN_PLANS | CORNERS)[request.param]
