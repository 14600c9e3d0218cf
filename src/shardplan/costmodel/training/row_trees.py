"""Per-row arrays inside cost trees (nested frozen dataclasses, dicts and lists of them), taken or spliced as rows.

The costs of many layouts live in trees whose leaves are numpy arrays of one entry per row. The table and the
per-stage search move rows between such trees thousands of times, so these helpers copy a dataclass field by
field without ``dataclasses.replace``'s re-initialisation (every cost class here has no ``__post_init__``; one
that has one goes through ``replace``), and they touch only the arrays of one entry per row: the rest (names,
scalars, arrays of another length) is shared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _rebuild(x: Any, values: dict[str, Any]) -> Any:
    cls = type(x)
    if hasattr(cls, "__post_init__"):
        return dataclasses.replace(x, **values)
    out = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(out, name, value)
    return out


def map_rows(tree: Any, fn: Callable[[np.ndarray], np.ndarray], n: int, *, drop_lists: bool = False,
             skip: Callable[[Any], bool] = lambda x: False) -> Any:
    """``tree`` with ``fn`` applied to every 1-D array of ``n`` entries (one per row); ``drop_lists``: lists
    become empty (the per-kind costs' operator lists, which a taken row set does not carry); a subtree ``skip``
    accepts is kept as it is."""

    def go(x: Any) -> Any:
        if skip(x):
            return x
        if isinstance(x, np.ndarray):
            return fn(x) if x.ndim == 1 and len(x) == n else x
        if isinstance(x, list):
            return [] if drop_lists else [go(v) for v in x]
        if isinstance(x, dict):
            return {k: go(v) for k, v in x.items()}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return _rebuild(x, {f: go(getattr(x, f)) for f in _field_names(type(x))})
        return x

    return go(tree)


def splice_rows(base: Any, sub: Any, where: np.ndarray, n_base: int, n_sub: int,
                skip: Callable[[Any], bool] = lambda x: False) -> Any:
    """The tree of rows ``base`` (``n_base`` of them) with rows ``where`` replaced by ``sub``'s first
    ``len(where)`` and ``sub``'s others appended: the tree ``sub``'s function would give for those rows, when that
    function is row by row. Both trees have the same structure; a subtree ``skip`` accepts is kept from ``base``."""
    k = len(where)

    def go(a: Any, b: Any) -> Any:
        if skip(a):
            return a
        if isinstance(a, np.ndarray):
            if a.ndim != 1 or len(a) != n_base:
                return a
            out = np.concatenate([a, np.asarray(b)[k:]]) if n_sub > k else np.array(a)
            out[where] = np.asarray(b)[:k]
            return out
        if isinstance(a, list):
            if len(a) != len(b):
                raise ValueError("splice_rows: lists of different lengths")
            return [go(x, y) for x, y in zip(a, b, strict=True)]
        if isinstance(a, dict):
            if a.keys() != b.keys():
                raise ValueError("splice_rows: dicts with different keys")
            return {key: go(a[key], b[key]) for key in a}
        if dataclasses.is_dataclass(a) and not isinstance(a, type):
            return _rebuild(a, {f: go(getattr(a, f), getattr(b, f)) for f in _field_names(type(a))})
        return a

    return go(base, sub)
