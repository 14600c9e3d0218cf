"""Every pinned request's ``--json`` output equals its golden file (captured before the operator refactor).

Numbers must match to 1e-9 relative: a refactor that moves code must not move results. An intentional change
regenerates the files (``python -m tests.golden.requests``) with the change named in the commit message.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from tests.golden.requests import GOLDEN_DIR, REQUESTS, run_request


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: missing" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, rel_tol=1e-9,
                                                                                       abs_tol=1e-12):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_golden(name: str) -> None:
    golden = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    assert golden["args"] == REQUESTS[name]
    code, data = run_request(REQUESTS[name])
    assert code == golden["code"]
    diffs = _diff(golden["json"], data)
    assert not diffs, "\n".join(diffs[:20])
