"""Flat tables of sweep rows: dotted column names (``plan.tp``, ``metrics.mfu``, ``cost.run_usd``), CSV that
reads back to the same values, and Parquet (pyarrow, the optional ``sweep`` extra)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from shardplan.errors import ShardplanError

PARQUET_MISSING = "--parquet needs pyarrow: pip install 'shardplan[sweep]'"


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted columns; lists become JSON text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, f"{name}.")
        elif isinstance(v, list):
            out[name] = json.dumps(v)
        else:
            out[name] = v
    return out


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns (union over rows, first-seen order) and the flat rows."""
    flat = [flatten(r) for r in rows]
    cols = list(dict.fromkeys(c for r in flat for c in r))
    nested = {c.rsplit(".", 1)[0] for c in cols if "." in c}
    cols = [c for c in cols if c not in nested]  # a group that is None on some rows (no plan): its columns stay empty
    return cols, [{c: r.get(c) for c in cols} for r in flat]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _parse(text: str) -> Any:
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """One line per row; floats written exactly (shortest round-trip form), empty cell for None."""
    cols, flat = table(rows)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in flat:
            w.writerow([_cell(r[c]) for c in cols])


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The flat rows of a CSV written by ``write_csv`` (numbers, booleans and None restored)."""
    with path.open(newline="") as f:
        return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def require_parquet() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ShardplanError(PARQUET_MISSING, field="parquet") from None


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """The flat table as one Parquet file."""
    require_parquet()
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, flat = table(rows)
    pq.write_table(pa.Table.from_pylist(flat), path)
