"""The package's shape: no import cycles anywhere, modules of a readable size (import-linter checks the layers)."""

from __future__ import annotations

from pathlib import Path

import grimp

import shardplan

MAX_MODULE_LINES = 420


def test_no_import_cycles() -> None:
    """No module reaches itself through the imports that run (cycles between sibling modules included).
    Annotations-only imports under ``TYPE_CHECKING`` never execute, so they close no cycle."""
    graph = grimp.build_graph("shardplan", cache_dir=None, exclude_type_checking_imports=True)
    cycles = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            chain = graph.find_shortest_chain(importer=imported, imported=importer)
            if chain:
                cycles.append(" → ".join((importer, *chain)))
    assert not cycles, "\n".join(cycles[:10])


def test_modules_stay_small() -> None:
    root = Path(shardplan.__file__).parent
    big = {str(p.relative_to(root)): n for p in root.rglob("*.py") if (n := len(p.read_text().splitlines()))
           > MAX_MODULE_LINES}
    assert not big, big
