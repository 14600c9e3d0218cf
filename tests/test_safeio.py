"""Bounded readers: one walk for parsed data and for YAML nodes, checked on hand-built hostile inputs."""

from __future__ import annotations

import pytest

from shardplan import safeio
from shardplan.errors import ConfigFileError


def _laughs(levels: int) -> str:
    """'Billion laughs': each level lists the previous one ten times (10^levels leaves through aliases)."""
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(levels):
        prev, cur = chr(97 + i), chr(98 + i)
        text += f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    return text


def test_aliases_count_once_per_use_and_expansion_is_refused() -> None:
    assert safeio.load_yaml("a: &x [1, 2]\nb: *x\n", where="f", field="f") == {"a": [1, 2], "b": [1, 2]}
    assert safeio.load_yaml(_laughs(3), where="f", field="f")["d"][0][0][0] == ["x"] * 10  # 10^4 leaves: fine
    with pytest.raises(ConfigFileError, match="more than 100,000 values"):
        safeio.load_yaml(_laughs(8), where="f", field="f")


@pytest.mark.parametrize("text, loader", [("a: " + "[" * 100 + "]" * 100, safeio.load_yaml),
                                          ("[" * 100 + "]" * 100, safeio.load_json)])
def test_nesting_beyond_the_limit_is_refused(text: str, loader) -> None:
    with pytest.raises(ConfigFileError, match="nested deeper than 64 levels"):
        loader(text, where="f", field="f")


def test_parsed_data_counts_keys_and_values() -> None:
    safeio.check_size({"k": list(range(99_997))}, where="f", field="f")  # 1 + key + list + 99,997 = 100,000
    with pytest.raises(ConfigFileError, match="more than 100,000 values"):
        safeio.check_size({"k": list(range(99_998))}, where="f", field="f")
    loop: list = []
    loop.append(loop)
    with pytest.raises(ConfigFileError, match="refers to itself"):
        safeio.check_size(loop, where="f", field="f")
