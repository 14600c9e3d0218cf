"""The only float→integer conversion of the planner: CP-SAT needs integer coefficients.

Rounding is conservative: requirements (times, memory needs) round up, capacities round down, so no
plan can pass a limit through rounding. Values go through ``round(x, 6)`` before ``ceil`` so that float
noise (``0.425 / 1e-6 = 425000.00000000006``) does not add a unit.
"""

from __future__ import annotations

import math

import numpy as np

TIME_UNIT_S = 1e-6  # objective resolution for step times: 1 µs
RATE_UNIT_S = 1e-9  # objective resolution for seconds per sequence or per token: 1 ns
MEM_UNIT_BYTES = 2**20  # memory resolution: 1 MiB
MAX_EXACT = 2**53  # CP-SAT reports objectives as doubles: stay below the exactly representable integers


def _ceil(x: np.ndarray | float) -> np.ndarray:
    return np.ceil(np.round(np.asarray(x, dtype=float), 6)).astype(np.int64)


def to_int_time(seconds: np.ndarray | float, unit: float = TIME_UNIT_S) -> np.ndarray:
    """Times as integer units, rounded up."""
    return _ceil(np.asarray(seconds, dtype=float) / unit)


def to_int_need(nbytes: np.ndarray | float) -> np.ndarray:
    """A memory requirement in MiB, rounded up."""
    return _ceil(np.asarray(nbytes, dtype=float) / MEM_UNIT_BYTES)


def to_int_capacity(nbytes: float) -> int:
    """A memory capacity in MiB, rounded down."""
    return int(math.floor(round(nbytes / MEM_UNIT_BYTES, 6)))


def from_int_time(units: int | float, unit: float = TIME_UNIT_S) -> float:
    return float(units) * unit


def lexicographic(primary: np.ndarray, rank: np.ndarray) -> list[int]:
    """Coefficients ``primary·R + rank`` (R = number of rows): the primary objective first, then ties by rank.

    Raises if the largest coefficient would not be exact in a double.
    """
    n = len(rank)
    coeffs = primary.astype(object) * n + rank.astype(object)
    top = max(coeffs, default=0)
    if top >= MAX_EXACT:
        raise OverflowError(f"objective coefficient {top} exceeds 2^53; coarsen the time unit")
    return [int(c) for c in coeffs]


THROUGHPUT_UNIT = 1e-3  # objective resolution for throughputs: 0.001 tokens/s


def to_int_throughput(tokens_per_s: np.ndarray | float) -> np.ndarray:
    """A throughput (a capability) as integer units, rounded down."""
    x = np.round(np.asarray(tokens_per_s, dtype=float) / THROUGHPUT_UNIT, 6)
    return np.floor(x).astype(np.int64)


def from_int_throughput(units: int | float) -> float:
    return float(units) * THROUGHPUT_UNIT


# --- offload placements (factored CP-SAT form: integer percents, times and memory per percent) -------------
KIB = 2**10  # memory resolution of offload placements: 1 KiB


def to_int_need_kib(nbytes: np.ndarray | float) -> np.ndarray:
    """Memory requirements (or per-percent requirement coefficients) in KiB, rounded up."""
    return _ceil(np.asarray(nbytes, dtype=float) / KIB)


def to_int_capacity_kib(nbytes: float) -> int:
    """A memory capacity in KiB, rounded down."""
    return int(math.floor(round(nbytes / KIB, 6)))


def fine_time_unit(upper_s: float, *, finest: float = 1e-9, headroom: float = 2**-4) -> float:
    """The finest power-of-ten time unit (≥ ``finest``) at which a sum of up to ``upper_s`` seconds stays an
    exact integer with ``headroom`` to spare (per-percent rounding of small models needs sub-µs units)."""
    unit = finest
    while upper_s / unit >= MAX_EXACT * headroom:
        unit *= 10
    return unit
