"""Physical units and datatype sizes. A leaf module: only ``errors`` from the package."""

from __future__ import annotations

import math
import re

from shardplan.errors import ShardplanError

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4

TFLOPS = 1e12
GBPS = 1e9  # bytes per second

# Bytes per element of each datatype (int4/fp4 pack two values per byte).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}

_SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": KB, "kb": KB, "m": MB, "mb": MB, "g": GB, "gb": GB, "t": TB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
}
MAX_SIZE = 2**60
"""Largest size accepted anywhere (1 EiB): far above any machine, far below where float arithmetic goes wrong."""
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str | int | float, *, field: str = "size") -> int:
    """Bytes in a size such as ``208GiB``, ``1.5TB``, ``512MB`` or a plain number of bytes."""
    if isinstance(text, bool):
        raise ShardplanError(f"'{text}' is not a size", field=field)
    if isinstance(text, int | float):
        if isinstance(text, int) and abs(text) > MAX_SIZE:
            raise ShardplanError("must be at most 1 EiB (2^60 bytes)", field=field)
        value, unit = float(text), ""
    else:
        if len(text) > 64:
            raise ShardplanError(f"'{text[:20]}…' is not a size (too long)", field=field)
        m = _SIZE_RE.match(text)
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ShardplanError(
                f"'{text}' is not a size; use a number with a unit such as 80GiB, 1.5TB or 512MB", field=field
            )
        value, unit = float(m.group(1)), m.group(2).lower()
    if value < 0:
        raise ShardplanError(f"'{text}' must not be negative", field=field)
    size = value * _SIZE_UNITS[unit]
    if not math.isfinite(size) or size > MAX_SIZE:
        raise ShardplanError(f"'{text}' must be at most 1 EiB (2^60 bytes)", field=field)
    return int(round(size))


def format_bytes(n: float) -> str:
    """A byte count in binary units with three significant digits (``79.3 GiB``); rounding noise is 0 (never -0)."""
    if abs(n) < 0.5:
        return "0 B"
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            v = n / size
            # 999.5–1023.9 of a unit (and ≥ 1000 TiB) would print as "1e+03": whole units instead
            return f"{v:,.0f} {unit}" if abs(v) >= 999.5 else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def format_count(n: float) -> str:
    """A count with a metric suffix (``70.6B``, ``131M``)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            v = n / size
            return f"{v:,.0f}{unit}" if abs(v) >= 9999.5 else f"{v:.4g}{unit}"  # never "1e+04T"
    return f"{n:.0f}"


def format_seconds(t: float) -> str:
    """A duration with a sensible unit (``13.7 s``, ``41.2 ms``, ``8 µs``), never in exponent notation."""
    if not math.isfinite(t):
        return f"{t} s"
    if abs(t) < 5e-10:
        return "0 s"
    if abs(t) >= 1e4:
        return f"{t:,.0f} s"
    if abs(t) >= 0.9995:  # 0.9995 s would print as 1000 ms
        return f"{t:.4g} s"
    if abs(t) >= 0.9995e-3:
        return f"{t * 1e3:.4g} ms"
    return f"{t * 1e6:.3g} µs"


def format_ms(t: float) -> str:
    """A duration in milliseconds for a column headed "ms": three significant digits, never exponent notation."""
    v = t * 1e3
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 999.5:
        return f"{v:,.0f}"
    if abs(v) >= 1e-3:
        return f"{v:.3g}"
    return "0" if abs(v) < 5e-7 else f"{v:.6f}".rstrip("0")


def plural(n: int, word: str) -> str:
    """``1 sequence``, ``2 sequences``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"
