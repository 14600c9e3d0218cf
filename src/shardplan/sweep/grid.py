"""Grid syntax: comma lists and ranges of request fields, token counts, durations, and the YAML grid file.

Integer fields (``--gpus``, ``--global-batch``, ``--seq-len``, ``--prompt-len``, ``--gen-len``) take a comma list
of items, each one of::

    N            one value                          512
    A:B          every integer from A to B          1:4      → 1, 2, 3, 4
    A:B:S        arithmetic, step S, up to B         8:64:8   → 8, 16, …, 64
    A:B:xK       geometric, factor K, up to B        64:1024:x2 → 64, 128, 256, 512, 1024

Ranges include B when the progression lands on it. Values keep their first-seen order; repeats are dropped.
Name fields (``--model``, ``--hardware``, ``--dtype``) take a comma list. Every parser raises one
``ShardplanError`` naming the field on bad input.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from shardplan.errors import ShardplanError

MAX_AXIS_VALUES = 10_000
"""Most values one field may expand to."""
MAX_POINTS = 100_000
"""Most points a whole grid may expand to."""

_COUNT_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_COUNT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
RANGE_HELP = "a comma list and/or ranges A:B, A:B:STEP or A:B:xFACTOR (inclusive), e.g. 64:1024:x2."


def _int(text: str, field: str, item: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise ShardplanError(f"'{item}' is not an integer or a range A:B[:STEP|:xFACTOR]", field=field) from None
    if v < 1:
        raise ShardplanError(f"values must be ≥ 1 (got {v} in '{item}')", field=field)
    return v


def _range(item: str, field: str) -> list[int]:
    parts = item.split(":")
    if len(parts) not in (2, 3):
        raise ShardplanError(f"'{item}' is not a range A:B, A:B:STEP or A:B:xFACTOR", field=field)
    lo, hi = _int(parts[0], field, item), _int(parts[1], field, item)
    if lo > hi:
        raise ShardplanError(f"range '{item}' is empty: start {lo} > end {hi}", field=field)
    step = parts[2].strip() if len(parts) == 3 else "1"
    if step[:1].lower() == "x":
        factor = _int(step[1:], field, item)
        if factor < 2:
            raise ShardplanError(f"geometric factor must be ≥ 2 (got '{step}' in '{item}')", field=field)
        if math.log(hi / lo, factor) > MAX_AXIS_VALUES:
            raise ShardplanError(f"range '{item}' has more than {MAX_AXIS_VALUES} values", field=field)
        out, v = [], lo
        while v <= hi:
            out.append(v)
            v *= factor
        return out
    s = _int(step, field, item)
    if (hi - lo) // s + 1 > MAX_AXIS_VALUES:
        raise ShardplanError(f"range '{item}' has more than {MAX_AXIS_VALUES} values", field=field)
    return list(range(lo, hi + 1, s))


def _items(text: str, field: str) -> list[str]:
    items = [p.strip() for p in str(text).split(",")]
    if not any(items):
        raise ShardplanError("the list is empty", field=field)
    if not all(items):
        raise ShardplanError(f"'{text}' has an empty item (two commas, or a trailing comma)", field=field)
    return items


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def parse_ints(text: str | int | list[Any], *, field: str) -> list[int]:
    """Integers ≥ 1 from ``512,1024``, ``8:64:8``, ``64:1024:x2`` (or a YAML list of such items)."""
    if isinstance(text, list):
        return _unique([v for item in text for v in parse_ints(item, field=field)])
    if isinstance(text, bool):
        raise ShardplanError(f"'{text}' is not an integer", field=field)
    if isinstance(text, int):
        return [_int(str(text), field, str(text))]
    out: list[int] = []
    for item in _items(text, field):
        out += _range(item, field) if ":" in item else [_int(item, field, item)]
    values = _unique(out)
    if len(values) > MAX_AXIS_VALUES:
        raise ShardplanError(f"more than {MAX_AXIS_VALUES} values", field=field)
    return values


def parse_names(text: str | list[Any], *, field: str) -> list[str]:
    """Names from ``dgx-h100,dgx-b200`` (or a YAML list), stripped, in order, repeats dropped."""
    if isinstance(text, list):
        if not text:
            raise ShardplanError("the list is empty", field=field)
        return _unique([v for item in text for v in parse_names(item, field=field)])
    return _unique(_items(str(text), field))


def parse_count(text: str | float, *, field: str) -> float:
    """A count with a decimal suffix: ``15T`` = 15·10¹², ``300B``, ``2.5M``, ``40K`` or a plain number (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = _COUNT_RE.match(str(text))
        if not m or m.group(2).lower() not in _COUNT_UNITS:
            raise ShardplanError(f"'{text}' is not a count; use a number with K, M, B or T (15T = 15·10¹²)",
                                 field=field)
        value, unit = float(m.group(1)), m.group(2).lower()
    if not value > 0:
        raise ShardplanError(f"must be > 0 (got {text})", field=field)
    return value * _COUNT_UNITS[unit]


def parse_rates(text: str | float | list[Any], *, field: str) -> list[float]:
    """Positive numbers from ``5,10,20`` (or a YAML list)."""
    if isinstance(text, list):
        return _unique([v for item in text for v in parse_rates(item, field=field)])
    out = []
    for item in _items(str(text), field):
        try:
            v = float(item)
        except ValueError:
            raise ShardplanError(f"'{item}' is not a number", field=field) from None
        if not (v > 0 and math.isfinite(v)):
            raise ShardplanError(f"values must be > 0 (got '{item}')", field=field)
        out.append(v)
    return _unique(out)


def parse_duration(text: str | float, *, field: str) -> float:
    """Seconds in ``30d``, ``720h``, ``90m``/``90min``, ``3600s``, ``2w`` or a plain number of seconds (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = _DURATION_RE.match(str(text))
        if not m or m.group(2).lower() not in _DURATION_UNITS:
            raise ShardplanError(f"'{text}' is not a duration; use e.g. 30d, 720h, 90m or 3600s", field=field)
        value, unit = float(m.group(1)), m.group(2).lower()
    if not value > 0:
        raise ShardplanError(f"must be > 0 (got {text})", field=field)
    return value * _DURATION_UNITS[unit]


def load_grid_file(path: Path, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The mapping in a YAML (or JSON) grid file; keys may use dashes or underscores; unknown keys are errors."""
    import yaml

    if not path.is_file():
        raise ShardplanError(f"no such file '{path}'", field="grid")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ShardplanError(f"{path}: not valid YAML ({' '.join(str(e).split())})", field="grid") from None
    if not isinstance(data, dict) or not data:
        raise ShardplanError(f"{path}: must hold a mapping of field: value(s)", field="grid")
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in allowed:
            raise ShardplanError(f"{path}: unknown field '{key}'; allowed: {', '.join(allowed)}", field="grid")
        out[k] = value
    return out


def check_size(axes: dict[str, list[Any]]) -> int:
    """Points in the grid (the product of the axis lengths); at most ``MAX_POINTS``."""
    n = math.prod(len(v) for v in axes.values())
    if n == 0:
        empty = next(k for k, v in axes.items() if not v)
        raise ShardplanError("the grid is empty", field=empty.replace("_", "-"))
    if n > MAX_POINTS:
        sizes = " × ".join(f"{len(v)} {k}" for k, v in axes.items() if len(v) > 1)
        raise ShardplanError(f"the grid has {n:,} points ({sizes}); at most {MAX_POINTS:,}", field="grid")
    return n
