"""The README's examples are the tool's real output (``python -m tests.readme_examples`` regenerates them)."""

from __future__ import annotations

import pytest
from tests.readme_examples import README, blocks, masked, render

BLOCKS = blocks(README.read_text())


def test_readme_has_generated_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize(("spec", "body"), BLOCKS, ids=[s.split(" | ")[0][:40] for s, _ in BLOCKS])
def test_readme_example_is_current(spec: str, body: str) -> None:
    assert masked(render(spec)) == masked(body), "README example is stale: run python -m tests.readme_examples"
