"""Recompute the error-band table shipped in src/shardplan/data/error_bands.json and print its coverage.

Run: .venv/bin/python benchmarks/error_bands.py [--check]   (--check: compare with the shipped file, write nothing)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from shardplan.validation.bands import _report, band_coverage, band_table

OUT = Path(__file__).resolve().parents[1] / "src" / "shardplan" / "data" / "error_bands.json"


def main() -> int:
    report = _report()
    table = band_table(report)
    for kind, c in band_coverage(report, table).items():
        print(f"{kind}: {c['inside_pct']:.1f}% of {c['cases']} measured values inside their band, "
              f"median band width {c['median_width_pct']:.1f}% (±{c['median_width_pct'] / 2:.1f}%)")
    print(json.dumps(table["bands"], indent=1))
    if "--check" in sys.argv:
        same = json.loads(OUT.read_text()) == table
        print("shipped table is up to date" if same else "shipped table differs: re-run without --check")
        return 0 if same else 1
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
