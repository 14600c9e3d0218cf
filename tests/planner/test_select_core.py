"""The infeasibility core: the deletion filter (large tables) and CP-SAT's assumptions (small ones) both name a set of
requirements that no row meets together; the filter's set is irreducible. Checked by brute force over the rows."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.planner.core.select import _deletion_core, explain_infeasible


def _blocked(violations: dict[str, np.ndarray], reqs: list[str]) -> bool:
    """True when every row breaks at least one of ``reqs`` (brute force over rows)."""
    n = len(next(iter(violations.values())))
    return all(any(violations[r][i] for r in reqs) for i in range(n))


@pytest.mark.parametrize("seed", range(20))
def test_both_cores_block_every_row_and_the_filter_is_irreducible(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"r{k}" for k in range(5)]
    rows = 40
    violations = {n: rng.random(rows) < 0.45 for n in names}
    # make the whole set infeasible: every row breaks at least one requirement
    for i in range(rows):
        if not any(violations[n][i] for n in names):
            violations[names[rng.integers(5)]][i] = True
    filt = _deletion_core(violations)
    assert filt and _blocked(violations, filt)
    for r in filt:  # irreducible: without any one of them some row meets the rest
        assert not _blocked(violations, [x for x in filt if x != r])
    sat = explain_infeasible(violations)
    assert sat and _blocked(violations, sat)


def test_a_feasible_table_has_no_core() -> None:
    v = {"a": np.array([True, False]), "b": np.array([False, False])}
    assert _deletion_core(v) == [] and explain_infeasible(v) == []


def test_objectives_whose_sum_passes_2_62_select_the_brute_force_order() -> None:
    """Coefficients below 2^53 whose sum passes 2^62 (CP-SAT's overflow check) once raised OverflowError; CP-SAT now
    gets each row's position in the exact order, and picks what sorting by (objective, rank) picks."""
    from shardplan.planner.core.scaling import MAX_EXACT, MAX_OBJECTIVE_SUM
    from shardplan.planner.core.select import brute_force, select

    rng = np.random.default_rng(0)
    n = 3000
    primary = rng.integers(2**40, 2**41, size=n)
    rank = rng.permutation(n)
    top = int(primary.max()) * n + n
    assert top < MAX_EXACT and top * n >= MAX_OBJECTIVE_SUM  # the case that overflowed
    sel = select(primary, rank, k=3, time_limit_s=30)
    assert sel.indices == brute_force(primary, rank, k=3)
